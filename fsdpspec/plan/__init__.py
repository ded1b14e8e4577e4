"""The memory planner: a spec and its model config in, a Plan out, without torch.

geometry (parameter shapes per family) → workload (one rank's shapes, dtypes, policies)
→ units (FSDP units and shards) → memory (device, per rank, at each moment of a step)
and host (per node) → compute (FLOPs, collectives) → planner (verdict, fewest GPUs,
suggestions) → report (JSON and text). `trace` alone imports torch (`plan --trace`).
"""
