"""TRL is the referee of the DPO objective: on one process, with the same tiny Llama, the
same preference records in the same order, batch, seed and hyper-parameters, the
engine's losses and TRL's reward metrics equal `trl.DPOTrainer`'s (the reference: a
frozen copy of the model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_jobs import metrics, ok, torchrun, write_spec
from preference_assets import preference_jsonl

from fsdpspec.spec.v1 import JobSpec

pytestmark = pytest.mark.slow
trl = pytest.importorskip("trl")

METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
           "logps/chosen", "logps/rejected")
PAIRS, BATCH, STEPS, SEQ = 40, 4, 10, 32
HYPER = {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0,
         "grad_clip_norm": 1.0, "beta": 0.1, "seed": 0}


def _job(inputs: Path) -> dict:
    return {
        "resources": {"gpus_per_node": 1},
        "model": {"preset": None, "hf_config": str(inputs / "model"),
                  "weights": str(inputs / "model")},
        "data": {"source": "dataset", "path": str(inputs / "pairs.jsonl"),
                 "format": "preference", "tokenizer": str(inputs / "tokenizer"),
                 "seq_len": SEQ, "micro_batch_size": BATCH, "global_batch_size": BATCH},
        "optimizer": {"lr": HYPER["lr"], "betas": HYPER["betas"], "eps": HYPER["eps"],
                      "weight_decay": HYPER["weight_decay"],
                      "grad_clip_norm": HYPER["grad_clip_norm"],
                      "scheduler": {"name": "constant"}},
        "train": {"max_steps": STEPS, "seed": HYPER["seed"], "objective": "dpo",
                  "dpo": {"beta": HYPER["beta"], "reference": "model"}},
        "checkpoint": {"interval_steps": 0, "final": {"enabled": False}},
    }


def _engine_order(job: dict, count: int) -> list[int]:
    """The record each of the engine's first sequences is, by the engine's own order."""
    import torch
    from engine_jobs import BASE, merged

    from fsdpspec_runners.engine.data import SequenceSource

    data = JobSpec.model_validate(merged(BASE, job)).data
    rows = {"input_ids": torch.arange(count).unsqueeze(1)}
    source = SequenceSource(data, None, HYPER["seed"], packed=rows)
    return [int(source.sequence(i)["input_ids"][0]) for i in range(STEPS * BATCH)]


def _trl_steps(inputs: Path, order: list[int], out: Path) -> list[dict[str, float]]:
    """TRL's loss and metrics at each of its steps, read where it computes them (its logs
    round the loss)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    records = Dataset.from_json(str(inputs / "pairs.jsonl")).select(order)
    steps: list[dict[str, float]] = []

    class Recorded(DPOTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            steps.append({"loss": loss.item(),
                          **{k: self._metrics["train"][k][-1] for k in METRICS}})
            return loss

    def model():
        return AutoModelForCausalLM.from_pretrained(inputs / "model", dtype=torch.float32)

    args = DPOConfig(
        output_dir=str(out), per_device_train_batch_size=BATCH, max_steps=STEPS,
        learning_rate=HYPER["lr"], lr_scheduler_type="constant", warmup_steps=0,
        adam_beta1=HYPER["betas"][0], adam_beta2=HYPER["betas"][1],
        adam_epsilon=HYPER["eps"], weight_decay=HYPER["weight_decay"],
        max_grad_norm=HYPER["grad_clip_norm"], beta=HYPER["beta"], loss_type=["sigmoid"],
        max_length=SEQ, seed=HYPER["seed"], train_sampling_strategy="sequential",
        logging_steps=1, save_strategy="no", report_to="none", use_cpu=True,
        bf16=False,  # TRL's default autocasts to bf16; the engine's job computes in fp32
        dataset_num_proc=None, disable_tqdm=True,
    )
    tokenizer = AutoTokenizer.from_pretrained(inputs / "tokenizer")
    Recorded(model=model(), ref_model=model(), args=args, train_dataset=records,
             processing_class=tokenizer).train()
    return steps


def test_losses_and_reward_metrics_equal_trl(tmp_path: Path) -> None:
    from chat_assets import chat_tokenizer, tiny_llama
    from transformers import AutoTokenizer

    inputs = tmp_path / "inputs"
    tokenizer = chat_tokenizer(inputs / "tokenizer")
    tiny_llama(inputs / "model", len(AutoTokenizer.from_pretrained(tokenizer)))
    preference_jsonl(inputs / "pairs.jsonl", PAIRS)
    job = _job(inputs)
    ok(torchrun(write_spec(tmp_path / "run", job), nproc=1))
    ours = [m for m in metrics(tmp_path / "run") if "loss" in m]
    theirs = _trl_steps(inputs, _engine_order(job, PAIRS), tmp_path / "trl")

    assert len(ours) == len(theirs) == STEPS
    for name in ("loss", *METRICS):  # the first step: equal to 1e-5
        assert ours[0][name] == pytest.approx(theirs[0][name], abs=1e-5), name
    assert ours[0]["logps/chosen"] != ours[0]["logps/rejected"]  # not a trivial equality
    for step, (mine, trl_step) in enumerate(zip(ours, theirs, strict=True), start=1):
        assert mine["loss"] == pytest.approx(trl_step["loss"], abs=1e-4), step
        for name in METRICS:
            assert mine[name] == pytest.approx(trl_step[name], abs=1e-4), (step, name)
    assert ours[-1]["loss"] < ours[0]["loss"] - 0.1  # it learned: the steps differ
