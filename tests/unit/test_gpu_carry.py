"""The carry of engine wheels to the GPU machine (scripts/gpu_carry.py): the committed
manifests pin every wheel with its sha256, the carry folders fit a call, and what is cut
or repacked here comes back whole, checked, on the other side."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from scripts import gpu_carry
from servediff.launch import carried_wheels

MANIFESTS = sorted(gpu_carry.MANIFESTS.glob("*.txt"))


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.stem)
def test_every_manifest_pins_each_wheel_once_with_its_sha256(manifest: Path):
    pins = gpu_carry.read_manifest(manifest)
    lines = [line for line in manifest.read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert len(pins) == len(lines) > 5
    assert all(len(p.sha256) == 64 and int(p.sha256, 16) >= 0 for p in pins)
    assert len({p.key for p in pins}) == len(pins)


def test_the_sglang_set_is_the_one_that_ran_on_the_h200():
    pins = {p.key: p.version for p in
            gpu_carry.read_manifest(gpu_carry.manifest_path("sglang-0.5.17"))}
    assert pins["sglang"] == "0.5.17" and pins["sglang-kernel"] == "0.4.5"
    assert pins["flashinfer-python"] == "0.6.15.post1" and pins["transformers"] == "5.12.1"
    assert "torch" not in pins  # the device's own torch 2.11 serves it


@pytest.mark.parametrize("bad", [
    "pydantic==2.14.4",                                   # no hash
    "pydantic==2.14.4 --hash=sha256:abc",                 # short hash
    "pydantic>=2 --hash=sha256:" + "0" * 64,              # not pinned
    "pydantic==2.14.4 --hash=md5:" + "0" * 32,            # not sha256
])
def test_a_line_that_is_not_a_pinned_hash_is_refused_with_its_place(tmp_path: Path, bad: str):
    manifest = tmp_path / "set.txt"
    manifest.write_text(f"# a set\n{bad}\n")
    with pytest.raises(SystemExit, match=r"set\.txt:2: expected `name==version"):
        gpu_carry.read_manifest(manifest)


def test_a_wheel_pinned_twice_is_refused(tmp_path: Path):
    manifest = tmp_path / "set.txt"
    manifest.write_text("a==1 --hash=sha256:" + "0" * 64 + "\nA==2 --hash=sha256:" + "1" * 64)
    with pytest.raises(SystemExit, match="pinned twice"):
        gpu_carry.read_manifest(manifest)


def test_folders_fit_a_call_beside_the_tree():
    mib = gpu_carry.MIB
    assert gpu_carry.folder_limit(13 * mib) == 48 * mib
    assert gpu_carry.folder_limit(0) == gpu_carry.FOLDER_MAX == 60 * mib
    sizes = {"a": 40 * mib, "b": 30 * mib, "c": 20 * mib, "d": 9 * mib, "e": 1}
    folders = gpu_carry.layout(sizes, 48 * mib)
    assert sorted(n for f in folders for n in f) == sorted(sizes)
    assert all(sum(sizes[n] for n in f) <= 48 * mib for f in folders)
    assert len(folders) == 3  # 40+(e) | 30+9 | 20 ... first fit, largest first
    with pytest.raises(ValueError, match="larger than a folder"):
        gpu_carry.layout({"big": 49 * mib}, 48 * mib)


def test_a_wheel_cut_into_pieces_comes_back_with_its_sha256(tmp_path: Path):
    wheel = tmp_path / "big-1.0-py3-none-any.whl"
    wheel.write_bytes(bytes(range(256)) * 4099)  # not a multiple of the piece size
    digest = gpu_carry.sha256(wheel)
    stash = tmp_path / "stash"
    stash.mkdir()
    pieces = gpu_carry.split(wheel, 100_000, stash)
    assert len(pieces) == 11 and all(p.stat().st_size <= 100_000 for p in pieces)
    gpu_carry.join_pieces(stash)
    assert [p.name for p in stash.iterdir()] == [wheel.name]
    assert gpu_carry.sha256(stash / wheel.name) == digest
    # a missing piece (a carry call that did not happen) is named, not joined short
    for p in gpu_carry.split(wheel, 100_000, stash)[3:4]:
        p.unlink()
    (stash / wheel.name).unlink()
    with pytest.raises(SystemExit, match="a carry call is missing"):
        gpu_carry.join_pieces(stash)


def make_wheel(path: Path, files: dict[str, bytes], listed: dict[str, bytes] | None = None
               ) -> None:
    """A wheel whose RECORD lists each file's sha256 (of `listed`, default the files), as
    pip writes it."""
    rows = []
    for name, data in (listed or files).items():
        b64 = gpu_carry.base64.urlsafe_b64encode(hashlib.sha256(data).digest())
        rows.append(f"{name},sha256={b64.rstrip(b'=').decode()},{len(data)}")
    rows.append("pkg-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("pkg-1.0.dist-info/RECORD", "\n".join(rows) + "\n")


def test_a_repacked_wheel_is_rebuilt_and_checked_file_by_file(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(gpu_carry, "CACHE", tmp_path / "cache")
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    files = {"pkg/__init__.py": b"x = 1\n", "pkg/kernels.so": b"\x7fELF" + b"\0" * 50_000,
             "pkg-1.0.dist-info/METADATA": b"Name: pkg\nVersion: 1.0\n"}
    make_wheel(wheel, files)
    packed, expected = gpu_carry.repack(wheel)
    assert packed.name == wheel.name + ".tar.xz" and packed.stat().st_size < 5_000
    assert expected["wheel_sha256"] == gpu_carry.sha256(wheel)
    stash = tmp_path / "stash"
    stash.mkdir()
    (stash / packed.name).write_bytes(packed.read_bytes())
    rebuilt = gpu_carry.rebuild(stash / packed.name, expected)
    with zipfile.ZipFile(rebuilt) as zf:
        assert {n: zf.read(n) for n in files} == files
    # a file changed on the way fails against the RECORD; another RECORD is refused
    bad = tmp_path / "bad-1.0-py3-none-any.whl"
    make_wheel(bad, {**files, "pkg/__init__.py": b"x = 2\n"}, listed=files)
    bad_packed, _ = gpu_carry.repack(bad)
    copy = stash / bad_packed.name
    copy.write_bytes(bad_packed.read_bytes())
    with pytest.raises(SystemExit, match="pkg/__init__.py differs from its RECORD"):
        gpu_carry.rebuild(copy, expected)
    other = tmp_path / "other-1.0-py3-none-any.whl"
    make_wheel(other, {**files, "pkg/extra.py": b""})
    other_packed, _ = gpu_carry.repack(other)
    (stash / other_packed.name).write_bytes(other_packed.read_bytes())
    with pytest.raises(SystemExit, match="its RECORD is not the wheel's"):
        gpu_carry.rebuild(stash / other_packed.name, expected)


def test_a_launch_names_the_wheel_set_found_on_the_engine_s_pythonpath(tmp_path: Path):
    target = tmp_path / "sglang-0.5.17"
    target.mkdir()
    record = {"wheel_set": "sglang-0.5.17", "manifest_sha256": "ab" * 32,
              "packages": {"sglang": "0.5.17"}, "repacked": []}
    (target / "servediff-carry.json").write_text(json.dumps(record))
    assert carried_wheels(f"{tmp_path / 'other'}:{target}") == record
    assert carried_wheels(str(tmp_path)) is None and carried_wheels("") is None


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_the_gpu_scripts_plans_are_valid_plans(device: str, tmp_path: Path):
    # a plan mistake found here costs nothing; found on the H200 it costs a lease's minutes
    import tomllib

    from scripts import gpu_sglang, gpu_vllm
    from servediff.plan import resolve_plan

    fake = {k: Path(f"/models/{k}") for k in ("seed", "moe", "smollm2")}
    made = [*gpu_sglang.plans(device, fake, "flashinfer_cutlass"),
            *gpu_vllm.plans(device, fake["smollm2"])]
    assert len(made) == 13
    for name, text in made:
        raw = tomllib.loads(text)
        assert raw["name"] == name
        raw["model"] = "smollm2"  # a model that exists here
        plan, corpus = resolve_plan(raw, f"{name}.toml", tmp_path)
        assert corpus.texts and plan.launch.command
        if device == "cuda":
            # the engine runs from its carried set alone; compiled code kept per machine
            assert plan.launch.env["PYTHONPATH"].startswith("/root/engines/")
            assert ":" not in plan.launch.env["PYTHONPATH"]
            assert "FLASHINFER_WORKSPACE_BASE" in plan.launch.keep_caches
    # the whole signature plan in one lease: its 4 arms, 2 combined loads each, and
    # torch.compile's cache shared between an arm's loads (fresh in h200-vllm-signature)
    factorial = dict(made)["h200-vllm-factorial"]
    plan = resolve_plan({**tomllib.loads(factorial), "model": "smollm2"}, "v.toml",
                        tmp_path)[0]
    assert list(plan.arms) == ["baseline", "batch_invariant", "eager", "batch_invariant+eager"]
    assert (plan.launch.cache_policy, plan.loads_per_arm, plan.cost_loads_per_arm) == (
        "shared", 2, 2)
    # the eager plan's drift part alone: its four drift loads and no cost part
    drift = dict(made)["h200-vllm-eager-drift"]
    plan = resolve_plan({**tomllib.loads(drift), "model": "smollm2"}, "d.toml", tmp_path)[0]
    assert not plan.probes.cost_probes() and list(plan.arms) == ["baseline", "eager"]
    assert plan.launch.cache_policy == "fresh"
    # which op breaks batch invariance under --enforce-eager: three arms with both, one
    # load each, scoring at batch 1 and 8 alone; RMSNorm native in the second, every
    # custom op native in the third
    ops = dict(made)["h200-vllm-eager-ops"]
    plan = resolve_plan({**tomllib.loads(ops), "model": "smollm2"}, "o.toml", tmp_path)[0]
    assert list(plan.arms) == ["as_is", "rms_native", "all_native"]
    assert plan.loads_per_arm == 1 and not plan.probes.cost_probes()
    assert plan.launch.env["VLLM_BATCH_INVARIANT"] == "1"
    assert all(a.args[0] == "--enforce-eager" for a in plan.arms.values())
    assert plan.arms["rms_native"].args[1:3] == ["--compilation-config",
                                                 '{"custom_ops": ["all", "-rms_norm"]}']
    seed = dict(gpu_sglang.plans(device, fake, None))["h200-sglang-seed"]
    assert list(resolve_plan({**tomllib.loads(seed), "model": "smollm2"}, "s.toml",
                             tmp_path)[0].arms) == [
        "baseline", "deterministic", "triton", "deterministic+triton"]
    # FP8 on Hopper: the factor that asks for FlashInfer's FP8 GEMM (the autotuner's way
    # in), over FP8 in every arm, one cold load each
    fp8 = dict(gpu_sglang.plans(device, fake, None))["h200-sglang-fp8-autotune"]
    plan = resolve_plan({**tomllib.loads(fp8), "model": "smollm2"}, "f.toml", tmp_path)[0]
    assert list(plan.arms) == ["baseline", "flashinfer_fp8", "autotune_off",
                              "flashinfer_fp8+autotune_off"]
    assert plan.loads_per_arm == 1
    if device == "cuda":
        assert plan.launch.command[plan.launch.command.index("--quantization") + 1] == "fp8"
        assert plan.arms["flashinfer_fp8"].args == ["--fp8-gemm-backend",
                                                     "flashinfer_cutlass"]
