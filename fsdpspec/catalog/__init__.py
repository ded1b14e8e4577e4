"""Model and hardware catalogue: accelerators, presets, model families."""
