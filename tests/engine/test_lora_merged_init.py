"""A LoRA run without `model.weights` starts from the seeded initialisation; its merged
export rebuilds that base without adapters. The base must take the same values either
way, so the merged model gives the trained model's logits (in process, no launch: the
engine's own build and merge on a trained-like adapter)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from engine_jobs import BASE, merged  # noqa: E402

from fsdpspec.job.job import resolve  # noqa: E402
from fsdpspec.spec.v1 import JobSpec  # noqa: E402
from fsdpspec_runners.engine.lora import base_key, is_adapter_key  # noqa: E402
from fsdpspec_runners.engine.lora_export import merged_model  # noqa: E402
from fsdpspec_runners.engine.model_build import build_model  # noqa: E402


def _job(tmp_path: Path):
    spec = JobSpec.model_validate(merged(BASE, {
        "resources": {"gpus_per_node": 1}, "train": {"seed": 3},
        "peft": {"r": 4, "alpha": 8, "merged": True, "modules_to_save": ["norm"]}}))
    return resolve(spec, tmp_path, world_size=1)


def test_merged_export_without_weights_gives_the_trained_logits(tmp_path: Path) -> None:
    job = _job(tmp_path)
    trained = build_model(job, on_meta=False, attention="eager").eval()
    noise = torch.Generator().manual_seed(0)
    trainable = {}
    with torch.no_grad():  # as training leaves them: every trainable tensor moved
        for key, param in trained.named_parameters():
            if param.requires_grad:
                param.add_(0.1 * torch.randn(param.shape, generator=noise))
                trainable[key] = param.detach().clone()
    exported = merged_model(trainable, job).state_dict()  # what the export writes
    base_job = job.with_spec(job.spec.model_copy(update={"peft": None}))
    alone = build_model(base_job, on_meta=False, attention="eager").state_dict()
    reloaded = build_model(base_job, on_meta=False, attention="eager").eval()
    reloaded.load_state_dict(exported)
    ids = torch.randint(0, 320, (2, 16), generator=noise)
    with torch.no_grad():
        difference = (reloaded(ids).logits - trained(ids).logits).abs().max().item()
    print(f"merged export vs trained model: max |logit difference| {difference:.2e}")
    assert difference <= 1e-5
    # Tensors that carry no adapter and are not trained are the base's, as the base
    # builds alone from the same seed.
    adapted = {k.split(".lora_")[0] for k in trainable if is_adapter_key(k)}
    saved = {base_key(k) for k in trainable if not is_adapter_key(k)}
    untouched = [k for k in exported if k.removesuffix(".weight") not in adapted
                 and k not in saved]
    different = [k for k in untouched if not torch.equal(exported[k], alone[k])]
    assert untouched and not different
