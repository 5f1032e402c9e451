"""The base of every finding and the schema's version."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

SUMMARY_SCHEMA_VERSION = 22

Metric = Literal["decode_tok_s", "prefill_tok_s", "ttft_s"]
Band = list[float]


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
