"""FS15x: launch hygiene — job names, secrets, and the spec's own lint settings."""

from __future__ import annotations

import re
from collections.abc import Iterator

from fsdpspec.lint.registry import RULES, LintContext, diagnostic, rule
from fsdpspec.lint.selection import matches_any
from fsdpspec.spec.diagnostics import Diagnostic, Severity
from fsdpspec.spec.names import kubernetes_name

_SECRET_KEY = re.compile(r"(_TOKEN|_KEY)$|PASSWORD|PASSWD|SECRET", re.IGNORECASE)


@rule("FS150", "name-not-dns-label", Severity.WARNING,
      "metadata.name is not usable as a Kubernetes name",
      "use lowercase letters, digits and '-', starting with a letter, ending with a letter "
      "or digit")
def name_not_dns_label(ctx: LintContext) -> Iterator[Diagnostic]:
    """The job name names the Slurm job and the Kubernetes PyTorchJob. Kubernetes only
    accepts RFC 1035 labels — lowercase letters, digits and `-`, starting with a letter —
    for the services a PyTorchJob creates, so `Llama_SFT.v2` would be renamed by
    `fsdpspec export kubernetes`, or rejected by `kubectl apply` if written by hand.

    FAIL:

        metadata: {name: Llama_SFT.v2}

    PASS:

        metadata: {name: llama-sft-v2}
    """
    name = ctx.spec.metadata.name
    if kubernetes_name(name) != name:
        yield diagnostic("FS150", f"metadata.name {name!r} is not a Kubernetes name",
                         "/metadata/name", f"e.g. {kubernetes_name(name)!r}")


@rule("FS151", "secret-in-env", Severity.WARNING,
      "launch.env holds a literal secret",
      "remove it from the spec and export it in the launching environment")
def secret_in_env(ctx: LintContext) -> Iterator[Diagnostic]:
    """Variables named like credentials (`*_TOKEN`, `*_KEY`, `*PASSWORD*`,
    `*SECRET*`) in `launch.env` put the secret in the spec file, in the run
    directory's resolved-spec.json, and in generated Slurm scripts and Kubernetes
    manifests. Processes inherit the launching environment: export it there.

    FAIL:

        launch:
          env: {HF_TOKEN: hf_abcdefghijklmnop}

    PASS:

        launch:
          env: {HF_HUB_OFFLINE: "1"}
    """
    for key, value in ctx.spec.launch.env.items():
        if _SECRET_KEY.search(key) and value:
            yield diagnostic("FS151", f"launch.env {key} looks like a secret written into "
                             "the spec", f"/launch/env/{key}")


@rule("FS152", "lint-ignore-unknown", Severity.WARNING,
      "a lint.ignore entry matches no rule",
      "check the code against `fsdpspec rules`")
def lint_ignore_unknown(ctx: LintContext) -> Iterator[Diagnostic]:
    """Each `lint.ignore` entry is a rule code or a code prefix (`FS503`, `FS5`,
    `FS5xx`). An entry that matches no rule is a typo, and the rule it meant to silence
    still runs.

    FAIL:

        lint: {ignore: [FS5O3]}

    PASS:

        lint: {ignore: [FS503]}
    """
    codes = list(RULES)
    for index, entry in enumerate(ctx.spec.lint.ignore):
        if not matches_any(entry, codes):
            yield diagnostic("FS152", f"lint.ignore {entry!r} matches no rule",
                             f"/lint/ignore/{index}")
