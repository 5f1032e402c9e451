#!/usr/bin/env bash
# Creates (once) a virtual environment with lm-evaluation-harness (its API models) and an
# HF tokenizer, for benchmarks/peers.py, which compares servediff's scores with lm-eval's
# loglikelihood_rolling on the same server. No torch: lm-eval's API models do not need it.
#   scripts/setup-lm-eval.sh [DEST]   default DEST: ${SERVEDIFF_CACHE:-~/.cache/servediff}/engines/lm-eval
# Prints DEST/bin/python when ready. Idempotent: a finished environment is reused.
set -euo pipefail
dest="${1:-${SERVEDIFF_CACHE:-$HOME/.cache/servediff}/engines/lm-eval}"
if [ -f "$dest/.servediff-ready" ]; then echo "$dest/bin/python"; exit 0; fi
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
python3.11 -m venv "$dest" >&2
"$dest/bin/pip" install -q 'lm-eval[api]==0.4.13' 'transformers>=4.45,<5.20' >&2
"$dest/bin/python" -c "from lm_eval.models.openai_completions import LocalCompletionsAPI" >&2
touch "$dest/.servediff-ready"
echo "$dest/bin/python"
