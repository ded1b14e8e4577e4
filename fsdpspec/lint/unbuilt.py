"""Fields the spec can say before the engine, plan and rules behind them have landed:
refused by name, never accepted and ignored. Each rule goes when its feature lands."""

from __future__ import annotations

from collections.abc import Iterator

from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.spec.diagnostics import Diagnostic, Severity


@rule("FS169", "tensor-parallel-unbuilt", Severity.ERROR,
      "tensor parallelism is not in this release",
      "set parallelism.tensor_parallel: 1 and shard with fsdp alone")
def tensor_parallel_unbuilt(ctx: LintContext) -> Iterator[Diagnostic]:
    """The engine of this release shards with FSDP alone.

    FAIL:

        parallelism: {tensor_parallel: 2}

    PASS:

        parallelism: {tensor_parallel: 1}
    """
    if ctx.spec.parallelism.tensor_parallel > 1:
        yield diagnostic("FS169", "tensor_parallel > 1 is not in this release",
                         "/parallelism/tensor_parallel")


