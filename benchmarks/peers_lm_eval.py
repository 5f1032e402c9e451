"""lm-evaluation-harness's loglikelihood_rolling on texts, for benchmarks/peers.py.

Runs in the lm-eval environment (scripts/setup-lm-eval.sh), not servediff's: reads a
job from standard input ({"base_url", "model", "texts", "max_length"}) and prints
{"nll": [...], "tokens": [...], "seconds": ...}. It calls the library path that
`lm_eval --model local-completions --tasks wikitext` takes: LocalCompletionsAPI with the
model's HF tokenizer, whose rolling windows put the tokenizer's BOS token in front.
"""

from __future__ import annotations

import json
import sys
import time

from lm_eval.api.instance import Instance
from lm_eval.models.openai_completions import LocalCompletionsAPI


def main() -> None:
    job = json.load(sys.stdin)
    lm = LocalCompletionsAPI(base_url=job["base_url"], model=job["model"],
                             tokenizer=job["model"], tokenizer_backend="huggingface",
                             max_length=job["max_length"], num_concurrent=1)
    requests = [Instance(request_type="loglikelihood_rolling", doc={}, arguments=(text,),
                         idx=i) for i, text in enumerate(job["texts"])]
    t0 = time.monotonic()
    loglikelihoods = lm.loglikelihood_rolling(requests, disable_tqdm=True)
    seconds = time.monotonic() - t0
    json.dump({"nll": [-x for x in loglikelihoods], "seconds": seconds,
               "prefix_token_id": lm.prefix_token_id,
               "tokens": [len(lm.tok_encode(text)) for text in job["texts"]]}, sys.stdout)


if __name__ == "__main__":
    main()
