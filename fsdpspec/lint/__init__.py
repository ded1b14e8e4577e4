"""Lint rules: cross-field judgement on a typed JobSpec (see registry.py)."""
