"""Expert parallelism: each layer's stacked experts split by expert index over the ``ep``
sub-mesh, their tokens sent to them and back by all-to-all (dropless, variable counts).

transformers 5 builds this for its own meshes (``transformers.distributed.expert_parallel``):
``grouped_gemm`` makes a stacked expert tensor a DTensor ``Shard(0)`` over ``ep`` and
tells the experts module how many it now holds, and ``ep_dispatch_experts`` routes the
module's tokens through an ``EPImplementation``. Its ``AllToAllEP`` is the dispatch here,
taken as it is: it sorts each rank's (token, expert) pairs by expert, exchanges the
counts and then the rows with ``all_to_all_single`` (autograd's, so the routing weights'
gradients come back), runs the rank's experts on what it received, and sends the
outputs home to be weighted and summed. Only the meshes are ours (`mesh.expert_meshes`):
the family's ``base_model_ep_plan`` names the modules, as the plan's units read it.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from fsdpspec.job.job import Job
from fsdpspec_runners.engine.errors import EngineError

# The dispatch transformers registers under this name (`EPImplementationInterface`).
DISPATCH = "all_to_all"


def check_expert_parallel(job: Job) -> None:
    """An EngineError (one line, before any collective) for what the engine's expert
    parallelism does not run with: its sparse mesh regroups the FSDP2 shard ranks alone."""
    dims = job.layout.dims
    if not dims.ep_enabled:
        return
    problem = None
    if job.layout.fsdp_version == 1:
        problem = "FSDP1 does not shard DTensors; use fsdp.version: 2"
    elif dims.cp_enabled or dims.tp_enabled or dims.pp_enabled:
        problem = ("the engine splits the experts over FSDP's shard ranks alone; set "
                   "parallelism.tensor_parallel and parallelism.context_parallel to 1")
    if problem:
        raise EngineError(f"parallelism.expert_parallel {dims.ep}: {problem}")


def expert_parallel_plan(model: nn.Module, experts: list[str]) -> dict[str, str]:
    """The model's ``ep_plan`` (its config's ``base_model_ep_plan`` under the base
    model's prefix), expanded to the modules and tensors it names; those must be the
    job's experts modules, which the planner sized."""
    plan = model._expand_parallel_plan(dict(model.ep_plan))
    dispatched = sorted(name for name, style in plan.items() if style == "ep_dispatch_experts")
    if dispatched != sorted(experts):
        raise EngineError(f"parallelism.expert_parallel: the model's expert-parallel plan "
                          f"names {dispatched}, the job's experts modules are {sorted(experts)}")
    return plan


def apply_expert_parallel(model: nn.Module, plan: dict[str, str], ep_mesh: DeviceMesh,
                          batch_mesh: DeviceMesh) -> None:
    """Split the experts of ``plan`` over ``ep_mesh`` in place and route their tokens by
    all-to-all; ``batch_mesh`` is the ranks that hold the same tokens (this rank alone
    without tensor parallelism), among which each token is sent once."""
    from transformers.distributed.expert_parallel import apply_expert_parallelism

    try:
        apply_expert_parallelism(model, ep_mesh, batch_mesh, plan, ep_implementation=DISPATCH)
    except ValueError as exc:  # experts not divisible by the degree
        raise EngineError(f"parallelism.expert_parallel {ep_mesh.size()}: {exc}") from None
