"""Analysis: pure functions from evidence to numbers. No engine, no I/O but reading."""
