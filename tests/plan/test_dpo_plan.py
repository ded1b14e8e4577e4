"""The plan of a DPO job: each pair is two sequences through the policy, and the reference
costs what its choice holds: a frozen copy's shards in the compute dtype (`model`), no
weights (`adapter`: the base with the adapters off; `precomputed`: log-probs read with
the data), and one more forward per micro-batch for the first two. The plan against the
trace is benchmarks/plan_accuracy.py --dpo (tests/plan/test_recorded_traces.py)."""

from __future__ import annotations

import json

from conftest import ROOT, run_cli
from fsdpspec.job.job import resolve
from fsdpspec.plan.memory import device_memory
from fsdpspec.plan.suggest import apply_override
from fsdpspec.validate import check_file

EXAMPLE = "examples/dpo-llama3-8b-h100.yaml"
LLAMA3_8B = 8_030_261_248  # parameters; every tensor's dim 0 divides by 8 (no padding)
CHOICES = {
    "model": ("--set", "train.dpo.reference=model"),
    "adapter": ("--set", "peft.method=lora", "--set", "train.dpo.reference=adapter"),
    "precomputed": ("--set", "train.dpo.reference=precomputed"),
}


def _plan(*sets: str) -> dict:
    done = run_cli("plan", EXAMPLE, *sets, "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_llama3_8b_dpo_plans_the_three_references_side_by_side() -> None:
    """Issue 46's case: Llama-3-8B DPO on 8 × H100-80GB, sequence 4096, micro-batch 1,
    bf16, full checkpointing, planned with `--set` per reference choice."""
    plans = {choice: _plan(*sets) for choice, sets in CHOICES.items()}
    peaks = {c: p["memory"]["device"]["peak_allocated_bytes"] for c, p in plans.items()}
    print("peak allocated per rank, GiB: "
          + ", ".join(f"{c} {v / (1 << 30):.2f}" for c, v in peaks.items()))
    model, precomputed = plans["model"], plans["precomputed"]
    # The frozen copy: 8.03B parameters over 8 ranks in bf16, nothing else.
    reference = model["memory"]["device"]["terms"]["reference_parameters"]
    assert reference == 2 * LLAMA3_8B // 8
    assert model["memory"]["device"]["peak_phase"] == \
        precomputed["memory"]["device"]["peak_phase"] == "backward: loss"
    assert peaks["model"] - peaks["precomputed"] == reference
    # The adapter holds no second copy: its peak is the LoRA job's with precomputed
    # log-probs (the reference forward's moment peaks lower than the policy's).
    adapter = plans["adapter"]
    assert adapter["memory"]["device"]["terms"]["reference_parameters"] == 0
    lora = adapter["dpo"]["by_reference"]
    assert lora["adapter"]["peak_allocated_bytes"] == peaks["adapter"] == \
        lora["precomputed"]["peak_allocated_bytes"]
    # Side by side in one plan: each choice's line agrees with its own plan.
    for choice in ("model", "precomputed"):
        side = model["dpo"]["by_reference"][choice]
        assert side["peak_allocated_bytes"] == peaks[choice]
        assert side["total_bytes"] == plans[choice]["memory"]["device"]["total_bytes"]
    # The reference forward: one forward more of the 5 a checkpointed step runs.
    assert model["compute"]["flops_per_step"] == 1.25 * precomputed["compute"]["flops_per_step"]
    assert model["step_time"]["seconds"] > precomputed["step_time"]["seconds"]
    # DPO is not trained under tensor parallelism (FS563): not offered as a lever.
    assert model["min_gpus_tensor_parallel"] is None
    assert not [s for p in plans.values() for s in p["suggestions"]
                if "tensor_parallel" in s["override"]]
    offered = {s["override"]: s for s in model["suggestions"]}
    assert offered["train.dpo.reference=precomputed"]["saves_bytes"] > reference


def test_the_text_plan_shows_each_reference_it_can_take() -> None:
    done = run_cli("plan", EXAMPLE, *CHOICES["adapter"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("DPO: each pair runs as 2 sequences (chosen, rejected); by reference, peak "
            "allocated / device total per rank (GiB): model 19.89 / 21.89, adapter (this job) "
            "18.02 / 19.92, precomputed 18.02 / 19.92") in done.stdout
    assert "FS565" not in done.stdout  # the plan leaves nothing out any more


def test_a_pair_is_planned_as_two_sequences() -> None:
    """With precomputed log-probs a DPO micro-batch of one pair holds what a supervised
    micro-batch of two sequences does, moment by moment."""
    job = resolve(check_file(ROOT / EXAMPLE).spec, ROOT / "examples")
    dpo = job.with_spec(apply_override(job.spec, "train.dpo.reference=precomputed"))
    sft = job.with_spec(apply_override(apply_override(job.spec, "train.objective=sft"),
                                       "data.micro_batch_size=2"))
    assert dpo.batch.tokens == sft.batch.tokens == 2 * 4096
    planned = {p.name: p.total for p in device_memory(dpo).points}
    assert planned == {p.name: p.total for p in device_memory(sft).points}



def test_the_precompute_pass_is_planned_at_the_step_s_rate() -> None:
    """`precomputed` costs a forward of every pair before step 1: with full checkpointing a
    step computes each of its pairs four forwards' worth (forward, recompute, backward's
    two), so a pair's pass is a quarter of the step's compute per pair. The other
    references have no pass."""
    plan = _plan(*CHOICES["precomputed"])
    pairs_per_step = 64  # the example's global batch
    per_pair = plan["dpo"]["precompute_seconds_per_pair"]
    assert abs(per_pair - plan["step_time"]["compute_seconds"] / pairs_per_step / 4) \
        < 1e-9 * per_pair
    assert _plan(*CHOICES["model"])["dpo"]["precompute_seconds_per_pair"] is None
    done = run_cli("plan", EXAMPLE, *CHOICES["precomputed"])
    assert (f"precompute pass (before step 1, once; a resume reads it back): "
            f"{1000 * per_pair:.2f} s per 1,000 pairs, {1000 * 64 * per_pair / 60:.1f} min for "
            "the 64,000 pairs train.max_steps × global batch reads; it reads every pair of "
            "the train and eval data") in done.stdout
