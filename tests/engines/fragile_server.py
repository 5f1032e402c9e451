"""The embedded engine with a fault, for tests of survival recording.

`--die-above N`: the process aborts (SIGABRT, as a failed CUDA assert does)
when a prompt longer than N tokens arrives. `--hang-above N`: the request
never returns while /health keeps answering (and the process does no work).
`--slow-above N --slow-s S`: the request is answered, but only after S more
seconds of computing (a slow engine that is still making progress).
Everything else is the real servediff.engines.hf_server serving the real model.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Any

from servediff.engines import hf_server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--die-above", type=int)
    parser.add_argument("--hang-above", type=int)
    parser.add_argument("--slow-above", type=int)
    parser.add_argument("--slow-s", type=float, default=0.0)
    args, rest = parser.parse_known_args()
    real = hf_server.Handler._completions

    def completions(self: hf_server.Handler, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body.get("prompt") or []
        longest = max((len(p) for p in prompt), default=0) if prompt and isinstance(
            prompt[0], list) else len(prompt)
        if args.die_above is not None and longest > args.die_above:
            sys.stderr.write(f"fragile: a prompt of {longest} tokens; aborting\n")
            sys.stderr.flush()
            os.abort()
        if args.hang_above is not None and longest > args.hang_above:
            sys.stderr.write(f"fragile: a prompt of {longest} tokens; hanging\n")
            sys.stderr.flush()
            threading.Event().wait()
        if args.slow_above is not None and longest > args.slow_above:
            sys.stderr.write(f"fragile: a prompt of {longest} tokens; computing slowly\n")
            sys.stderr.flush()
            end = time.monotonic() + args.slow_s
            while time.monotonic() < end:
                sum(i * i for i in range(10_000))
        return real(self, body)

    hf_server.Handler._completions = completions  # type: ignore[method-assign]
    hf_server.main(rest)


if __name__ == "__main__":
    main()
