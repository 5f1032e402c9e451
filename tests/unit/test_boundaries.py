"""Where drift starts on synthetic rows whose answers are known: from position 0, past an
engine's prompt chunk (named as the hint it is), in the texts of some chunks, at random."""

from __future__ import annotations

import random

from servediff.analysis.boundaries import EngineShapes, engine_shapes
from servediff.analysis.compare import TextScore, compare
from servediff.evidence import Launch
from servediff.report.words import where_drift_starts

CHUNK = 300


def launch(command: list[str], engine: dict[str, object], env: dict[str, str] | None = None,
           startup: dict[str, object] | None = None) -> Launch:
    return Launch(attempt=1, command=command, env_diff=env or {}, options={},
                  host="127.0.0.1", port=1, pid=1, started_at=0.0, engine=engine,
                  startup=startup or {})


def test_each_engine_s_sizes_come_from_its_launch():
    llama = {"version": {"engine": "llama.cpp"}}
    assert engine_shapes(launch(["llama-server", "-m", "m.gguf"], llama)).sizes == (
        ("n_batch", 2048), ("n_ubatch", 512))  # llama.cpp's defaults
    assert engine_shapes(launch(["llama-server", "-ub", "256", "--batch-size=1024"], llama)
                         ).sizes == (("n_batch", 1024), ("n_ubatch", 256))
    # the environment gives what the command does not; the micro-batch is at most the batch
    assert engine_shapes(launch(["llama-server", "-b", "128"], llama,
                                env={"LLAMA_ARG_UBATCH": "64"})).sizes == (
        ("n_batch", 128), ("n_ubatch", 64))
    assert engine_shapes(launch(["llama-server", "-b", "128"], llama)).sizes == (
        ("n_batch", 128), ("n_ubatch", 128))
    vllm = {"version": {"engine": "vllm"}}
    assert engine_shapes(launch([], vllm, startup={"max_num_batched_tokens": 2048})).sizes \
        == (("max_num_batched_tokens", 2048),)
    assert engine_shapes(launch([], vllm)).sizes == ()  # chunked prefill not in its log
    # vLLM 0.32 on the CPU logs no chunk size: the arm's flag gives it
    assert engine_shapes(launch(["vllm", "--max-num-batched-tokens", "256"], vllm)).sizes \
        == (("max_num_batched_tokens", 256),)
    sglang = {"version": {"engine": "sglang"}, "server_info": {"chunked_prefill_size": 4096}}
    assert engine_shapes(launch([], sglang)).sizes == (("chunked_prefill_size", 4096),)
    sglang["server_info"] = {"chunked_prefill_size": -1}  # chunked prefill off
    assert engine_shapes(launch([], sglang)).sizes == ()
    compiled = {"engine": "servediff-transformers",
                "shapes": "static, padded to power-of-two length buckets from 128"}
    assert engine_shapes(launch([], compiled)) == EngineShapes(bucket_floor=128)
    assert engine_shapes(launch([], {**compiled, "shapes": "as sent"})) == EngineShapes()


def texts() -> dict[str, int]:
    """30 texts of 100 to 970 tokens."""
    return {f"t{n}": n for n in range(100, 1000, 30)}


def scores(lengths: dict[str, int], moved_from: dict[str, int]) -> tuple[
        dict[str, TextScore], dict[str, TextScore]]:
    """Two scorings of each text; a text in `moved_from` differs from that position on."""
    a, b = {}, {}
    for tag, n in lengths.items():
        lp = [-1.0 - i / n for i in range(n - 1)]
        start = moved_from.get(tag, n)
        moved = [x + (1e-3 if i >= start else 0.0) for i, x in enumerate(lp)]
        a[tag] = TextScore(sum(-x for x in lp), list(range(n)), lp)
        b[tag] = TextScore(sum(-x for x in moved), list(range(n)), moved)
    return a, b


SIZES = EngineShapes(sizes=(("max_num_batched_tokens", CHUNK),))


def test_divergence_from_token_0_names_no_boundary():
    lengths = texts()
    a, b = scores(lengths, {t: 0 for t in lengths})
    found = compare(a, b, shapes=SIZES)
    assert found.first_moved is not None and found.first_moved.from_start == len(lengths)
    assert found.boundary is None and found.shared_shape is None  # every text moved
    (start,) = where_drift_starts("L1 vs L2", found)
    assert start.startswith("L1 vs L2: all 30 moved texts first differ at position 0")


