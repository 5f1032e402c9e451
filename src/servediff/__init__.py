"""servediff: reproducibility and flag-cost audits for LLM serving stacks."""

__version__ = "0.1.0"
