"""Hub model ids: parsed, looked up in a hub cache laid out on disk offline, recorded."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from servediff import hub, models
from servediff.errors import InputError
from servediff.evidence import ModelSource
from servediff.launch import hub_args
from servediff.packet.evidence import target_revision
from servediff.report.table import model_name
from tests import hubcache
from tests.engines.fake import FakeLauncher
from tests.unit.test_runner import launches, plan, run


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache that huggingface_hub reads (HF_HUB_CACHE)."""
    folder = tmp_path / "hub"
    folder.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(folder))
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(folder))
    return folder


def files(tmp_path: Path) -> dict[str, Path]:
    source = tmp_path / "src"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"bos_token_id": 7}))
    (source / "model.safetensors").write_bytes(b"some weights")
    return {"config.json": source / "config.json",
            "model.safetensors": source / "model.safetensors"}


@pytest.mark.parametrize(("given", "repo", "revision"), [
    ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B", None),
    ("Qwen/Qwen3-0.6B@main", "Qwen/Qwen3-0.6B", "main"),
    ("org/name@v1.2", "org/name", "v1.2"),
    ("org/name@" + "a" * 40, "org/name", "a" * 40),
])
def test_a_hub_id_is_org_name_and_an_optional_revision(given: str, repo: str,
                                                        revision: str | None):
    assert hub.hub_id(given) == hub.HubId(repo, revision)
    assert hub.HubId(repo, revision).pinned == (revision == "a" * 40)


@pytest.mark.parametrize("given", ["smollm2", "./models/x", "../x/y", "~/models/x", "/abs/x",
                                   "a/b/c", "org/", "org/name@"])
def test_names_and_paths_are_not_hub_ids(given: str):
    assert hub.hub_id(given) is None


def test_the_cache_resolves_a_ref_a_commit_and_nothing_else(tmp_path: Path, cache: Path):
    commit = hubcache.build(cache, "org/name", files(tmp_path))
    for given in ("org/name", "org/name@main", f"org/name@{commit}"):
        found = hub.cached(hub.hub_id(given))  # type: ignore[arg-type]
        assert found is not None and found.commit == commit, given
        assert (found.folder / "model.safetensors").read_bytes() == b"some weights"
    assert hub.cached(hub.HubId("org/name", "other-branch")) is None
    assert hub.cached(hub.HubId("org/other", None)) is None


def test_a_folder_beside_the_plan_is_the_folder_not_a_hub_id(tmp_path: Path):
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert models.hub_model("org/name", tmp_path) is None
    assert models.hub_model("org/other", tmp_path) == hub.HubId("org/other", None)


def test_a_cached_hub_id_is_served_from_its_snapshot_with_commit_and_hashes(
        tmp_path: Path, cache: Path):
    commit = hubcache.build(cache, "org/name", files(tmp_path))
    root = run(tmp_path, FakeLauncher(), plan(tmp_path, model="org/name@main",
                                             arms={"a": {}}, loads_per_arm=1))
    (launch,) = launches(root, "a-load1")
    source = ModelSource.model_validate(launch["model_source"])
    snapshot = cache / "models--org--name" / "snapshots" / commit
    assert (source.kind, source.hub_repo, source.hub_revision, source.hub_commit) == \
        ("hub", "org/name", "main", commit)
    assert source.served == str(snapshot) and str(snapshot) in launch["command"]
    assert launch["weights_sha256"]["model.safetensors"] == \
        hashlib.sha256(b"some weights").hexdigest()
    # hashed: the packet's revision is the weights' sha256
    weights = launch["weights_sha256"]
    assert target_revision("org/name@main", weights, None)[1] == "weights-sha256"
    assert (root / "cells" / "a-load1-score.json").exists()


def test_a_hub_id_not_in_the_cache_is_given_to_the_engine_and_not_hashed(
        tmp_path: Path, cache: Path):
    root = run(tmp_path, FakeLauncher(), plan(tmp_path, model="org/absent@v2",
                                             arms={"a": {}}, loads_per_arm=1))
    (launch,) = launches(root, "a-load1")
    source = ModelSource.model_validate(launch["model_source"])
    assert (source.kind, source.served, source.hub_commit) == ("hub", "org/absent", None)
    assert launch["weights_sha256"] == {} and "org/absent" in launch["command"]
    # vLLM and SGLang are given its revision; an engine without the flag is not
    assert hub_args(source, "--revision") == ["--revision", "v2"]
    assert hub_args(source, None) == []
    cached = source.model_copy(update={"hub_commit": "c" * 40})
    assert hub_args(cached, "--revision") == []
    # the packet refuses a name that is not pinned, and takes a commit as one
    with pytest.raises(InputError, match="not in the local hub cache"):
        target_revision("org/absent@v2", {}, None)
    with pytest.raises(InputError, match="mutable revision `main`"):
        target_revision("org/absent@main", {}, None)
    assert target_revision("org/absent@" + "c" * 40, {}, None) == ("c" * 40, "hub-commit")


def test_the_terminal_names_a_hub_id_as_given_and_a_path_by_its_last_part():
    assert model_name("meta-llama/Llama-3.1-8B@main") == "meta-llama/Llama-3.1-8B@main"
    assert model_name("/data/models/Llama-3.1-8B") == "Llama-3.1-8B"
    assert model_name("../../models/tiny/model.gguf") == "model.gguf"
    assert model_name("smollm2") == "smollm2"
