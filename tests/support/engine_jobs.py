"""The engine tests' shared pieces: the base job, resolved-spec writing, torchrun as
`fsdpspec run` launches it, and readers of a run directory's outputs."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from fsdpspec.runfiles.resolved import write_resolved_spec
from fsdpspec.spec.v1 import JobSpec

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = Path(__file__).resolve().parent
BATCH = Path(__file__).with_name("engine_batch.py")

BASE: dict[str, Any] = {
    "apiVersion": "fsdpspec/v1",
    "kind": "TrainingJob",
    "metadata": {"name": "engine-test"},
    "resources": {"gpus_per_node": 2},
    "model": {"preset": "tiny-llama"},
    "data": {"source": "corpus", "seq_len": 32, "micro_batch_size": 1, "global_batch_size": 4},
    "optimizer": {"lr": 1e-3, "scheduler": {"name": "constant"}},
    "train": {"max_steps": 5},
    "checkpoint": {"interval_steps": 0, "final": {"dtype": "float32"}},
    "logging": {"interval_steps": 1},
}


def chat_job(inputs: Path, steps: int, interval: int) -> dict[str, Any]:
    """A chat fine-tune of the model, tokenizer and parquet chats under ``inputs``
    (`chat_assets`), evaluated and checkpointed every ``interval`` steps."""
    return {
        "model": {"preset": None, "hf_config": str(inputs / "model"),
                  "weights": str(inputs / "model")},
        "data": {"source": "dataset", "path": str(inputs / "chats"), "format": "chat",
                 "tokenizer": str(inputs / "tokenizer"), "eval": {"split": "test"},
                 "seq_len": 64, "global_batch_size": 4},
        "optimizer": {"lr": 1e-2},
        "train": {"max_steps": steps, "eval_interval_steps": interval},
        "checkpoint": {"interval_steps": interval, "keep_last": 0,
                       "final": {"dtype": "float32"}},
    }


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def write_spec(run_dir: Path, override: dict[str, Any] | None = None) -> Path:
    return write_resolved_spec(JobSpec.model_validate(merged(BASE, override or {})), run_dir)


def launch_env(extra: dict[str, str] | None) -> dict[str, str]:
    # support/ holds the factory models; the caller's path after ours (a worktree's
    # `fsdpspec_runners` is found there, not in the installed checkout).
    path = os.pathsep.join([str(ROOT), str(SUPPORT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, **(extra or {})}


def torchrun(
    spec: Path, nproc: int = 2, env: dict[str, str] | None = None, script: list[str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --standalone`` as `fsdpspec run` launches it."""
    target = script or ["-m", "fsdpspec_runners.engine", "--spec", str(spec)]
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        *target,
    ]
    return subprocess.run(
        argv, cwd=ROOT, env=launch_env(env), capture_output=True, text=True, timeout=timeout
    )


def torchrun_jobs(
    specs: list[Path], nproc: int = 2, env: dict[str, str] | None = None
) -> list[subprocess.CompletedProcess]:
    """Each spec trained as ``torchrun(spec)`` trains it, one after another in one launch
    (engine_batch.py: the processes import torch and transformers once). One result per
    spec, its stdout rank 0's output; a spec after a failed one is not run (returncode
    None), and the failed and unrun ones carry the launch's stderr."""
    return train_then_probe(specs, [], nproc, env)[0]


def train_then_probe(
    specs: list[Path], runs: list[tuple[Path, dict[str, Any]]], nproc: int = 2,
    env: dict[str, str] | None = None,
) -> tuple[list[subprocess.CompletedProcess], list[dict[str, Any]]]:
    """`torchrun_jobs(specs)`, then, in the same launch once every job succeeded, for
    each (run directory, job) of ``runs`` (trained on ``nproc`` processes already): the
    logits of the job's model resumed from the run's newest checkpoint, of its final/
    loaded back into the engine as model.weights, and of final/ in transformers, on one
    fixed batch (engine_logits_probe.py). A launch's jobs share one mesh shape."""
    import torch

    with tempfile.TemporaryDirectory() as out:
        pairs = []
        for index, (run_dir, job) in enumerate(runs):
            weights = write_spec(Path(out, f"weights-{index}"), merged(job, {
                "model": {"weights": str(run_dir / "final")}, "checkpoint": {"resume": "never"}}))
            pairs += [str(run_dir / "resolved-spec.json"), str(weights)]
        script = [str(BATCH), out, *map(str, specs), *(["--probe", *pairs] if pairs else [])]
        launch = torchrun(Path((specs or pairs)[0]), nproc, env, script=script,
                          timeout=300 * (len(specs) + 1))
        results = []
        for index, spec in enumerate(specs):
            status = Path(out, f"{index}.status")
            code = int(status.read_text()) if status.exists() else None
            output = Path(out, f"{index}.out")
            results.append(subprocess.CompletedProcess(
                [str(spec)], code, output.read_text() if output.exists() else "",
                "" if code == 0 else launch.stdout + launch.stderr))
        if not runs or any(r.returncode != 0 for r in results):
            return results, []
        ok(launch)
        probes = [torch.load(Path(out, f"probe-{index}.pt")) for index in range(len(runs))]
    from transformers import AutoModelForCausalLM

    for (run_dir, _), probe in zip(runs, probes, strict=True):
        model = AutoModelForCausalLM.from_pretrained(run_dir / "final", dtype=torch.float32)
        with torch.no_grad():
            probe["transformers"] = model(probe["input_ids"]).logits
    return results, probes


def engine_alone(spec: Path) -> subprocess.CompletedProcess:
    """One process without torchrun, so its whole output is the engine's own."""
    return subprocess.run(
        [sys.executable, "-m", "fsdpspec_runners.engine", "--spec", str(spec)],
        cwd=ROOT,
        env=launch_env(None),
        capture_output=True,
        text=True,
        timeout=300,
    )


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def by_step(run_dir: Path) -> dict[int, dict[str, Any]]:
    """Each training step's metrics record, by step."""
    return {m["step"]: m for m in metrics(run_dir) if "loss" in m}


def assert_trains_alike(ours: Path, reference: Path, steps: range) -> None:
    """The same loss and gradient norm at each of ``steps``, to 1e-5."""
    a, b = by_step(ours), by_step(reference)
    for step in steps:
        for key in ("loss", "grad_norm"):
            assert abs(a[step][key] - b[step][key]) <= 1e-5, (step, key, a[step], b[step])


def losses(run_dir: Path) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in metrics(run_dir)}


def final_weights(run_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "final" / "model.safetensors"))
