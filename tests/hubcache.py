"""A Hugging Face hub cache built on disk, offline, the way huggingface_hub lays one out:
`models--ORG--NAME/blobs/<hash>`, `snapshots/<commit>/<file>` links to the blobs, and
`refs/<branch>` holding the commit."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def build(cache: Path, repo: str, files: dict[str, Path], ref: str = "main") -> str:
    """Put `files` (name in the repository -> a file here) into the cache as one commit of
    `repo` that `ref` points to; returns the commit. Weight files are stored under their
    sha256, as the hub's LFS blobs are; the others under their git blob sha1."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    blobs = folder / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    names = {}
    for name, source in sorted(files.items()):
        data = source.read_bytes()
        lfs = source.suffix in (".safetensors", ".gguf", ".bin")
        names[name] = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
        shutil.copyfile(source, blobs / names[name])
    commit = hashlib.sha1(repr(sorted(names.items())).encode()).hexdigest()
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, blob in names.items():
        link = snapshot / name
        if not link.exists():
            os.symlink(os.path.relpath(blobs / blob, link.parent), link)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / ref).write_text(commit)
    return commit
