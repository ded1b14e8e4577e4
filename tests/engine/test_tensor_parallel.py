"""Tensor parallelism through `fsdpspec run`, on CPU processes (gloo): a tiny Llama on
2 processes (TP 2) and on 4 (data-parallel 2 × TP 2) trains as TP 1 does on the same
global batch and seed (the straight run of tests/conftest.py), resumes exactly, resumes
onto TP 1 and from TP 1 onto dp 2 × TP 2, where it resumes exactly again, and exports
weights transformers loads with the checkpoint's logits; Gemma 3 (tied embeddings,
per-head q/k norms) and GPT-NeoX (fused per-head qkv, biases, LayerNorm) train as TP 1,
export as it does and resume exactly and onto TP 1; a chat fine-tune with evaluation
trains with a full state dict. One run per shape, each checkpointed mid-way for the
resumes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from chat_assets import chat_parquet, chat_tokenizer, tiny_llama  # noqa: E402
from engine_jobs import (  # noqa: E402
    BASE,
    PROBE,
    chat_job,
    engine_alone,
    final_weights,
    merged,
    metrics,
    ok,
    torchrun,
    write_spec,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STEPS = 5
MIDDLE = 3
TP2 = {"resources": {"accelerator": "cpu"}, "parallelism": {"tensor_parallel": 2},
       "train": {"max_steps": STEPS},
       "checkpoint": {"interval_steps": MIDDLE, "keep_last": 0}}


def fsdpspec_run(job: dict[str, Any], run_dir: Path, *sets: str,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`fsdpspec run job.yaml --set …` as a user types it, the run in ``run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = run_dir.parent / f"{run_dir.name}.yaml"
    spec.write_text(json.dumps(merged(job, {"checkpoint": {"dir": str(run_dir)}})))
    result = subprocess.run(
        [sys.executable, "-m", "fsdpspec", "run", str(spec), *sets], cwd=run_dir.parent,
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    return ok(result)


def by_step(run_dir: Path) -> dict[int, dict[str, Any]]:
    return {m["step"]: m for m in metrics(run_dir) if "loss" in m}


def assert_trains_alike(ours: Path, reference: Path, steps: range, tolerance: float) -> None:
    a, b = by_step(ours), by_step(reference)
    for step in steps:
        for key in ("loss", "grad_norm"):
            assert abs(a[step][key] - b[step][key]) <= tolerance, (step, key, a[step], b[step])


def checkpoint(run_dir: Path, step: int) -> str:
    return str(run_dir / "checkpoints" / f"step-{step:08d}")


def assert_resumes_exactly(job: dict[str, Any], run_dir: Path, resumed: Path, step: int,
                           *sets: str) -> None:
    """``job`` resumed from ``run_dir``'s step-``step`` checkpoint: the same losses after
    it, bit for bit, and the same final weights."""
    fsdpspec_run(job, resumed, *sets, "--set", f"checkpoint.resume={checkpoint(run_dir, step)}")
    straight, again = by_step(run_dir), by_step(resumed)
    after = sorted(s for s in straight if s > step)
    assert after and [again[s]["loss"] for s in after] == [straight[s]["loss"] for s in after]
    a, b = final_weights(run_dir), final_weights(resumed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def assert_resumes_onto_tp1(job: dict[str, Any], run_dir: Path, onto: Path) -> None:
    """The TP 2 checkpoint resharded by DCP onto one process without tensor parallelism
    (the same micro-batches a step): steps 4–5 as the TP 2 run's to 1e-5."""
    done = fsdpspec_run(job, onto, "--set", "parallelism.tensor_parallel=1",
                        "--set", "resources.gpus_per_node=1",
                        "--set", "checkpoint.final.enabled=false",
                        "--set", f"checkpoint.resume={checkpoint(run_dir, MIDDLE)}")
    assert "(step 3)" in done.stdout and "mesh dp_shard 1," in done.stdout
    assert_trains_alike(onto, run_dir, range(MIDDLE + 1, STEPS + 1), 1e-5)


@pytest.fixture(scope="session")
def tp_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("tp-llama") / "run"
    done = fsdpspec_run(merged(BASE, TP2), run_dir)
    assert "mesh dp_shard 1 × tp 2" in done.stdout
    return run_dir


def test_tp2_trains_as_tp1(tp_llama: Path, straight_run: Path) -> None:
    """TP 2 on 2 processes (one data-parallel rank, 4 micro-batches a step) against FSDP
    alone on 2 (2 each): the same global batches, losses and clipped-norm inputs to 1e-5."""
    assert_trains_alike(tp_llama, straight_run, range(1, STEPS + 1), 1e-5)


def test_tp2_resumes_exactly(tp_llama: Path, tmp_path: Path) -> None:
    assert_resumes_exactly(merged(BASE, TP2), tp_llama, tmp_path / "resumed", MIDDLE)


def test_tp2_resumes_onto_tp1(tp_llama: Path, tmp_path: Path) -> None:
    assert_resumes_onto_tp1(merged(BASE, TP2), tp_llama, tmp_path / "tp1")


def test_tp2_export_gives_the_checkpoints_logits(tp_llama: Path, tmp_path: Path) -> None:
    """final/ of a TP 2 run loads in transformers with the logits of the TP-sharded model
    resumed from its checkpoint, and loads back into a TP 2 engine as model.weights."""
    from transformers import AutoModelForCausalLM

    trained = tp_llama / "resolved-spec.json"
    weights = write_spec(tmp_path / "weights", merged(TP2, {
        "model": {"weights": str(tp_llama / "final")}, "checkpoint": {"resume": "never"}}))
    out = tmp_path / "logits.pt"
    ok(torchrun(trained, script=[str(PROBE), str(trained), str(weights), str(out)]))
    probe = torch.load(out)
    model = AutoModelForCausalLM.from_pretrained(tp_llama / "final", dtype=torch.float32)
    with torch.no_grad():
        logits = model(probe["input_ids"]).logits
    assert torch.allclose(logits, probe["checkpoint"], atol=1e-5, rtol=0)
    assert torch.allclose(logits, probe["weights"], atol=1e-5, rtol=0)


