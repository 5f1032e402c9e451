"""Scrubbing: what must not leave the machine, taken out of any text before it does.

Secrets with a known shape are found by detect-secrets' detectors (AWS,
OpenAI, Slack, Stripe, PyPI, npm, GitLab, ... and quoted high-entropy
strings); servediff adds the rules that library lacks for this field: Hugging
Face and GitHub tokens, JWTs, bearer and Authorization headers, cookies, PEM
private-key blocks, `key=` / `token=` / `secret=` / `password=` assignments
and secret-named JSON fields, unquoted high-entropy strings, and the
infrastructure a report leaks: private hostnames wherever they stand (in
URLs, syslog-style log prefixes, before a port, bare, bracketed,
`user@host`), IPv4 and IPv6 addresses, the bucket or account of an
object-store URL (`s3://`, `gs://`, `az://`, `abfss://`, `hf://`, and the
cloud storage hosts), the private part of absolute paths (POSIX, `~/`,
Windows, UNC), user names and e-mail addresses.

Kept: public hosts reports cite (`PUBLIC_HOSTS`: code hosts, model hubs,
package registries, paper sites, the engines' docs, and their subdomains),
model names (`Org/Model-Name`), engine versions and build strings, image
tags, flags and their values, port numbers (`HOST:8000`), timestamps, hex
digests, version numbers, API routes (`/v1/completions`), every non-secret
part of a JSON or request body, the key of a `key=value` secret, and the last
component of a path or object URL when it names a model, a weights file or a
config: `/home/alice/ckpt/model.safetensors` becomes
`/PATH/.../model.safetensors`, `/data/models/Qwen2.5-7B-Instruct-AWQ` becomes
`/PATH/.../Qwen2.5-7B-Instruct-AWQ`, `/home/alice/notes` becomes `/PATH/...`.
A `Policy` adds hosts to the allowlist or the deny list (plan `[scrub]`, or
`servediff scrub --allow-host/--deny-host`).

Detection runs on a copy with Unicode look-alikes folded (NFKC plus common
Cyrillic and Greek homoglyphs), so `ѕk-...` is caught; the replacement is
applied to the original text, so non-English text elsewhere stays as it was.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin

# Cyrillic and Greek letters that render like Latin ones.
HOMOGLYPHS = str.maketrans({
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "ѕ": "s",
    "і": "i", "ј": "j", "к": "k", "м": "m", "т": "t", "н": "h", "в": "b", "г": "r",
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P",
    "С": "C", "Т": "T", "Х": "X", "Ѕ": "S", "І": "I",
    "α": "a", "ο": "o", "ρ": "p", "ν": "v", "κ": "k", "ι": "i", "τ": "t",
    "Α": "A", "Β": "B", "Ε": "E", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O", "Ρ": "P",
    "Τ": "T", "Χ": "X", "Ζ": "Z", "Η": "H", "Ι": "I",
    "\u200b": "", "\u200c": "", "\u200d": "", "\ufeff": "", "\u2060": "",
})

# detect-secrets detectors that return the whole secret (not just a prefix).
DETECTORS = ("AWS Access Key", "OpenAI Token", "Slack Token", "Stripe Access Key",
             "SendGrid API Key", "PyPI Token", "NPM tokens", "GitLab Token", "Twilio API Key",
             "Discord Bot Token", "Telegram Bot Token", "Mailchimp Access Key",
             "Base64 High Entropy String")

# Public hosts a report may cite, kept verbatim with their subdomains (docs.vllm.ai).
PUBLIC_HOSTS = frozenset({
    # code hosts
    "github.com", "githubusercontent.com", "github.io", "gitlab.com", "bitbucket.org",
    "codeberg.org", "sourceforge.net",
    # model hubs
    "huggingface.co", "hf.co", "modelscope.cn", "ollama.com", "kaggle.com",
    # package and image registries
    "pypi.org", "pythonhosted.org", "npmjs.com", "npmjs.org", "crates.io", "anaconda.org",
    "anaconda.com", "conda-forge.org", "docker.io", "docker.com", "ghcr.io", "nvcr.io",
    "quay.io", "gcr.io", "public.ecr.aws", "download.pytorch.org",
    # papers
    "arxiv.org", "openreview.net", "aclanthology.org", "doi.org", "semanticscholar.org",
    "neurips.cc", "nips.cc", "mlr.press", "acm.org", "ieee.org", "paperswithcode.com",
    # the engines' and frameworks' docs
    "vllm.ai", "sglang.ai", "flashinfer.ai", "pytorch.org", "nvidia.com", "python.org",
    "readthedocs.io", "readthedocs.org", "tensorflow.org", "jax.readthedocs.io",
    "ggml.ai", "llama.com", "lmsys.org",
})
# Object stores whose first path segment or first label is a bucket, container or account.
STORE_SCHEMES = ("s3", "s3a", "s3n", "gs", "gcs", "az", "abfs", "abfss", "wasb", "wasbs",
                 "adl", "r2", "oss", "cos", "obs", "hdfs", "hf")
STORE_HOSTS = re.compile(r"(?i)^(?:(?P<sub>[a-z0-9][a-z0-9.-]*?)\.)?"
                         r"(?P<svc>s3[.-][a-z0-9.-]*amazonaws\.com|s3\.amazonaws\.com|"
                         r"storage\.googleapis\.com|storage\.cloud\.google\.com|"
                         r"(?:blob|dfs|file)\.core\.windows\.net|r2\.cloudflarestorage\.com|"
                         r"digitaloceanspaces\.com|backblazeb2\.com)$")
# The last path component that a reader needs in order to reproduce: a model, a weights
# file, a config or tokenizer file.
MODEL_FILE = re.compile(r"(?i)\.(?:safetensors|gguf|ggml|bin|pt|pth|ckpt|onnx|engine|plan|"
                        r"tflite|npz|h5|msgpack|json|jsonl|ya?ml|toml|model|tiktoken|jinja)$")
MODEL_NAME = re.compile(r"(?i)(?:llama|qwen|mistral|mixtral|gemma|phi-?\d|smollm|deepseek|"
                        r"falcon|gpt|bloom|olmo|granite|internlm|baichuan|chatglm|starcoder|"
                        r"codellama|vicuna|tinyllama|nemotron|command-r|\d+(?:\.\d+)?[bm]\b|"
                        r"(?<![a-z])(?:awq|gptq|gguf|fp8|fp16|bf16|int4|int8|q\d_k\w*|"
                        r"instruct|chat|base)(?![a-z]))")
TLDS = ("com|net|org|io|ai|dev|app|cloud|co|edu|gov|mil|int|info|biz|me|us|uk|de|fr|jp|cn|"
        "ru|nl|ch|se|no|fi|es|it|pl|in|kr|tw|au|ca|br|eu|local|localdomain|internal|intranet|"
        "lan|corp|home|cluster|svc|priv|private")
# Paths that are API routes, not places on a disk.
ROUTES = {"v1", "v2", "health", "metrics", "generate", "completion", "completions",
          "tokenize", "detokenize", "props", "slots", "version", "get_server_info",
          "get_model_info", "flush_cache", "infill", "embedding", "embeddings", "models"}
# A name that ends in a secret word: HF_TOKEN, api_key, client_secret, db_password;
# not max_tokens or token_ids, which are counts and lists.
SECRET_NAME = (r"[\w.-]*(?:api[_-]?key|access[_-]?key|secret(?:[_-]?key)?|token|passw(?:or)?d|"
               r"pwd|credentials?|auth[_-]?key|private[_-]?key)(?![\w-])")
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", re.IGNORECASE)

PLACEHOLDER = {
    "bucket": "BUCKET", "repository": "REPO",
    "private key": "REDACTED-PRIVATE-KEY", "authorization header": "REDACTED",
    "bearer token": "Bearer REDACTED", "cookie": "REDACTED", "token": "REDACTED",
    "secret assignment": "REDACTED", "secret field": "REDACTED",
    "high-entropy string": "REDACTED", "url credentials": "REDACTED",
    "e-mail address": "EMAIL", "user@host": "USER@HOST", "username": "USER",
    "hostname": "HOST", "ipv4 address": "HOST", "ipv6 address": "HOST",
    "path": "/PATH/...",
}


PLACEHOLDERS = frozenset(PLACEHOLDER.values())


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: str
    # the text that replaces it; None: the kind's placeholder
    replacement: str | None = None


@dataclass(frozen=True)
class Policy:
    """Hosts a plan or the command line adds: kept verbatim, or always replaced."""

    allow_hosts: frozenset[str] = frozenset()
    deny_hosts: frozenset[str] = frozenset()

    def public(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        if host in self.deny_hosts:
            return False
        if (store := STORE_HOSTS.match(host)) and not store.group("sub"):
            return True  # the storage service itself; its buckets are not public
        return any(host == h or host.endswith("." + h) for h in PUBLIC_HOSTS | self.allow_hosts)


DEFAULT = Policy()


def policy(allow: list[str] | tuple[str, ...] = (), deny: list[str] | tuple[str, ...] = ()
           ) -> Policy:
    return Policy(frozenset(h.lower().rstrip(".") for h in allow),
                  frozenset(h.lower().rstrip(".") for h in deny))


@dataclass
class Scrubbed:
    text: str
    counts: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        if not self.counts:
            return "nothing"
        return ", ".join(f"{n} {kind}{'' if n == 1 else 'es' if kind.endswith('s') else 's'}"
                         for kind, n in sorted(self.counts.items()))


def fold(text: str) -> tuple[str, list[int]]:
    """The text with look-alikes folded, and for each of its characters the index of
    the original character it came from."""
    out: list[str] = []
    origin: list[int] = []
    for i, ch in enumerate(text):
        folded = unicodedata.normalize("NFKC", ch.translate(HOMOGLYPHS)).translate(HOMOGLYPHS)
        out.append(folded)
        origin.extend([i] * len(folded))
    return "".join(out), origin


Finder = Callable[[str, Policy], Iterator[Span]]


@dataclass(frozen=True)
class Rule:
    """A finder and its priority: where two findings overlap, the rule of the lower
    priority number wins, then the longer span."""

    priority: int
    find: Finder


def _regex_rule(kind: str, pattern: str, flags: int = 0) -> Finder:
    """A finder for `pattern`: its group `found` where it has one, else the whole match."""
    compiled = re.compile(pattern, flags)
    group = "found" if "found" in compiled.groupindex else 0

    def find(text: str, policy: Policy) -> Iterator[Span]:
        for m in compiled.finditer(text):
            if m.group(group):
                yield Span(m.start(group), m.end(group), kind)
    return find


@cache
def _plugins() -> list[tuple[str, bool, Any]]:
    """The detect-secrets plugins servediff uses, built once (they keep no state)."""
    mapping: dict[str, Any] = get_mapping_from_secret_type_to_class()
    out = []
    for name in DETECTORS:
        entropic = issubclass(mapping[name], HighEntropyStringsPlugin)
        out.append((name, entropic, mapping[name](limit=4.5) if entropic else mapping[name]()))
    return out


def _detect_secrets(text: str, policy: Policy) -> Iterator[Span]:
    for name, entropic, plugin in _plugins():
        for line_start, line in _lines(text):
            for secret in plugin.analyze_string(line):
                if not secret or len(secret) < 8 or _hex(secret):
                    continue
                # detect-secrets applies its entropy limit outside analyze_string
                if entropic and plugin.calculate_shannon_entropy(secret) <= 4.5:
                    continue
                for m in re.finditer(re.escape(secret), line):
                    yield Span(line_start + m.start(), line_start + m.end(),
                               "high-entropy string" if "Entropy" in name else "token")


def _lines(text: str) -> Iterator[tuple[int, str]]:
    start = 0
    for line in text.splitlines(keepends=True):
        yield start, line
        start += len(line)


def _hex(s: str) -> bool:
    return re.fullmatch(r"(?:0x)?[0-9a-fA-F]+", s) is not None


def _entropy(s: str) -> float:
    from math import log2
    counts = Counter(s)
    return -sum(n / len(s) * log2(n / len(s)) for n in counts.values())


def _high_entropy(text: str, policy: Policy) -> Iterator[Span]:
    """Unquoted strings that look random: long, mixed classes, not hex, not word-shaped.
    In `NAME=value` only the value goes: the name says what was there."""
    for m in re.finditer(r"(?<![\w/.+=-])[A-Za-z0-9+/_=-]{24,}(?![\w/.+=-])", text):
        s, start = m.group(0), m.start()
        if key := re.match(r"[A-Za-z_][A-Za-z0-9_]*=(?=[^=])", s):
            s, start = s[key.end():], start + key.end()
        if _hex(s) or ("/" in s.strip("/") and not re.search(r"[+=]", s)):
            continue
        words = [w for w in re.split(r"[-_]", s) if w]
        if len(words) >= 3 and all(re.fullmatch(r"[A-Za-z]*\d*[A-Za-z]*", w) for w in words):
            continue  # kebab/snake-case names: model names, flags, tags
        classes = sum(bool(re.search(p, s)) for p in (r"[a-z]", r"[A-Z]", r"\d"))
        if classes == 3 and _entropy(s) >= 4.0 and len(s) >= 16:
            yield Span(start, m.end(), "high-entropy string")


def _secret_assignments(text: str, policy: Policy) -> Iterator[Span]:
    """`token=...`, `password: "..."`, `--api-key ...`, `"secret": "..."`: the value only."""
    patterns = [
        rf"""(?i)["']?\b({SECRET_NAME})["']?\s*[:=]\s*(?:"(?P<dq>[^"\n]*)"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s,;&"'}}\]]+))""",
        rf"""(?i)--({SECRET_NAME})(?:\s+|=)(?:"(?P<dq>[^"\n]*)"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s"']+))""",
    ]
    for pattern in patterns:
        for m in re.finditer(pattern, text):
            for name in ("dq", "sq", "bare"):
                value = m.group(name)
                if value is None:
                    continue
                if (not value or NUMBER.fullmatch(value) or value.lower() in (
                        "null", "none", "true", "false", "redacted", "****")):
                    break
                kind = "secret field" if m.group(0).lstrip().startswith(('"', "'")) \
                    else "secret assignment"
                yield Span(m.start(name), m.end(name), kind)
                break


