"""Secrets never enter the evidence.

A plan passes a secret to an engine by reference: an env value `"${NAME}"` is kept as
written in the lock and in every load record, and the engine alone is given the value of
NAME from servediff's own environment. A literal value that the scrubber takes for a secret
(a token, a key, a bearer header, a high-entropy string) is refused in the plan, with how
to pass it instead. Engine logs are stored with the values of those references, and of
any variable of servediff's environment whose name says it holds a secret, replaced by
the reference.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from servediff import atomic
from servediff.scrub import scrub

REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
# what the scrubber finds that is a secret (not a host, a path or a user name)
SECRET_KINDS = frozenset({"private key", "authorization header", "bearer token", "cookie",
                          "url credentials", "token", "secret", "secret assignment",
                          "high-entropy string"})
SECRET_NAME = re.compile(r"(?i)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|"
                         r"PRIVATE_KEY|CREDENTIAL)")
# shorter values are not replaced in logs: "1" or "true" would be everywhere
MIN_SECRET = 8


def reference(value: str) -> str | None:
    """The variable an env value refers to (`${NAME}`), or None for a literal."""
    found = REFERENCE.match(value)
    return found[1] if found else None


def secret_kind(value: str) -> str | None:
    """What the scrubber takes this literal for, when it is a secret."""
    kinds = {k for k in scrub(value).counts if k in SECRET_KINDS or "secret" in k
             or "key" in k or "token" in k}
    return sorted(kinds)[0] if kinds else None


def literal_problems(where: str, env: Mapping[str, str], args: list[str]) -> list[str]:
    """The plan's literal secrets in one env table and argument list, each with how to
    pass it instead."""
    out = []
    for key, value in env.items():
        if reference(value) is None and (kind := secret_kind(value)):
            out.append(f"{where}.env.{key}: the value looks like a secret ({kind}); the lock "
                       f"and every load record would keep it. Pass it by reference: "
                       f'{key} = "${{{key}}}", with {key} set in the environment servediff '
                       "runs in")
    for i, arg in enumerate(args):
        if kind := secret_kind(arg):
            out.append(f"{where}.args[{i}]: looks like a secret ({kind}); the lock and every "
                       "load record would keep it. Pass it through env by reference "
                       '(NAME = "${NAME}") and let the engine read NAME')
    return out


def missing(env: Mapping[str, str], environ: Mapping[str, str] | None = None) -> list[str]:
    """The variables env refers to that are not set."""
    environ = os.environ if environ is None else environ
    return sorted({name for v in env.values() if (name := reference(v)) is not None
                   and name not in environ})


def expand(env: Mapping[str, str], environ: Mapping[str, str] | None = None
           ) -> dict[str, str]:
    """The environment the engine is given: every reference replaced by its value (a
    variable that is not set: the empty string; `missing` names those before a run)."""
    environ = os.environ if environ is None else environ
    return {k: environ.get(name, "") if (name := reference(v)) else v for k, v in env.items()}


def hidden(env: Mapping[str, str], environ: Mapping[str, str] | None = None
           ) -> dict[str, str]:
    """value -> what a stored log says instead: the values env refers to, and those of
    servediff's environment whose names say they are secrets."""
    environ = os.environ if environ is None else environ
    out = {environ[name]: f"${{{name}}}" for v in env.values()
           if (name := reference(v)) and name in environ}
    out.update({value: f"${{{name}}}" for name, value in environ.items()
                if SECRET_NAME.search(name) and value not in out})
    return {v: r for v, r in out.items() if len(v) >= MIN_SECRET}


def redact(text: str, values: Mapping[str, str]) -> str:
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, values[value])
    return text


def redact_file(path: Path, values: Mapping[str, str]) -> bool:
    """Rewrite a stored log without those values (atomically); whether it held any."""
    if not values or not path.exists():
        return False
    text = path.read_text(errors="replace")
    clean = redact(text, values)
    if clean == text:
        return False
    atomic.write_text(path, clean)
    return True
