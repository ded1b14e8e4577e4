"""The library loggers that warn on import when nothing is wrong with a job, quieted
wherever fsdpspec imports the train extra (the engine, and the planner's introspection of
a model on the meta device): torchao, which transformers' quantizers and peft import
whenever it is installed, warns that its optional C++ kernels (built for other Python
and CUDA versions) do not load, and torch's pytree warns about torchao's enums. Their
lines would stand around the one-line answers of `plan`, `validate` and the engine."""

from __future__ import annotations

import logging

NOISY = ("torchao", "torch.utils._pytree")


def quiet() -> None:
    """Only errors from those loggers (before the first import of torch or torchao)."""
    for name in NOISY:
        logging.getLogger(name).setLevel(logging.ERROR)
