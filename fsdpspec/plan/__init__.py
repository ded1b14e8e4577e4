"""The memory planner: a resolved `Job` (fsdpspec.job) in, a Plan out, without torch.

units (the shard of each of the job's FSDP units) → memory (device, per rank, at each
moment of a step) and host (per node) → compute (FLOPs, collectives) → planner (verdict,
fewest GPUs, suggestions) → report (JSON and text). `plan --trace` runs the engine's
`trace` on fake tensors, the one plan path that imports torch.
"""
