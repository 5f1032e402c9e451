#!/usr/bin/env bash
# Creates (once) a virtual environment with SGLang for the CPU, for the test suite and for
# plans that serve with SGLang on a machine without a GPU.
#   scripts/setup-sglang-cpu.sh [DEST]   default DEST: ${SERVEDIFF_CACHE:-~/.cache/servediff}/engines/sglang-cpu
# Prints DEST/bin/python when ready. Idempotent: a finished environment is reused.
#
# SGLang 0.5.23 without its CUDA kernel packages: its own wheel, its pure-Python
# requirements at its pins, and torch 2.14.1 (the registry's CUDA build, which imports
# without a GPU; torch 2.13.0+cpu does not work, the registry's torchvision links
# libtorch_cuda.so and SGLang imports torchvision at start).
#
# DEST/stand-in/sgl_kernel is servediff's own stand-in for SGLang's kernel package, whose
# CPU build is not on the registry (the sgl-kernel wheels hold CUDA code only). With
# SGLANG_USE_CPU_ENGINE=1 SGLang imports it at start without a guard; every name in it is a
# function that raises when called, so `torch.ops.sgl_kernel` stays empty and SGLang takes
# its plain-torch paths. servediff puts it first on PYTHONPATH, records that it did, and
# fails a load whose engine log shows a stub was called.
set -euo pipefail
# pip keeps no second copy of what it downloads: the environment is the cache (a CI run on a
# fresh machine ran out of disk while three set-ups downloaded side by side).
export PIP_NO_CACHE_DIR=1
dest="${1:-${SERVEDIFF_CACHE:-$HOME/.cache/servediff}/engines/sglang-cpu}"
if [ -f "$dest/.servediff-ready" ]; then echo "$dest/bin/python"; exit 0; fi
# One set-up at a time: a second caller waits here, then finds the environment ready.
mkdir -p "$(dirname "$dest")"
exec 9>"$dest.lock"
flock 9
if [ -f "$dest/.servediff-ready" ]; then echo "$dest/bin/python"; exit 0; fi
rm -rf "$dest"
python3.11 -m venv "$dest" >&2
"$dest/bin/pip" install -q --no-deps sglang==0.5.23 >&2
"$dest/bin/pip" install -q packaging >&2
# Its requirements, less the CUDA kernel packages (and the audio/video ones built on them),
# at its own pins, with the versions that work here for the rest.
"$dest/bin/python" - >"$dest/requirements.txt" <<'PY'
from importlib.metadata import requires
from packaging.requirements import Requirement
CUDA_ONLY = {"cuda-python", "flash-attn-4", "flashinfer-python", "humming-kernels",
             "nvidia-cutlass-dsl", "nvidia-mathdx", "nvshmem4py-cu13", "quack-kernels",
             "sgl-deep-ep", "sgl-deep-gemm", "sgl-flash-mla", "sglang-kernel", "tilelang",
             "apache-tvm-ffi", "torch-memory-saver", "torchaudio", "torchcodec", "kernels"}
OURS = {"torchvision": "torchvision==0.29.1"}
for line in requires("sglang") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    name = req.name.lower().replace("_", "-")
    if name not in CUDA_ONLY:
        print(OURS.get(name, line.split(";")[0].strip()))
PY
"$dest/bin/pip" install -q -r "$dest/requirements.txt" >&2
# CUDA-only files that a process without a GPU never opens (1.2 GB of the 7 GB): cuDNN's
# engine libraries, which libcudnn.so.9 loads only when a cuDNN handle is made on a GPU, and
# triton's CUDA compilers and static profiling libraries. The libraries that libtorch_cuda.so
# names itself stay, so torch imports as before; the import below checks it.
site="$("$dest/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
find "$site/nvidia/cudnn/lib" -name 'libcudnn_*.so*' -delete
rm -rf "$site/triton/backends/nvidia/bin"
find "$site/triton/backends/nvidia/lib" -name '*.a' -delete
mkdir -p "$dest/stand-in/sgl_kernel"
cat >"$dest/stand-in/sgl_kernel/__init__.py" <<'PY'
"""servediff's import-only stand-in for SGLang's kernel package (its CPU build is not on the
package registry). Every name is a function that raises when called: SGLang may import it,
never use it. The message names the op, so that servediff can fail the load that called it."""

STAND_IN = True


def _stub(name):
    def call(*args, **kwargs):
        raise RuntimeError(f"servediff sgl_kernel stand-in: {name} was called")

    call.__name__ = name
    return call


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _stub(name)
PY
SGLANG_USE_CPU_ENGINE=1 PYTHONPATH="$dest/stand-in" "$dest/bin/python" -c "import sglang.launch_server" >&2
touch "$dest/.servediff-ready"
echo "$dest/bin/python"
