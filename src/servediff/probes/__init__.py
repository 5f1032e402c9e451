"""Probes beyond plain scoring: what each sends to an engine inside one load."""
