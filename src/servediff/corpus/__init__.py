"""The texts a plan scores: the built-in corpus or the user's own JSONL file.

A corpus row is `{"tag": ..., "text": ..., "kind": ...}`; tags are stable
identifiers that every record and every comparison is keyed on.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from servediff.errors import CorpusError


class Text(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tag: str
    text: str
    kind: str = "text"


class Corpus(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    texts: tuple[Text, ...]

    def sha256(self) -> str:
        body = json.dumps([t.model_dump() for t in self.texts], sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()

    def select(self, tags: list[str], max_texts: int, source: str) -> Corpus:
        texts = self.texts
        if tags:
            known = {t.tag for t in texts}
            missing = [t for t in tags if t not in known]
            if missing:
                raise CorpusError(f"{source}: corpus.tags: not in the corpus: {', '.join(missing)}")
            texts = tuple(t for t in texts if t.tag in set(tags))
        if max_texts:
            texts = texts[:max_texts]
        return Corpus(name=self.name, texts=texts)


def load_corpus(path: Path | None) -> Corpus:
    """The built-in corpus when `path` is None, else the JSONL file at `path`."""
    if path is None:
        ref = resources.files("servediff.corpus").joinpath("builtin.jsonl")
        return _parse(ref.read_text(encoding="utf-8"), "builtin")
    try:
        body = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CorpusError(f"{path}: corpus file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{path}: cannot read corpus file ({exc})") from None
    return _parse(body, str(path))


def _parse(body: str, source: str) -> Corpus:
    texts: list[Text] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(body.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{source}:{lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise CorpusError(f"{source}:{lineno}: expected an object with 'tag' and 'text'")
        tag, text = row.get("tag"), row.get("text")
        if not isinstance(tag, str) or not tag.strip():
            raise CorpusError(f"{source}:{lineno}: 'tag' must be a non-empty string")
        if not isinstance(text, str) or not text:
            raise CorpusError(f"{source}:{lineno}: 'text' must be a non-empty string")
        if tag in first_line:
            raise CorpusError(
                f"{source}:{lineno}: duplicate tag {tag!r} (first on line {first_line[tag]})"
            )
        first_line[tag] = lineno
        kind = row.get("kind", "text")
        texts.append(Text(tag=tag, text=text, kind=str(kind)))
    if not texts:
        raise CorpusError(f"{source}: corpus is empty (no rows with 'tag' and 'text')")
    return Corpus(name=source if source == "builtin" else Path(source).name, texts=tuple(texts))
