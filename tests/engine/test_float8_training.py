"""float8 training for real: `fsdpspec run` on 2 CPU processes (gloo; torch's
`_scaled_mm` has CPU kernels), torchao's Float8Linear, FSDP2 all-gathering in float8.

One 20-step tiny-Llama run checkpoints at step 10; it is resumed once from there and
its step-20 checkpoint exported with `fsdpspec export hf`; a bf16 run of the same job is
the reference. A second family (GPT-NeoX: fused attention, biases) trains 4 steps,
resumes and exports."""

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
def llama(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The float8 run, its resume from step 10, the bf16 reference; run dirs and logs."""
    cwd = tmp_path_factory.mktemp("float8-llama")
    document = job("f8-llama", "tiny-llama", 20, 10)
    first = run(cwd, document)
    resumed = run(cwd, document, "checkpoint.dir=runs/resumed",
                  "checkpoint.resume=runs/f8-llama/checkpoints/step-00000010")
    run(cwd, document, "float8=null", "checkpoint.dir=runs/bf16", "checkpoint.interval_steps=0",
        "checkpoint.final.enabled=false")
    return {"run": cwd / "runs" / "f8-llama", "resumed": cwd / "runs" / "resumed",
            "bf16": cwd / "runs" / "bf16", "log": first, "resumed_log": resumed}


def test_float8_converts_the_planned_linears_and_gathers_in_float8(llama) -> None:
    # 7 projections × 2 layers; lm_head is left in high precision (float8.exclude).
    assert ("float8 tensorwise: 14 Linear modules (all-gathered in float8)"
            in llama["log"]), llama["log"]


def test_float8_loss_falls_and_stays_within_2_percent_of_bf16(llama) -> None:
    f8, bf16 = losses(llama["run"]), losses(llama["bf16"])
    assert sorted(f8) == sorted(bf16) == list(range(1, 21))
    assert f8[20] < f8[1] - 1.0
    worst = max(abs(f8[s] - bf16[s]) / bf16[s] for s in bf16)
    print(f"float8 vs bf16 over 20 steps: max relative loss difference {worst:.4%}")
    assert 0 < worst < 0.02  # 0 would mean float8 never ran


def test_float8_resume_is_bit_identical(llama) -> None:
    assert "resumed from runs/f8-llama/checkpoints/step-00000010 (step 10)" in llama["resumed_log"]
    straight, resumed = losses(llama["run"]), losses(llama["resumed"])
    assert [resumed[s] for s in range(11, 21)] == [straight[s] for s in range(11, 21)]
    a, b = weights(llama["run"] / "final"), weights(llama["resumed"] / "final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_float8_checkpoint_exports_high_precision_weights_transformers_loads(
        llama, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    out = tmp_path / "hf"
    result = run_cli("export", "hf", str(llama["run"]), "--step", "20", "-o", str(out))
    assert result.returncode == 0, result.stderr
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    final = weights(llama["run"] / "final")
    state = model.state_dict()
    # Plain float32 Linear weights, the run's own: no float8 tensor or scale is saved.
    assert set(final) <= set(state)
    assert all(v.dtype == torch.float32 for v in final.values())
    assert all(torch.equal(state[k], final[k]) for k in final)
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.isfinite(model(ids).logits).all()


def test_a_second_family_trains_resumes_and_exports_in_float8(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    document = job("f8-neox", "tiny-gpt-neox", 4, 2)
    log = run(tmp_path, document)
    # query_key_value, dense, dense_h_to_4h, dense_4h_to_h × 2 layers; lm_head excluded.
    assert "float8 tensorwise: 8 Linear modules (all-gathered in float8)" in log, log
    run(tmp_path, document, "checkpoint.dir=runs/resumed",
        "checkpoint.resume=runs/f8-neox/checkpoints/step-00000002")
    straight, resumed = losses(tmp_path / "runs" / "f8-neox"), losses(tmp_path / "runs" / "resumed")
    assert straight[4] < straight[1]
    assert [resumed[s] for s in (3, 4)] == [straight[s] for s in (3, 4)]
    final = weights(tmp_path / "runs" / "f8-neox" / "final")
    again = weights(tmp_path / "runs" / "resumed" / "final")
    assert final.keys() == again.keys() and all(torch.equal(final[k], again[k]) for k in final)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "runs" / "f8-neox" / "final")
    state = model.state_dict()
    assert all(torch.equal(state[k], final[k]) for k in final)
