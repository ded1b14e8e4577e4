"""Fine-tuning end to end on 2 CPU processes: a tiny Llama saved with save_pretrained, a
tokenizer with a chat template and a parquet chat dataset with a test split, all built
here. One straight run answers the eval, masking, export and generation questions; a
second run, stopped and resumed, answers the resume question. The straight run and the
resume train in one launch (engine_jobs.torchrun_jobs: one import of torch and
transformers per process for both); the stopped run needs a launch of its own (its
stop is the launch's environment)."""

from __future__ import annotations

import json
import math
import random
import stat
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("datasets")

from chat_assets import (  # noqa: E402
    ANSWER,
    QUESTION,
    chat_parquet,
    chat_tokenizer,
    conversation,
    tiny_llama,
)
from engine_jobs import (  # noqa: E402
    chat_job,
    merged,
    metrics,
    ok,
    torchrun,
    torchrun_jobs,
    write_spec,
)

from conftest import run_cli  # noqa: E402

pytestmark = pytest.mark.slow

STEPS = 30


def _job(inputs: Path) -> dict[str, Any]:
    return merged(chat_job(inputs, STEPS, 15), {"checkpoint": {"final": {"max_shard_mb": 1}}})


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("inputs")
    tokenizer = chat_tokenizer(root / "tokenizer")
    from transformers import AutoTokenizer

    tiny_llama(root / "model", len(AutoTokenizer.from_pretrained(tokenizer)))
    chat_parquet(root / "chats")
    return root


def _env(root: Path) -> dict[str, str]:
    return {"HF_DATASETS_CACHE": str(root / "datasets-cache")}  # datasets' cache stays here


@pytest.fixture(scope="module")
def runs(inputs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The straight run, and the same job stopped at step 15 then resumed: run
    directories, the stopped and resumed runs' outputs, and the token cache's mtime
    after the stop."""
    straight, stopped = tmp_path_factory.mktemp("straight"), tmp_path_factory.mktemp("stopped")
    spec = write_spec(stopped, _job(inputs))
    first = ok(torchrun(spec, env={**_env(inputs), "FSDPSPEC_TEST_SIGNAL_AT_STEP": "15"}))
    [cache] = (stopped / "data-cache").glob("*.pt")
    written = cache.stat().st_mtime_ns
    straight_result, second = torchrun_jobs([write_spec(straight, _job(inputs)), spec],
                                            env=_env(inputs))
    ok(straight_result)
    ok(second)
    return {"straight": straight, "stopped": stopped, "first": first.stdout,
            "second": second.stdout, "cache": cache, "written": written}


@pytest.fixture(scope="module")
def straight(runs: dict[str, Any]) -> Path:
    return runs["straight"]


def _train_losses(run_dir: Path) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in metrics(run_dir) if "loss" in m}


def _eval_losses(run_dir: Path) -> dict[int, float]:
    return {m["step"]: m["eval_loss"] for m in metrics(run_dir) if "eval_loss" in m}


def test_eval_loss_is_logged_and_falls(straight: Path) -> None:
    evals = {m["step"]: m for m in metrics(straight) if "eval_loss" in m}
    assert sorted(evals) == [15, 30]  # every 15 steps; the end coincides with the interval
    for record in evals.values():
        assert math.isclose(record["eval_perplexity"], math.exp(record["eval_loss"]))
    print(f"eval loss {evals[15]['eval_loss']:.4f} -> {evals[30]['eval_loss']:.4f}")
    assert evals[30]["eval_loss"] < evals[15]["eval_loss"]


def test_tokens_are_cached_once_in_the_run_dir(straight: Path) -> None:
    cached = list((straight / "data-cache").glob("*.pt"))
    assert len(cached) == 1
    cache = torch.load(cached[0], weights_only=True)
    # The packed splits, and what packing had to say (nothing here: every chat fits).
    assert set(cache) == {"train", "eval", "notes"} and cache["notes"] == []


def _token_losses(model_dir: Path, tokenizer_dir: Path) -> tuple[float, float]:
    """Mean loss of the assistant turn's tokens and of the user question's tokens, over a
    few conversations the model was not trained on."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    question = set(tokenizer.convert_tokens_to_ids(QUESTION.split()))
    answer_start = tokenizer.convert_tokens_to_ids("<|assistant|>")
    found: dict[str, list[float]] = {"answer": [], "question": []}
    for seed in range(100, 104):
        text = tokenizer.apply_chat_template(conversation(random.Random(seed)), tokenize=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1]
        losses = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]),
                                                   reduction="none").tolist()
        # losses[k] predicts ids[k + 1]: from <|assistant|> on, the answer and its </s>.
        found["answer"] += losses[ids.index(answer_start):]
        found["question"] += [loss for loss, t in zip(losses, ids[1:], strict=True)
                               if t in question]
    assert len(found["answer"]) == 4 * (len(ANSWER.split()) + 1)
    return (sum(found["answer"]) / len(found["answer"]),
            sum(found["question"]) / len(found["question"]))


def test_only_assistant_tokens_are_learnt(straight: Path, inputs: Path) -> None:
    """The assistant turn is a fixed string and so is the user's question: both are
    learnable, but only the assistant's tokens carry loss."""
    before = _token_losses(inputs / "model", inputs / "tokenizer")
    after = _token_losses(straight / "final", straight / "final")
    print(f"assistant tokens {before[0]:.3f} -> {after[0]:.3f} nats; "
          f"question tokens {before[1]:.3f} -> {after[1]:.3f} nats")
    assert after[0] < 0.05
    assert after[1] > 0.9 * before[1]


def test_final_is_a_complete_sharded_hf_directory(straight: Path) -> None:
    final = straight / "final"
    names = {p.name for p in final.iterdir()}
    assert {"config.json", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "model.safetensors.index.json"} <= names
    shards = sorted(n for n in names if n.startswith("model-"))
    assert len(shards) >= 2 and shards[-1].endswith(f"-of-{len(shards):05d}.safetensors")
    index = json.loads((final / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in final.iterdir())


def test_mid_run_checkpoint_exports_loads_and_generates(straight: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "step-15-hf"
    result = run_cli("export", "hf", str(straight), "--step", "15", "-o", str(out))
    assert result.returncode == 0, result.stderr
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    prompt = conversation(random.Random(7))[:2]
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True)["input_ids"]
    generated = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert generated.shape == (1, ids.shape[1] + 4)
    # The step-15 weights, not the final ones: the two exports differ.
    final = AutoModelForCausalLM.from_pretrained(straight / "final")
    assert not torch.equal(model.lm_head.weight, final.lm_head.weight)
    missing = run_cli("export", "hf", str(straight), "--step", "7", "-o", str(tmp_path / "x"))
    assert missing.returncode == 1 and "step-00000015, step-00000030" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_resume_is_bit_identical(runs: dict[str, Any]) -> None:
    """Stopped at step 15 and resumed: the same train and eval losses and final weights."""
    from safetensors.torch import load_file

    straight, resumed = runs["straight"], runs["stopped"]
    assert "stopped by SIGTERM at step 15" in runs["first"]
    assert "(step 15)" in runs["second"]
    # the resumed run read the tokens back
    assert runs["cache"].stat().st_mtime_ns == runs["written"]
    assert _train_losses(resumed) == _train_losses(straight)
    assert _eval_losses(resumed)[30] == _eval_losses(straight)[30]
    for shard in sorted((straight / "final").glob("model-*.safetensors")):
        a, b = load_file(str(shard)), load_file(str(resumed / "final" / shard.name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
