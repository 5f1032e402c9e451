"""Judging what an engine returned for a teacher-forced score, written once for every engine.

Each adapter turns its engine's answer into one `Position` per scored prompt
token (the token the engine says it scored there, where it says, and its
logprob); `judge` applies the same rules to all of them, so an "invalid" row
means the same thing whichever engine produced it:

1. the first prompt token has no logprob (nothing precedes it), where the
   engine reports that position at all;
2. every later position carries a logprob, for the token that was sent;
3. there is one position per prompt token after the first;
4. the engine's own count of prompt tokens, where it gives one, is what was sent;
5. anything an engine's dialect adds (llama-server's evaluated-token count,
   a batch total) as `extra`.

A response whose shape is not what the dialect promises is not a row at
all: `shape()` turns the parse error into an `EngineRequestError`, in one
place, so a bad answer is recorded like any failed request, never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from servediff.engines.base import Scored
from servediff.errors import EngineRequestError


@dataclass(frozen=True)
class Position:
    """One scored prompt position: the token the engine reports (None: not reported) and
    its logprob (None: missing)."""

    token: int | None
    logprob: float | None


def judge(ids: list[int], positions: list[Position], *,
          first: Literal["null", "logprob", "absent"] = "absent",
          server_tokens: int | None = None, ranks: list[int] | None = None,
          extra: str | None = None) -> Scored:
    """The row for prompt `ids` (positions 1..n-1 in `positions`), and why it cannot be
    trusted, if it cannot."""
    invalid = None
    if first == "logprob":
        invalid = "position 0 has a logprob; nothing precedes it, so it must be null"
    for pos, (p, want) in enumerate(zip(positions, ids[1:], strict=False), start=1):
        if invalid is not None:
            break
        if p.token is not None and p.token != want:
            invalid = f"position {pos}: expected token {want}, got {p.token} ({p.logprob})"
        elif p.logprob is None:
            invalid = f"position {pos}: no logprob for prompt token {want}"
    if invalid is None and len(positions) != len(ids) - 1:
        invalid = (f"{len(positions)} prompt logprobs for {len(ids)} ids "
                   f"(expected {len(ids) - 1})")
    if invalid is None and server_tokens is not None and server_tokens != len(ids):
        invalid = f"server counted {server_tokens} prompt tokens, {len(ids)} were sent"
    if invalid is None:
        invalid = extra
    logprobs = [p.logprob for p in positions if p.logprob is not None]
    return Scored(token_logprobs=logprobs,
                  ranks=ranks if ranks is not None and len(ranks) == len(logprobs) else None,
                  server_prompt_tokens=server_tokens, invalid=invalid)


@contextmanager
def shape(what: str, body: object) -> Iterator[None]:
    """Parse `body` inside this block; a missing key, a wrong type or a bad number is an
    engine request error that quotes the start of the answer."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise EngineRequestError(f"{what}: unexpected answer ({type(exc).__name__}: {exc}): "
                                 f"{str(body)[:200]}") from None
