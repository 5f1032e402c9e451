"""Prompts of a given length for the cost probes, each unique from its first token on.

Cost prompts are cut from the corpus as one token stream. A prefix cache
reuses the longest prefix a new prompt shares with one it has seen, so two
prompts that start alike let the engine skip part of the prefill: a sweep
whose longer prompts begin with the shorter ones would never test a
full-length prefill on an arm with a cache. Every prompt here therefore
starts with a token of its own (a "salt": the n-th distinct token of the
stream, so prompt n and prompt m differ at position 0) and goes on with the
stream from a shifted start. Each probe draws from its own range of numbers,
so no two prompts of a load share their first token, unless reuse is what the
probe measures (the prefix probe's shared prefix, the concurrency probe's
identical requests), or the stream has fewer distinct tokens than the numbers
drawn: then the numbers wrap around, two prompts may share their first token
and an engine that caches single tokens (SGLang's radix cache) reports one
cached token (measured on 5 texts of 327 distinct tokens: the sweep's first
prompt and the speed probe's 20th). Nothing longer is shared by design.
"""

from __future__ import annotations

# Where each probe's prompt numbers start; a probe never uses more than the gap.
SPEED, SWEEP, PREFIX = 0, 1000, 3000


class Prompts:
    def __init__(self, stream: list[int]) -> None:
        if not stream:
            raise ValueError("empty token stream")
        self.stream = stream
        self.salts = list(dict.fromkeys(stream))

    def unique(self, length: int, n: int) -> list[int]:
        """Prompt number `n`: its own first token, then the stream from a start of its own."""
        salt = self.salts[n % len(self.salts)]
        if n >= len(self.salts):
            # More prompts than distinct tokens: the second token keeps them apart.
            salt_two = [self.salts[n // len(self.salts) % len(self.salts)]]
        else:
            salt_two = []
        shift = (n * 7919) % len(self.stream)
        turned = self.stream[shift:] + self.stream[:shift]
        body = max(length - 1 - len(salt_two), 0)
        return ([salt, *salt_two] + turned * (body // len(turned) + 1))[:length]
