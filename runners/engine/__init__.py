"""The shared FSDP engine:
``torchrun … -m fsdpspec_runners.engine --spec RUN_DIR/resolved-spec.json``.

One module per concept: ``train`` (the entry point), ``dist`` (process group, device
and mesh), ``model`` (the resolved job, build and materialise), ``wrap`` (activation
checkpointing, compile, FSDP2 / FSDP1 over the job's units), ``adapter`` (what differs
between FSDP1 and FSDP2), ``data``, ``datasource``, ``records`` (Hugging Face datasets)
and ``packing`` (tokens and batches), ``examples`` (chat and instruction records),
``loss``, ``optim`` (optimizer, schedule, clipping, scaler), ``loop`` (train /
train_step / forward_backward), ``evaluate``, ``metrics`` and ``trackers``,
``checkpoint`` and ``manifest`` (DCP save / resume), ``export`` (final safetensors),
``signals`` (preemption), ``faults`` (the one fault-injection point), ``errors``, and
``trace`` (`plan --trace` on fake tensors).
"""

from fsdpspec.job.quiet_libraries import quiet

quiet()
