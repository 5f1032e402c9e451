"""This machine's rates for the embedded engine, measured before a run is sized.

The demo fits its grids to a time budget (servediff.budget). Reference rates from
another machine miss by up to twice on CPUs of one kind (float32 on an AVX2 EPYC against
an AVX-512 one), so the demo measures its own first: it loads SmolLM2 in this process
as the embedded engine loads it (the dtype and attention of the plan's first arm), then
times a teacher-forced pass over a 512-token prompt and a 16-token greedy
generation, the faster of two each, after a short warm-up pass. The load itself gives
the start of a cold load. This takes seconds; the numbers size the plan and go into the
estimate, never into the evidence.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from servediff import models
from servediff.corpus import Corpus
from servediff.estimate import SMOLLM2_PARAMETERS, Rates
from servediff.plan import Plan

PROMPT_TOKENS = 512
NEW_TOKENS = 16


def prompt_ids(tokenizer: object, corpus: Corpus, length: int) -> list[int]:
    """`length` token ids of the corpus's own texts, one after another."""
    ids: list[int] = []
    encode: Callable[[str], list[int]] = tokenizer.encode  # type: ignore[attr-defined]
    while len(ids) < length:
        for text in corpus.texts:
            ids += encode(text.text)
    return ids[:length]


def fastest(work: Callable[[], object], times: int = 2) -> float:
    """The shortest of `times` timings of `work`: a pass's first call of a shape pays for
    kernels chosen once, which a load's many requests do not."""
    best = float("inf")
    for _ in range(times):
        t0 = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - t0)
    return best


def embedded_rates(plan: Plan, corpus: Corpus, say: Callable[[str], None]
                   ) -> tuple[Rates, float]:
    """The embedded engine's prefill and decode rates here, and its load's seconds."""
    from transformers.utils import logging

    from servediff.engines.hf_server import Engine

    logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # no news here
    first = next(iter(plan.arms.values()))
    options = {**plan.engine_options, **first.options}
    path, _ = models.smollm2_dir(say)
    t0 = time.perf_counter()
    engine = Engine(path, str(options.get("device", "auto")),
                    str(options.get("dtype", "float32")),
                    str(options.get("attn_implementation", "sdpa")),
                    int(options.get("threads", 0)), max_len=options.get("max_model_len"))
    load_s = time.perf_counter() - t0
    ids = prompt_ids(engine.tokenizer, corpus, PROMPT_TOKENS)
    engine.score([ids[:64]])  # warm-up: the first pass of a process is slower
    prefill_s = fastest(lambda: engine.score([ids]))
    engine.generate_batch([ids[:32]], 2)
    decode_s = fastest(lambda: engine.generate_batch([ids[:32]], NEW_TOKENS + 1)) \
        - prefill_s * 32 / PROMPT_TOKENS
    rates = Rates(engine.device.upper() if engine.device == "cpu" else "GPU",
                  prefill_tok_s=PROMPT_TOKENS / prefill_s,
                  decode_tok_s=NEW_TOKENS / max(decode_s, 1e-6),
                  parameters=SMOLLM2_PARAMETERS,
                  source=f"this machine, measured just now in {engine.dtype}")
    return rates, load_s
