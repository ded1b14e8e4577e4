"""The shared FSDP engine:
``torchrun … -m fsdpspec_runners.engine --spec RUN_DIR/resolved-spec.json``.

One module per concept: ``dist`` (process group and device), ``model`` (build and
materialise), ``wrap`` (activation checkpointing, FSDP2 / FSDP1), ``data`` (tokens and
batches), ``optim`` (optimizer, schedule, clipping, scaler), ``loop`` (train /
train_step / forward_backward), ``metrics``, ``checkpoint`` (DCP save / resume),
``export`` (final safetensors), ``signals`` (preemption) and ``train`` (the entry point).
"""