def test_divergence_past_the_engine_s_chunk_names_that_chunk():
    lengths = texts()
    a, b = scores(lengths, {t: CHUNK for t, n in lengths.items() if n - 1 > CHUNK})
    found = compare(a, b, shapes=EngineShapes(sizes=(("max_num_batched_tokens", CHUNK),
                                                      ("max_model_len", 4096))))
    hint = found.boundary
    assert hint is not None and (hint.name, hint.tokens) == ("max_num_batched_tokens", CHUNK)
    longer = sum(n - 1 > CHUNK for n in lengths.values())
    assert (hint.texts, hint.at_multiple, hint.longer, hint.longer_moved) == (
        longer, longer, longer, longer)
    assert (hint.shorter, hint.shorter_moved) == (len(lengths) - longer, 0)
    # the moved texts are exactly those computed in more than one chunk
    shape = found.shared_shape
    assert shape is not None and shape.fact == "chunks" and shape.size == CHUNK
    assert shape.exact and shape.named == [2, 3, 4] and shape.facts_tried == 2
    said = " ".join(where_drift_starts("L1 vs L2", found))
    assert ("every moved text is identical before position 300, the engine's "
            "max_num_batched_tokens (300 tokens): a hint") in said
    assert f"{longer} of {longer} first differ exactly at a multiple of it" in said
    assert "are exactly the texts of 2, 3 or 4 chunks of 300 tokens, the engine's " \
           "max_num_batched_tokens (one-sided Fisher" in said
    assert f"all {longer} moved texts are identical up to position 300 (31% to 97% of their " \
           "lengths), where they first differ L1 vs L2: every" in said  # no second 'look there'
    # without the engine's sizes there is nothing to name it by
    assert compare(a, b).boundary is None


def test_a_boundary_no_moved_text_reached_is_not_named():
    lengths = texts()
    a, b = scores(lengths, {t: 120 for t, n in lengths.items() if n > 400})
    assert compare(a, b, shapes=SIZES).boundary is None


def test_moved_texts_that_are_exactly_two_compile_buckets():
    lengths = {f"t{n}": n for n in (*range(40, 128, 11), *range(130, 256, 16),
                                    *range(260, 512, 32))}
    a, b = scores(lengths, {t: 5 for t, n in lengths.items() if 128 < n})
    found = compare(a, b, shapes=EngineShapes(bucket_floor=128))
    shape = found.shared_shape
    assert shape is not None and shape.fact == "compile bucket" and shape.exact
    assert shape.named == [256, 512]
    assert [g.value for g in shape.groups] == [128, 256, 512]  # nothing below the floor
    assert "are exactly those in the 256 and 512-token compile buckets" in " ".join(
        where_drift_starts("L1 vs L2", found))
    # as plain length buckets the 128 group splits in two (64 and 128)
    plain = compare(a, b).shared_shape
    assert plain is not None and [g.value for g in plain.groups] == [64, 128, 256, 512]


def test_a_random_pattern_names_no_boundary_and_no_shape():
    lengths = texts()
    rng = random.Random(11)
    hints = shapes = 0
    for _ in range(200):
        moved = rng.sample(sorted(lengths), rng.randint(6, 14))
        a, b = scores(lengths, {t: rng.randrange(lengths[t] - 1) for t in moved})
        found = compare(a, b, shapes=SIZES)
        hints += found.boundary is not None
        shapes += bool(found.shared_shape and found.shared_shape.named)
    # the shape test's bound under chance is 5 %; six or more moved texts all past 300
    # by chance is rarer still
    assert hints <= 0.05 * 200 and shapes <= 0.05 * 200, (hints, shapes)


def test_an_engine_no_adapter_records_has_no_shapes():
    # the sizes are the adapter's facts: a record of an engine servediff has no adapter for
    # (or an older record without a name) names none, whatever its command says
    assert engine_shapes(launch(["llama-server", "-ub", "256"], {"version": {}})) \
        == EngineShapes()
    assert engine_shapes(launch([], {"version": {"engine": "tgi"}, "shapes":
                                     "padded to length buckets from 128"})) == EngineShapes()
