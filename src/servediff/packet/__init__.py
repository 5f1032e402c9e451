"""The evidence packet, a run as the trap registry takes it: `evidence.py` (servediff's
own packet, schema 1.0) and `registry.py` (the same packet in the registry's shape)."""