# Data parallel 2 × TP 2 on 4 processes, resumed from the straight run's step 5 for
# steps 6–10 and checkpointed at step 8.
DP2_TP2 = merged(BASE, merged(TP2, {
    "resources": {"gpus_per_node": 4}, "train": {"max_steps": 10},
    "checkpoint": {"interval_steps": 8}}))


@pytest.fixture(scope="session")
def dp2_tp2(straight_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("dp2-tp2") / "run"
    done = fsdpspec_run(DP2_TP2, run_dir, "--set",
                        f"checkpoint.resume={checkpoint(straight_run, 5)}")
    assert "mesh dp_shard 2 × tp 2" in done.stdout and "(step 5)" in done.stdout
    return run_dir


def test_tp1_resumes_onto_dp2_tp2_on_four_processes(dp2_tp2: Path,
                                                    straight_run: Path) -> None:
    """The straight run's step-5 checkpoint (FSDP alone, 2 ranks) resharded onto data
    parallel 2 × TP 2 on 4 processes: its 5 steps, 6–10, are the straight run's."""
    assert_trains_alike(dp2_tp2, straight_run, range(6, 11), 1e-5)


def test_dp2_tp2_resumes_exactly_on_four_processes(dp2_tp2: Path, tmp_path: Path) -> None:
    assert_resumes_exactly(DP2_TP2, dp2_tp2, tmp_path / "resumed", 8)


@pytest.fixture(scope="session", params=["tiny-gemma3", "tiny-gpt-neox"])
def tp_family(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """A family's TP 2 job and its run, checkpointed at step 3 for the resumes."""
    job = merged(BASE, merged(TP2, {"model": {"preset": request.param}}))
    run_dir = tmp_path_factory.mktemp(request.param) / "tp2"
    fsdpspec_run(job, run_dir)
    return job, run_dir


def test_family_tp2_trains_and_exports_as_tp1(tp_family: tuple[dict[str, Any], Path],
                                              tmp_path: Path) -> None:
    """TP 2 on 2 processes against the engine alone in one process (the same
    micro-batches in the same order): losses and gradient norms to 1e-5, and the
    exported weights give transformers the same logits."""
    from transformers import AutoModelForCausalLM

    job, tp2_run = tp_family
    tp1_run = tmp_path / "tp1"
    ok(engine_alone(write_spec(tp1_run, merged(job, {
        "resources": {"gpus_per_node": 1}, "parallelism": {"tensor_parallel": 1},
        "checkpoint": {"interval_steps": 0}}))))
    assert_trains_alike(tp2_run, tp1_run, range(1, STEPS + 1), 1e-5)
    ids = torch.arange(64).remainder(257).view(2, 32)
    tp2, tp1 = (AutoModelForCausalLM.from_pretrained(run / "final", dtype=torch.float32)
                for run in (tp2_run, tp1_run))
    with torch.no_grad():
        assert torch.allclose(tp2(ids).logits, tp1(ids).logits, atol=1e-4, rtol=0)


def test_family_tp2_resumes_exactly(tp_family: tuple[dict[str, Any], Path],
                                    tmp_path: Path) -> None:
    job, run_dir = tp_family
    assert_resumes_exactly(job, run_dir, tmp_path / "resumed", MIDDLE)


def test_family_tp2_resumes_onto_tp1(tp_family: tuple[dict[str, Any], Path],
                                     tmp_path: Path) -> None:
    job, run_dir = tp_family
    assert_resumes_onto_tp1(job, run_dir, tmp_path / "tp1")


def test_chat_fine_tune_with_eval_trains_under_tp(tmp_path: Path) -> None:
    """A chat fine-tune of a saved Llama with an evaluation split, TP 2, checkpointed as
    one full state dict; its final weights are written from it."""
    from transformers import AutoTokenizer

    tokenizer = chat_tokenizer(tmp_path / "inputs" / "tokenizer")
    vocab = len(AutoTokenizer.from_pretrained(tokenizer))
    tiny_llama(tmp_path / "inputs" / "model", vocab + vocab % 2, hidden_size=64,
               num_hidden_layers=2)
    chat_parquet(tmp_path / "inputs" / "chats", train=16, test=4)
    job = merged(BASE, merged(chat_job(tmp_path / "inputs", 4, 2), {
        "resources": {"accelerator": "cpu"}, "parallelism": {"tensor_parallel": 2},
        "fsdp": {"state_dict_type": "FULL_STATE_DICT"}}))
    run_dir = tmp_path / "chat"
    fsdpspec_run(job, run_dir, env={"HF_HOME": str(tmp_path / "hf-home")})
    evals = [m for m in metrics(run_dir) if "eval_loss" in m]
    assert [m["step"] for m in evals] == [2, 4]
    assert all(math.isfinite(m["eval_loss"]) for m in evals)
    assert by_step(run_dir)[4]["loss"] < by_step(run_dir)[1]["loss"]
    assert (run_dir / "checkpoints" / "step-00000004" / "full_state_dict.pt").is_file()
    assert (run_dir / "final" / "config.json").is_file()

