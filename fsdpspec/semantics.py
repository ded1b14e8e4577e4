"""What the engine does, written down once as torch-free data and functions.

The engine (``fsdpspec_runners.engine``), the planner (``fsdpspec.plan``) and the lint
rules all call these instead of keeping copies: copies drift (the first release reported
an MFU that disagreed with its own plan for every Gemma 2 preset). A device's peak
TFLOP/s is ``Accelerator.peak_tflops`` in the catalogue; model families are
``fsdpspec.catalog``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fsdpspec.spec.v1 import Fsdp

# The byte-level tokenizer (used when `data.tokenizer` is null): ids 0–255 are the UTF-8
# bytes, 256 ends a document.
BYTE_EOS = 256
BYTE_VOCAB = BYTE_EOS + 1

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# The engine builds every model in fp32: FSDP's sharded (master) parameters are fp32.
MASTER_DTYPE = "float32"
MASTER_BYTES = DTYPE_BYTES[MASTER_DTYPE]
# Optimizer states per parameter, each in the master dtype.
OPTIMIZER_STATES = {"adamw": 2, "sgd": 1}

HYBRID_STRATEGIES = ("HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
# Strategies that free a unit's gathered parameters after its forward (ZeRO-3 style);
# the others keep them gathered until backward.
_RESHARDS_AFTER_FORWARD = {"FULL_SHARD", "HYBRID_SHARD"}

# torchrun's rendezvous port when an endpoint names none.
DEFAULT_RDZV_PORT = 29500

# What FSDP1 does with an option the spec leaves null.
FSDP1_DEFAULTS = {"limit_all_gathers": True, "use_orig_params": True}


def reshards_after_forward(strategy: str) -> bool:
    """Whether units free their gathered parameters after forward under ``strategy``."""
    return strategy in _RESHARDS_AFTER_FORWARD


def fsdp1_option(fsdp: Fsdp, name: str) -> bool:
    """An FSDP1-only option (`limit_all_gathers`, `use_orig_params`), FSDP1's default when null."""
    value = getattr(fsdp, name)
    return FSDP1_DEFAULTS[name] if value is None else value


def is_checkpointed(mode: str, ac_every: int, index: int) -> bool:
    """Whether layer ``index`` is wrapped in activation checkpointing: every layer (full,
    and op, which saves some of each layer's tensors), one in ``ac_every`` from the first
    (selective) or none."""
    if mode == "none":
        return False
    return index % (ac_every if mode == "selective" else 1) == 0


def checkpointed_count(mode: str, ac_every: int, num_layers: int) -> int:
    """How many of layers 0..num_layers-1 are checkpointed (closed form, any depth)."""
    if mode == "none" or num_layers <= 0:
        return 0
    every = ac_every if mode == "selective" else 1
    return (num_layers + every - 1) // every


def syncs_gradients(strategy: str, last_micro_batch: bool) -> bool:
    """Whether a micro-batch's backward reduces gradients. Sharded strategies reduce every
    micro-batch, so accumulated gradients stay sharded (deferring would keep every
    unsharded gradient: 30 GiB per rank for an 8B model); NO_SHARD reduces the last only."""
    return last_micro_batch or strategy != "NO_SHARD"


def synced_micro_batches(strategy: str, accumulation: int) -> int:
    """How many of a step's micro-batches reduce gradients (see `syncs_gradients`)."""
    return accumulation if syncs_gradients(strategy, last_micro_batch=False) else 1


def model_flops_per_token(*, parameters: int, num_layers: int, q_width: int,
                          seq_len: int) -> float:
    """Training FLOPs per token without recomputation, as MFU counts them (PaLM, appendix
    B): 6·N for the matrix multiplies plus 12·L·q·S for attention scores and values, with
    q the query width (heads × head_dim, which differs from hidden_size in Gemma)."""
    return 6.0 * parameters + 12.0 * num_layers * q_width * seq_len


def forward_flops_per_token(*, parameters: int, num_layers: int, q_width: int,
                            seq_len: int) -> float:
    """One forward alone (a third of `model_flops_per_token`): what a DPO reference
    adds per token."""
    return model_flops_per_token(parameters=parameters, num_layers=num_layers,
                                 q_width=q_width, seq_len=seq_len) / 3


# torchtitan's op-level selective checkpointing (`selective_ac_option: op`), which the
# published runs of benchmarks/step_time.py use.
OP_LEVEL = "op"


def recompute_flops_per_token(*, parameters: int, num_layers: int, q_width: int, seq_len: int,
                              mode: str, ac_every: int) -> float:
    """FLOPs activation checkpointing adds per token: the checkpointed share of the layers
    runs its forward (a third of the training FLOPs) again. Op-level checkpointing keeps
    every other matrix multiply's output and attention's: it recomputes about half of the
    matrix multiplies and no attention."""
    if mode == "none":
        return 0.0
    if mode == "op":
        return 1.0 * parameters
    share = 1.0 if mode == "full" else 1 / ac_every
    return share * (2.0 * parameters + 4.0 * num_layers * q_width * seq_len)


def mfu(tokens_per_s_per_device: float, flops_per_token: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation as the engine logs it: the model FLOPs (no recomputation,
    `model_flops_per_token`) one device does per second over its dense peak; 0 when the
    peak is unknown."""
    if not peak_tflops:
        return 0.0
    return tokens_per_s_per_device * flops_per_token / (peak_tflops * 1e12)


def checkpoints_written(interval_steps: int, max_steps: int) -> int:
    """How many checkpoints a run that is not interrupted writes: one every
    `interval_steps` steps and one at the last step (the engine's loop); none when
    `interval_steps` is 0, where only a stop by a signal saves."""
    if interval_steps == 0:
        return 0
    return max_steps // interval_steps + (1 if max_steps % interval_steps else 0)
