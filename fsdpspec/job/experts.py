"""A Mixture of Experts' stacked expert tensors: which modules hold them, and where FSDP2
shards them. The one home of both facts: the planner sizes the shards with them, the
engine passes them to ``fully_shard`` (``shard_placement_fn``) from the recorded job.

transformers 5 stacks a layer's experts into one tensor per projection, the expert index
on dim 0 (``gate_up_proj`` (E, 2I, H), ``down_proj`` (E, H, I)); its configs name the
module holding them in ``base_model_ep_plan`` (``layers.*.mlp.experts``:
``ep_dispatch_experts``, its tensors ``grouped_gemm``). FSDP2 shards a tensor on dim 0 by
default and pads that dim to a multiple of the shard degree: once the degree exceeds E
every rank holds a padded row of whole experts, so the shard stops shrinking and the
all-gather grows with the degree. torchtitan (``apply_fsdp_to_decoder``) shards the
experts on dim 1 instead whenever the degree exceeds E; so does fsdpspec.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

# transformers' `base_model_ep_plan` style of the module whose parameters are the
# stacked experts (the tensors under it are "grouped_gemm").
EP_DISPATCH = "ep_dispatch_experts"


def expert_module_patterns(ep_plan: Mapping[str, object] | None) -> Iterator[str]:
    """The experts modules of a ``base_model_ep_plan`` (paths below the base model,
    ``*`` for a layer index)."""
    for pattern, style in (ep_plan or {}).items():
        if style == EP_DISPATCH:
            yield pattern


def expert_shard_dim(shape: tuple[int, ...], shard_degree: int) -> int:
    """The dim FSDP2 shards a stacked expert tensor of ``shape`` on over ``shard_degree``
    ranks: 1 when the degree exceeds the experts it holds (dim 0) and splits dim 1
    evenly (FSDP2 refuses an uneven split of any dim but 0), else 0. Under expert
    parallelism ``shape`` is the rank's own experts and the degree their FSDP
    sub-mesh's: torchtitan's ``efsdp × ep > E``."""
    if shard_degree > shape[0] and len(shape) > 1 and shape[1] % shard_degree == 0:
        return 1
    return 0


def shard_numel(shape: tuple[int, ...], dim: int, shard_degree: int) -> int:
    """Elements one rank holds of a tensor FSDP2 shards on ``dim``: that dim split in
    ``shard_degree`` chunks, each padded to the first's size (FSDP2's
    ``padded_sharded_param_size``)."""
    size = 1
    for index, extent in enumerate(shape):
        size *= -(-extent // shard_degree) if index == dim else extent
    return size
