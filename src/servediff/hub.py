"""Models named by their Hugging Face hub id: `org/name` or `org/name@revision`.

vLLM and SGLang users name models that way and the engine resolves the name itself.
servediff looks the id up in huggingface_hub's local cache (nothing is downloaded):
when the revision is there, the engine is given that snapshot's folder, so that it serves
exactly the files servediff hashed and the load record can name the commit; when it is not,
the engine is given the id (and the revision) and the record says the weights were not
hashed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# owner/name as the hub spells them (letters, digits, `-`, `_`, `.`), then an optional
# `@revision`: a branch, a tag or a commit
HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)"
                    r"(?:@(?P<revision>[\w.-][\w./-]*))?$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class HubId:
    """A model as the plan names it on the hub."""

    repo: str
    revision: str | None

    @property
    def pinned(self) -> bool:
        """The revision is a commit: it cannot move."""
        return self.revision is not None and COMMIT.match(self.revision) is not None


@dataclass(frozen=True)
class Snapshot:
    """A hub id found in the local cache: its folder and the commit it points to."""

    folder: Path
    commit: str


def hub_id(model: str) -> HubId | None:
    """The hub id a plan's `model` is, or None (a built-in name, a path, anything else)."""
    found = HUB_ID.match(model)
    if found is None or model.startswith((".", "~")):
        return None
    return HubId(found["repo"], found["revision"])


def cached(model: HubId) -> Snapshot | None:
    """The id's snapshot in huggingface_hub's local cache (HF_HUB_CACHE, HF_HOME), or None
    when that revision is not there. Nothing is fetched."""
    # imported here: reading a plan must not import huggingface_hub
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(model.repo, revision=model.revision,
                                        local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, FileNotFoundError):
        return None
    return Snapshot(folder=folder, commit=folder.name)
