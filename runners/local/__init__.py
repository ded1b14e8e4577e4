"""Local execution of a run: run directory, lock, pre-flight checks, supervision."""
