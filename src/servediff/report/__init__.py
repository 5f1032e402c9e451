"""Rendering: turns analysis output (summary.json) into tables and reports. Never measures."""
