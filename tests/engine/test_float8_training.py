"""float8 training for real: `fsdpspec run` on 2 CPU processes (gloo; torch's
`_scaled_mm` has CPU kernels), torchao's Float8Linear, FSDP2 all-gathering in float8.

One 20-step tiny-Llama run checkpoints at step 10; it is resumed once from there and
its step-20 checkpoint exported with `fsdpspec export hf`; a bf16 run of the same job is
the reference. A second family (GPT-NeoX: fused attention, biases) trains 4 steps,
resumes and exports. The Llama float8 run is an `fsdpspec run`; its resume, the
reference and GPT-NeoX's run and resume train after it in one launch
(`engine_jobs.torchrun_jobs`: one torchrun and one import of torch and transformers per
process for the four, where a launch of their own cost ~12 CPU-s each)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow


def job(name: str, preset: str, steps: int, interval: int, **float8: Any) -> dict[str, Any]:
    return {
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": name},
        "resources": {"gpus_per_node": 2, "host_memory_gib": 8},
        "model": {"preset": preset}, "fsdp": {"mixed_precision": "bf16"},
        "float8": {"recipe": "tensorwise", **float8},
        "data": {"source": "corpus", "seq_len": 32, "micro_batch_size": 1,
                 "global_batch_size": 4},
        "optimizer": {"lr": 1e-3, "scheduler": {"name": "constant"}},
        "train": {"max_steps": steps}, "logging": {"interval_steps": 1},
        "checkpoint": {"interval_steps": interval, "keep_last": 0,
                       "final": {"dtype": "float32"}},
    }


def run(cwd: Path, document: dict[str, Any], *overrides: str) -> str:
    spec = cwd / f"{document['metadata']['name']}.yaml"
    spec.write_text(json.dumps(document))  # JSON is YAML
    sets = [arg for o in overrides for arg in ("--set", o)]
    result = run_cli("run", str(spec), *sets, cwd=cwd, timeout=300,
                     env={"OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout + result.stderr


def losses(run_dir: Path) -> dict[int, float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {m["step"]: m["loss"] for m in map(json.loads, lines) if "loss" in m}


def weights(directory: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return {k: v for f in sorted(directory.glob("*.safetensors")) for k, v in load_file(f).items()}


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The float8 runs of both families, their resumes (Llama from step 10, GPT-NeoX
    from step 2) and Llama's bf16 reference: run dirs, and each one's log (rank 0's)."""
    from engine_jobs import merged, torchrun_jobs, write_spec

    cwd = tmp_path_factory.mktemp("float8")
    llama, neox = job("f8-llama", "tiny-llama", 20, 10), job("f8-neox", "tiny-gpt-neox", 4, 2)
    found = {"llama-log": run(cwd, llama)}
    runs = cwd / "runs"
    later = {  # in this order: GPT-NeoX resumes the run before it
        "llama-resumed": merged(llama, {"checkpoint": {
            "resume": str(runs / "f8-llama" / "checkpoints" / "step-00000010")}}),
        "bf16": merged(llama, {"float8": None, "checkpoint": {
            "interval_steps": 0, "final": {"enabled": False}}}),
        "neox": neox,
        "neox-resumed": merged(neox, {"checkpoint": {
            "resume": str(runs / "neox" / "checkpoints" / "step-00000002")}}),
    }
    results = torchrun_jobs([write_spec(runs / name, document)
                             for name, document in later.items()])
    for name, result in zip(later, results, strict=True):
        assert result.returncode == 0, (name, result.stdout[-2000:] + result.stderr[-2000:])
        found[f"{name}-log"] = result.stdout
    return {**found, "llama": runs / "f8-llama", **{name: runs / name for name in later}}


def test_float8_converts_the_planned_linears_and_gathers_in_float8(runs) -> None:
    # 7 projections × 2 layers; lm_head is left in high precision (float8.exclude).
    assert ("float8 tensorwise: 14 Linear modules (all-gathered in float8)"
            in runs["llama-log"]), runs["llama-log"]


def test_float8_loss_falls_and_stays_within_2_percent_of_bf16(runs) -> None:
    f8, bf16 = losses(runs["llama"]), losses(runs["bf16"])
    assert sorted(f8) == sorted(bf16) == list(range(1, 21))
    assert f8[20] < f8[1] - 1.0
    worst = max(abs(f8[s] - bf16[s]) / bf16[s] for s in bf16)
    print(f"float8 vs bf16 over 20 steps: max relative loss difference {worst:.4%}")
    assert 0 < worst < 0.02  # 0 would mean float8 never ran


def test_float8_resume_is_bit_identical(runs) -> None:
    assert "f8-llama/checkpoints/step-00000010 (step 10)" in runs["llama-resumed-log"]
    straight, resumed = losses(runs["llama"]), losses(runs["llama-resumed"])
    assert [resumed[s] for s in range(11, 21)] == [straight[s] for s in range(11, 21)]
    a, b = weights(runs["llama"] / "final"), weights(runs["llama-resumed"] / "final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_float8_checkpoint_exports_high_precision_weights_transformers_loads(
        runs, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    out = tmp_path / "hf"
    result = run_cli("export", "hf", str(runs["llama"]), "--step", "20", "-o", str(out))
    assert result.returncode == 0, result.stderr
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    final = weights(runs["llama"] / "final")
    state = model.state_dict()
    # Plain float32 Linear weights, the run's own: no float8 tensor or scale is saved.
    assert set(final) <= set(state)
    assert all(v.dtype == torch.float32 for v in final.values())
    assert all(torch.equal(state[k], final[k]) for k in final)
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.isfinite(model(ids).logits).all()


def test_a_second_family_trains_resumes_and_exports_in_float8(runs) -> None:
    from transformers import AutoModelForCausalLM

    # query_key_value, dense, dense_h_to_4h, dense_4h_to_h × 2 layers; lm_head excluded.
    assert "float8 tensorwise: 8 Linear modules (all-gathered in float8)" in runs["neox-log"]
    straight, resumed = losses(runs["neox"]), losses(runs["neox-resumed"])
    assert straight[4] < straight[1]
    assert [resumed[s] for s in (3, 4)] == [straight[s] for s in (3, 4)]
    final, again = weights(runs["neox"] / "final"), weights(runs["neox-resumed"] / "final")
    assert final.keys() == again.keys() and all(torch.equal(final[k], again[k]) for k in final)
    model = AutoModelForCausalLM.from_pretrained(runs["neox"] / "final")
    state = model.state_dict()
    assert all(torch.equal(state[k], final[k]) for k in final)