def _ipv6(text: str, policy: Policy) -> Iterator[Span]:
    for m in re.finditer(r"(?<![\w:.])\[?([0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}"
                         r"(?:%\w+)?)\]?(?![\w:])", text):
        candidate = m.group(1)
        if candidate.count(":") < 2:
            continue
        try:
            ipaddress.IPv6Address(candidate.split("%")[0])
        except ValueError:
            continue
        yield Span(m.start(1), m.end(1), "ipv6 address")


def _ipv4(text: str, policy: Policy) -> Iterator[Span]:
    for m in re.finditer(r"(?<![\w.])(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?![\w]|\.\d)",
                         text):
        parts = [int(p) for p in m.groups()]
        if any(p > 255 for p in parts):
            continue
        before = text[max(0, m.start() - 12):m.start()].lower()
        after = text[m.end():m.end() + 1]
        # 1.2.3.4 after "v", "==" or "version" is a version. Otherwise an address when it
        # is said to be one (ip, addr, host, //, @, a port after it) or starts at 10 or
        # above (private ranges do); "nccl 2.21.5.1" stays a version.
        if re.search(r"(?:v|==|version\s?|-)$", before):
            continue
        said = re.search(r"(?:ip|addr(?:ess)?|host|peer|inet|//|@|=|:)\s*$", before) or after == ":"
        if parts[0] < 10 and not said:
            continue
        yield Span(m.start(), m.end(), "ipv4 address")


