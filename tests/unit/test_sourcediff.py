"""What changed between two source trees: every file listed, the diff narrowed to those
that can change a served number."""

from __future__ import annotations

from pathlib import Path

from servediff.sourcediff import changes_text, compare_trees, matters


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_diff_keeps_source_and_leaves_docs_and_tests_out(tmp_path: Path):
    a = tree(tmp_path / "a", {"ggml/src/ops.c": "x = 1;\ny = 2;\n", "docs/build.md": "old\n",
                              "tests/test-ops.cpp": "a\n", "CMakeLists.txt": "set(A 1)\n",
                              "gone.h": "int g;\n"})
    b = tree(tmp_path / "b", {"ggml/src/ops.c": "x = 1;\ny = 3;\n", "docs/build.md": "new\n",
                              "tests/test-ops.cpp": "b\n", "CMakeLists.txt": "set(A 1)\n",
                              "src/new.cpp": "int n;\n"})
    changes, diff = compare_trees(a, b, "100", "101")
    assert [(f.path, f.status, f.matters) for f in changes.files] == [
        ("docs/build.md", "changed", False), ("ggml/src/ops.c", "changed", True),
        ("gone.h", "removed", True), ("src/new.cpp", "added", True),
        ("tests/test-ops.cpp", "changed", False)]
    assert "-y = 2;\n+y = 3;\n" in diff and "+++ 101/src/new.cpp" in diff
    assert "docs/build.md" not in diff and "test-ops" not in diff
    assert changes_text(changes).startswith(
        "100 to 101: 5 files changed, 3 of them source that can change a served number: "
        "ggml/src/ops.c (+1 -1), gone.h (+0 -1), src/new.cpp (+1 -0)")


def test_where_only_docs_changed_the_diff_shows_them_all(tmp_path: Path):
    a = tree(tmp_path / "a", {"README.md": "a\n"})
    b = tree(tmp_path / "b", {"README.md": "b\n"})
    changes, diff = compare_trees(a, b, "1", "2")
    assert [f.matters for f in changes.files] == [False] and "+b" in diff
    assert changes_text(changes) == "1 to 2: 1 file changed: README.md (+1 -1)"


def test_what_matters():
    assert matters("ggml/src/ggml-cpu/ops.cpp") and matters("CMakeLists.txt")
    assert not matters("tools/server/webui/src/app.tsx") and not matters(".github/ci.yml")
    assert not matters("examples/simple/simple.cpp") and not matters("docs/ops.md")


def test_what_the_build_source_leaves_out_is_left_out_of_the_diff(tmp_path: Path):
    """llama.cpp's CPU build: another backend and the vendored HTTP library cannot change
    what it computes; ggml's own source can."""
    from servediff.engines.llamacpp_builds import ASIDE

    a = tree(tmp_path / "a", {"ggml/src/ggml-webgpu/w.cpp": "a\n", "ggml/src/ggml.c": "a\n",
                              "vendor/cpp-httplib/httplib.h": "a\n", "tools/server/s.cpp": "a\n",
                              "tools/cli/cli.cpp": "a\n"})
    b = tree(tmp_path / "b", {"ggml/src/ggml-webgpu/w.cpp": "b\n", "ggml/src/ggml.c": "b\n",
                              "vendor/cpp-httplib/httplib.h": "b\n", "tools/server/s.cpp": "b\n",
                              "tools/cli/cli.cpp": "b\n"})
    changes, diff = compare_trees(a, b, "9725", "9733", ASIDE)
    assert [f.path for f in changes.mattering()] == ["ggml/src/ggml.c", "tools/server/s.cpp"]
    assert "webgpu" not in diff and "httplib" not in diff and "cli.cpp" not in diff
