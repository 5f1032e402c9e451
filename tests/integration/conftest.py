"""Fixtures shared by the integration modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.engines import hf_plan, run_plan


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded engine's float32 scores of the texts the other engines score."""
    return run_plan(tmp_path_factory.mktemp("hf"), hf_plan())