def _hostnames(text: str, policy: Policy) -> Iterator[Span]:
    fqdn = (rf"(?<![\w@.-])((?:[A-Za-z0-9](?:[A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?\.)+"
            rf"(?:{TLDS}))(?![\w-]|\.[A-Za-z])")
    for m in re.finditer(fqdn, text, re.IGNORECASE):
        if not policy.public(m.group(1)):
            yield Span(m.start(1), m.end(1), "hostname")
    # a host name followed by a port, bracketed or not: gpu-node-3:8000, [node]:8000
    for m in re.finditer(r"(?<![\w/.:@-])\[?([A-Za-z][A-Za-z0-9-]*[A-Za-z0-9](?:\.[A-Za-z0-9-]+)*)"
                         r"\]?:(\d{2,5})(?!\d|\.\d)", text):
        host = m.group(1).lower()
        if host not in ("localhost", "http", "https", "port", "host") and not policy.public(host):
            yield Span(m.start(1), m.end(1), "hostname")
    for m in re.finditer(r"(?i)\b(?:host(?:name)?|node|server)\s*[=:]\s*[\"']?"
                         r"([A-Za-z][A-Za-z0-9.-]*[A-Za-z0-9])", text):
        if m.group(1).lower() not in ("localhost", "host", "port") and not m.group(1)[0].isdigit():
            yield Span(m.start(1), m.end(1), "hostname")
    # cloud instance names: ip-10-0-0-12, ip-172-31-1-2.ec2.internal
    for m in re.finditer(r"(?<![\w-])(ip-\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}(?:\.[\w.-]+)?)(?![\w-])",
                         text):
        yield Span(m.start(1), m.end(1), "hostname")
    for host in policy.deny_hosts:
        for m in re.finditer(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", text, re.IGNORECASE):
            yield Span(m.start(), m.end(), "hostname")


def _log_prefixes(text: str, policy: Policy) -> Iterator[Span]:
    """The host of a syslog-style line: `Nov 30 12:00:01 gpu-node-3 vllm[1234]: ...`."""
    stamp = (r"(?:[A-Z][a-z]{2}\s+\d{1,2}\s+\d\d:\d\d:\d\d|"
             r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)")
    for m in re.finditer(rf"(?m)^{stamp}\s+([A-Za-z][\w.-]*)\s+[\w./-]+(?:\[\d+\])?:", text):
        if not policy.public(m.group(1)) and m.group(1).lower() != "localhost":
            yield Span(m.start(1), m.end(1), "hostname")


def keeps_name(last: str) -> bool:
    """Whether a path's last component names a model, a weights file or a config."""
    if not last or re.search(SECRET_NAME, last, re.IGNORECASE) or last.startswith("."):
        return False
    return bool(MODEL_FILE.search(last) or MODEL_NAME.search(last))


def _tail(path: str) -> str:
    """`/...` and the last component when a reader needs it."""
    last = re.split(r"[/\\]", path.rstrip("/\\"))[-1]
    return f"/.../{last}" if keeps_name(last) else "/..."


URL = re.compile(r"(?i)\b(?P<scheme>[a-z][a-z0-9+.-]*)://(?:(?P<user>[^\s/@]+)@)?"
                 r"(?P<host>\[[0-9a-f:.%]+\]|[^\s/:?#'\"<>)@]+)(?P<port>:\d+)?"
                 r"(?P<path>/[^\s'\"<>)]*)?")


@dataclass(frozen=True)
class Url:
    """A URL found in the text, parsed once (URL's named groups), with where each part
    starts; the rules below decide from it what goes."""

    scheme: str
    user: str | None
    user_at: int
    host: str
    host_at: int
    path: str
    path_at: int
    end: int

    @classmethod
    def of(cls, m: re.Match[str]) -> Url:
        return cls(scheme=m.group("scheme").lower(), user=m.group("user"),
                   user_at=m.start("user"), host=m.group("host"), host_at=m.start("host"),
                   path=m.group("path") or "",
                   path_at=m.start("path") if m.group("path") else m.end(), end=m.end())


def _hf(url: Url) -> Iterator[Span]:
    """hf://[datasets|spaces|models/]org/repo/...: the repository may be private."""
    parts = [url.host, *[p for p in url.path.split("/") if p]]
    lead = parts[0] if parts[0] in ("datasets", "spaces", "models") else None
    repo = parts[1:3] if lead else parts[0:2]
    if repo[:1] == ["REPO"]:
        return  # scrubbed already
    rest = parts[3:] if lead else parts[2:]
    start = url.host_at + (len(lead) + 1 if lead else 0)
    end = start + len("/".join(repo))
    yield Span(start, end, "repository")
    if rest:
        yield Span(end, url.end, "path", _tail("/".join(rest)))


def _store(url: Url, sub: str | None) -> Iterator[Span]:
    """A cloud storage host: the bucket in its first label (`sub`) or its first path
    segment."""
    path = url.path
    if sub:
        yield Span(url.host_at, url.host_at + len(sub), "bucket")
        if path.strip("/"):
            yield Span(url.path_at, url.end, "path", _tail(path))
        return
    if not path.strip("/"):
        return
    first = path.strip("/").split("/")[0]
    start = url.path_at + path.index(first)
    yield Span(start, start + len(first), "bucket")
    rest = path[path.index(first) + len(first):]
    if rest.strip("/"):
        yield Span(start + len(first), url.end, "path", _tail(rest))


def _urls(text: str, policy: Policy) -> Iterator[Span]:
    """Hosts in URLs (the private ones), and the bucket, container or account of an
    object store, with the private part of the object path."""
    for url in map(Url.of, URL.finditer(text)):
        user, host = url.user, url.host
        if user and ":" not in user and user not in PLACEHOLDERS and \
                url.scheme not in STORE_SCHEMES:
            yield Span(url.user_at, url.user_at + len(user), "username")  # https://me@host/
        if url.scheme == "hf":
            yield from _hf(url)
        elif url.scheme in STORE_SCHEMES:
            # abfss://container@account.dfs.core.windows.net: container and account go
            start = url.user_at if user else url.host_at
            end = url.host_at + (len(host) if not STORE_HOSTS.match(host) else host.index("."))
            yield Span(start, end, "bucket")
            if url.path.strip("/"):
                yield Span(url.path_at, url.end, "path", _tail(url.path))
        elif store := STORE_HOSTS.match(host.strip("[]")):
            yield from _store(url, store.group("sub"))
        elif not (re.fullmatch(r"[\d.]+|\[[0-9a-f:.%]+\]", host, re.IGNORECASE)
                  or host.lower() in ("localhost", "host") or policy.public(host)):
            yield Span(url.host_at, url.host_at + len(host), "hostname")


def _paths(text: str, policy: Policy) -> Iterator[Span]:
    """The private part of a path (home, user, mount point, drive) goes; the last
    component stays when it names a model, a weights file or a config."""
    posix = r"(?<![\w.:/~\\-])(~?/(?:[^\s/'\"`<>|:;,)(\]\[]+/?)+)"
    for m in re.finditer(posix, text):
        path = m.group(1)
        first = path.lstrip("~/").split("/")[0]
        if path.startswith("/") and first.lower() in ROUTES:
            continue
        if path in ("/", "~/") or re.fullmatch(r"/\d+(?:\.\d+)?", path):
            continue
        yield Span(m.start(1), m.end(1), "path", "/PATH" + _tail(path))
    for m in re.finditer(r"(?<![\w])([A-Za-z]:\\(?:[^\s\\'\"<>|:*?]+\\?)+)", text):
        yield Span(m.start(1), m.end(1), "path", "/PATH" + _tail(m.group(1)))
    for m in re.finditer(r"(?<![\w])(\\\\[A-Za-z0-9._-]+\\(?:[^\s\\'\"<>|]+\\?)+)", text):
        yield Span(m.start(1), m.end(1), "path", "/PATH" + _tail(m.group(1)))


# Priorities, lowest first: secrets of a known shape, then detect-secrets and secret
# assignments, then URLs and the names in them, addresses, hosts and paths, and last any
# long high-entropy string. Where two findings overlap, the lower number wins.
RULES: list[Rule] = sorted([
    Rule(10, _regex_rule("private key", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?"
                         r"(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)")),
    Rule(20, _regex_rule("authorization header",
                         r"(?im)\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?P<found>"
                         r"(?:bearer|basic|token|digest)\s+[^\s\"',]+|[^\s\"',]+)")),
    Rule(30, _regex_rule("bearer token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}")),
    Rule(40, _regex_rule("cookie",
                         r"(?im)\b(?:set-)?cookie[\"']?\s*[:=]\s*[\"']?(?P<found>[^\n\"']+)")),
    Rule(50, _regex_rule("url credentials",
                         r"(?i)\b[a-z][a-z0-9+.-]*://(?P<found>[^\s/@:]+:[^\s/@]+)@")),
    Rule(60, _regex_rule("token", r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}"
                                  r"\.[A-Za-z0-9_-]{5,}")),
    Rule(60, _regex_rule("token", r"\bhf_[A-Za-z0-9]{20,}")),
    Rule(60, _regex_rule("token", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}")),
    Rule(60, _regex_rule("token", r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}"
                                  r"|github_pat_[A-Za-z0-9_]{20,})")),
    Rule(60, _regex_rule("token", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    Rule(70, _detect_secrets),
    Rule(80, _secret_assignments),
    Rule(90, _urls),
    Rule(100, _regex_rule("e-mail address", r"\b(?!(?:REDACTED|USER)@)[A-Za-z0-9._%+-]+@"
                          r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")),
    Rule(110, _regex_rule("user@host", r"(?<![\w/.@-])[a-z_][a-z0-9_.-]{0,31}@"
                          r"(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)(?=[\s:'\"\]),;]|$)")),
    Rule(120, _regex_rule("username", r"(?i)\b(?:user(?:name)?|login|owner|USER)\s*[=:]\s*"
                          r"[\"']?(?P<found>[A-Za-z_][A-Za-z0-9_.-]{0,31})")),
    Rule(120, _regex_rule("username", r"(?i)--(?:user(?:name)?|login)(?:\s+|=)"
                          r"(?P<found>[A-Za-z_][\w.-]{0,31})")),
    Rule(130, _ipv6),
    Rule(140, _ipv4),
    Rule(150, _log_prefixes),
    Rule(160, _hostnames),
    Rule(170, _paths),
    Rule(180, _high_entropy),
], key=lambda r: r.priority)


def spans(folded: str, policy: Policy = DEFAULT) -> list[Span]:
    """Every finding, overlaps resolved: the rule of lower priority number wins, then the
    longer span."""
    found: list[tuple[int, Span]] = []
    for rule in RULES:
        found += [(rule.priority, s) for s in rule.find(folded, policy) if s.end > s.start]
    found.sort(key=lambda x: (x[0], -(x[1].end - x[1].start)))
    taken: list[Span] = []
    for _, s in found:
        if all(s.end <= t.start or s.start >= t.end for t in taken):
            taken.append(s)
    return sorted(taken, key=lambda s: s.start)


def scrub(text: str, policy: Policy = DEFAULT) -> Scrubbed:
    folded, origin = fold(text)
    origin.append(len(text))
    out = Scrubbed(text)
    pieces = []
    last = 0
    for s in spans(folded, policy):
        found = folded[s.start:s.end]
        if found in PLACEHOLDERS or found == s.replacement or _scrubbed_path(found):
            continue  # already scrubbed (a second pass over a rendered report)
        start, end = origin[s.start], origin[s.end - 1] + 1
        if start < last:
            continue
        pieces += [text[last:start], s.replacement or PLACEHOLDER[s.kind]]
        out.counts[s.kind] += 1
        last = end
    pieces.append(text[last:])
    out.text = "".join(pieces)
    return out


def _scrubbed_path(found: str) -> bool:
    """A path this scrubber wrote: /PATH/..., /PATH/.../name, or an object path's /.../name."""
    return re.fullmatch(r"(?:/PATH)?/\.\.\.(?:/[^/\s]+)?", found) is not None


def scrub_tree(value: Any, counts: Counter[str] | None = None, policy: Policy = DEFAULT
               ) -> tuple[Any, Counter[str]]:
    """Every string inside a JSON-like value scrubbed (keys are servediff's own names and
    stay); the counts of what was taken out, summed."""
    counts = Counter() if counts is None else counts
    if isinstance(value, str):
        out = scrub(value, policy)
        counts.update(out.counts)
        return out.text, counts
    if isinstance(value, dict):
        return {k: scrub_tree(v, counts, policy)[0] for k, v in value.items()}, counts
    if isinstance(value, list | tuple):
        return [scrub_tree(v, counts, policy)[0] for v in value], counts
    return value, counts


def describe(counts: Counter[str]) -> str:
    """What was scrubbed, for the report: kinds and counts."""
    return Scrubbed("", counts).summary()
