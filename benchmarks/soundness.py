"""Soundness: every spec that `fsdpspec validate` passes trains.

    python benchmarks/soundness.py [--samples 200] [--seed 0] [--first 0] [--keep DIR]

Samples specs over every option that changes what the engine does (FSDP version,
sharding strategy and shard group, wrap policy and min_num_params, mixed precision,
CPU offload, activation checkpointing (op-level included), activation offload, state
dict type, prefetch, optimizer, its state precision and scheduler, data source and
tokenizer, accumulation, loss chunks, compile, the tensor-parallel degree (2 on 2
processes, or data-parallel 2 × TP 2 on 4), and LoRA: method, rank, alpha, dropout,
targets (names, path suffixes, all-linear, a Mixture of Experts' expert names),
modules_to_save (lm_head, a projection, `norm`, each family's embedding name), merged
export, on another family's tiny preset or a model directory with weights) on the tiny
presets with 2 CPU processes. Each spec is validated; each one without errors is run with `fsdpspec
run` for 2 of its 3 steps (checkpointing at step 2), then run again, which resumes, trains
step 3 and exports final/. Prints how many were refused (by code), how many ran and how
many validated but failed (target: 0). ``--first K`` skips the first K samples of the
seed's sequence, so a long run can be split into pieces that add up to the same samples.

``--wide`` (issue 20) widens the space: every tiny preset and a local `save_pretrained`
model directory with weights; 1 to 3 processes; `data.source: dataset` in every format
(text, prompt_completion, chat with a chat tokenizer built here) and file layout (one
jsonl file, a directory of split files, a parquet directory, a cached Hub dataset id),
with packing, streaming and every kind of eval set. Each sample that trains is also
exported with `fsdpspec export hf`, loaded with transformers, and drawn with `fsdpspec
report`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdpspec.validate import check_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

STRATEGIES = ["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"]
DTYPES = ["float32", "bfloat16", "float16"]
MIN_NUM_PARAMS = [0, 1, 1_000, 20_000, 100_000, 1_000_000_000]
WORDS = [f"w{i}" for i in range(150)]  # the small tokenizer's words; the text is made of them
STEPS = 3
# A compiled run on a loaded 2-core machine took over 300 s.
RUN_TIMEOUT_S = 900


@dataclass(frozen=True)
class Assets:
    """Local inputs the sampled specs point at."""

    text: Path
    jsonl: Path
    tokenizer: Path  # vocabulary smaller than the tiny presets' 320
    big_tokenizer: Path  # vocabulary larger than the model's: validate must refuse it
    model: Path  # save_pretrained of a tiny Llama with the presets' vocabulary
    wide: WideAssets | None = None


@dataclass(frozen=True)
class WideAssets:
    """What --wide adds: a chat tokenizer, datasets in each layout."""

    chat_tokenizer: Path
    chats: Path  # train.parquet + test.parquet of chat records
    pairs: Path  # one jsonl file of prompt/completion records
    docs: Path  # train.jsonl + test.jsonl of text records
    hf_home: Path  # a Hugging Face cache holding the chats as Hub dataset acme/chats


def make_assets(root: Path, wide: bool = False) -> Assets:
    """Write a text file, a jsonl file, two word-level tokenizers and a model directory
    under ``root`` (and with ``wide`` the WideAssets)."""
    from chat_assets import tiny_llama

    rng = random.Random(0)
    docs = [" ".join(rng.choice(WORDS) for _ in range(60)) for _ in range(40)]
    (root / "text").mkdir(parents=True)
    (root / "text" / "docs.txt").write_text("\n\n".join(docs), encoding="utf-8")
    jsonl = root / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    extra = make_wide_assets(root, docs) if wide else None
    return Assets(root / "text", jsonl, _tokenizer(root / "tok-small", 0),
                  _tokenizer(root / "tok-big", 250), tiny_llama(root / "model", 320), extra)


HUB_DATASET = "acme/chats"


def make_wide_assets(root: Path, docs: list[str]) -> WideAssets:
    import shutil

    from chat_assets import chat_parquet, chat_tokenizer

    tokenizer = chat_tokenizer(root / "tok-chat")
    chats = chat_parquet(root / "chats")
    pairs = root / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": d[:40], "completion": d[40:120]}) + "\n"
                             for d in docs), encoding="utf-8")
    (root / "docs").mkdir()
    for split, part in (("train", docs[:32]), ("test", docs[32:])):
        (root / "docs" / f"{split}.jsonl").write_text(
            "".join(json.dumps({"text": d}) + "\n" for d in part), encoding="utf-8")
    repo = root / "hf" / "hub" / f"datasets--{HUB_DATASET.replace('/', '--')}"
    commit = "0" * 40
    shutil.copytree(chats, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return WideAssets(tokenizer, chats, pairs, root / "docs", root / "hf")


def _tokenizer(directory: Path, extra_words: int) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "</s>", *WORDS, *(f"x{i}" for i in range(extra_words))]
    word_level = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, "<unk>"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=word_level, eos_token="</s>",
                                   unk_token="<unk>")
    fast.save_pretrained(directory)
    return directory


def _precision(rng: random.Random) -> str | dict[str, str]:
    if rng.random() < 0.5:
        return rng.choice(["bf16", "fp16", "fp32"])
    return {key: rng.choice(DTYPES) for key in ("param_dtype", "reduce_dtype", "buffer_dtype")}


def _fsdp(rng: random.Random) -> dict[str, Any]:
    fsdp: dict[str, Any] = {
        "version": rng.choice([1, 2]),
        "sharding_strategy": rng.choice(STRATEGIES),
        "auto_wrap_policy": rng.choice(["transformer", "size", "none"]),
        "mixed_precision": _precision(rng),
        "cpu_offload": rng.random() < 0.3,
        "activation_checkpointing": rng.choice(["none", "full", "selective", "op"]),
        # On accelerator cpu validate must refuse it (FS230).
        "activation_offload": rng.random() < 0.05,
        "state_dict_type": rng.choice(["SHARDED_STATE_DICT", "FULL_STATE_DICT"]),
        "backward_prefetch": rng.choice(["BACKWARD_PRE", "BACKWARD_POST", "NONE"]),
        "forward_prefetch": rng.random() < 0.3,
    }
    if fsdp["sharding_strategy"].startswith("HYBRID"):
        fsdp["shard_group_size"] = rng.choice([None, 1, 2])
    if fsdp["auto_wrap_policy"] == "size":
        fsdp["min_num_params"] = rng.choice(MIN_NUM_PARAMS)
    if fsdp["activation_checkpointing"] == "selective":
        fsdp["ac_every"] = rng.choice([1, 2, 3])
    if fsdp["version"] == 1:
        fsdp["limit_all_gathers"] = rng.choice([None, True, False])
        fsdp["use_orig_params"] = rng.choice([None, True, False])
        fsdp["sync_module_states"] = rng.random() < 0.7
        fsdp["cpu_ram_efficient_loading"] = rng.random() < 0.7
    return {k: v for k, v in fsdp.items() if v is not None}


def _data(rng: random.Random, assets: Assets, processes: int = 2) -> dict[str, Any]:
    wide = assets.wide
    if wide is not None and rng.random() < 0.6:
        data = _dataset(rng, wide)
        micro = rng.choice([1, 2])
        data.update({"seq_len": rng.choice([16, 32, 64]), "micro_batch_size": micro,
                     "global_batch_size": micro * processes * rng.choice([1, 2])})
        return data
    source = rng.choice(["corpus", "text", "jsonl", "synthetic"])
    micro = rng.choice([1, 2])
    # Accumulation of 1 or 2 steps; now and then a batch the ranks cannot split.
    global_batch = micro * processes * rng.choice([1, 2]) if rng.random() < 0.95 else 3
    data: dict[str, Any] = {"source": source, "seq_len": rng.choice([16, 32]),
                            "micro_batch_size": micro, "global_batch_size": global_batch}
    if source in ("text", "jsonl"):
        data["path"] = str(assets.text if source == "text" else assets.jsonl)
    if source != "synthetic":
        choice = rng.choice([None, assets.tokenizer, assets.big_tokenizer])
        if choice is not None:
            data["tokenizer"] = str(choice)
    return data


def _dataset(rng: random.Random, wide: WideAssets) -> dict[str, Any]:
    """A `data.source: dataset` section: a format, a layout, packing, streaming, eval."""
    fmt = rng.choice(["text", "prompt_completion", "chat"])
    data: dict[str, Any] = {"source": "dataset", "format": fmt,
                            "packing": rng.random() < 0.6, "streaming": rng.random() < 0.2}
    if fmt == "chat":
        data["path"] = rng.choice([str(wide.chats), HUB_DATASET])
        data["tokenizer"] = str(wide.chat_tokenizer)
        evals = [None, {"split": "test"}, {"fraction": 0.1}, {"split": "validation"}]
    elif fmt == "prompt_completion":
        data["path"] = str(wide.pairs)
        data["tokenizer"] = rng.choice([str(wide.chat_tokenizer), None])
        evals = [None, {"fraction": 0.1}, {"path": str(wide.pairs)}]
    else:
        data["path"] = rng.choice([str(wide.docs), str(wide.docs / "train.jsonl")])
        evals = [None, {"split": "test"}, {"path": str(wide.docs / "test.jsonl")}]
    evaluation = rng.choice(evals)
    if evaluation is not None:
        data["eval"] = evaluation
    if data.get("tokenizer") is None:
        data.pop("tokenizer", None)
    return data


def _optimizer(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(["adamw", "sgd"])
    return {
        "name": name,
        "lr": 1e-3 if name == "adamw" else 1e-2,
        "grad_clip_norm": rng.choice([None, 1.0]),
        # AdamW's moments; with SGD validate must refuse anything but float32 (FS550).
        "state_dtype": rng.choice(["float32", "float32", "bfloat16", "int8"]),
        "scheduler": {"name": rng.choice(["constant", "linear", "cosine"]),
                      "warmup_steps": rng.choice([0, 1])},
    }


def _wide_model(rng: random.Random, assets: Assets) -> dict[str, Any]:
    from fsdpspec.catalog.presets import preset_names

    if rng.random() < 0.2:
        model: dict[str, Any] = {"hf_config": str(assets.model), "weights": str(assets.model)}
    else:
        model = {"preset": rng.choice([p for p in preset_names() if p.startswith("tiny-")])}
    attention = rng.choice([None, "sdpa", "eager"])
    return model if attention is None else {**model, "attention": attention}


TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
           "lm_head", "query_key_value", "dense", "self_attn.q_proj", "mlp.down_proj",
           "attention.query_key_value", "self_attn.o_proj"]
# Target lists as users write them (issue 33): the family's default, peft's all-linear,
# a Mixture of Experts' expert names (peft adapts the stacked experts: FS146), and a
# sample of names and path suffixes.
TARGET_LISTS = [["all-linear"], ["gate_proj", "up_proj", "down_proj"], ["w1", "w2", "w3"],
                ["q_proj", "gate"]]
# Modules trained in full: the head, a projection peft copies in every layer, `norm`
# (every module whose name ends in it), each family's embedding name, pairs.
SAVES = [["lm_head"], ["o_proj"], ["norm"], ["input_layernorm"], ["embed_tokens"],
         ["embed_in"], ["lm_head", "embed_tokens"], ["dense"], ["down_proj"]]
# The families a LoRA sample may switch to: dense, GPT-NeoX's names, Mixtures of Experts
# (with and without the experts peft converts), Gemma 3 (eager attention by default).
PEFT_PRESETS = ["tiny-llama", "tiny-qwen2", "tiny-gpt-neox", "tiny-gemma3", "tiny-olmo2",
                "tiny-starcoder2", "tiny-mixtral", "tiny-qwen3-moe", "tiny-olmoe",
                "tiny-phimoe"]


def _peft(index: int, seed: int) -> dict[str, Any] | None:
    """Half the samples fine-tune with LoRA (sometimes asking for QLoRA, which validate
    refuses on the tiny presets: their projections are narrower than NF4's sharded
    blocks, FS315). Drawn from a stream of their own, so the other options of a sample are
    those it had before the peft options were sampled."""
    rng = random.Random(f"peft-{seed}-{index}")
    if rng.random() < 0.5:
        return None
    peft: dict[str, Any] = {
        "method": "qlora" if rng.random() < 0.1 else "lora",
        "r": rng.choice([1, 4, 8, 16]),
        "alpha": rng.choice([1.0, 8.0, 16.0]),
        "dropout": rng.choice([0.0, 0.1]),
        "merged": rng.random() < 0.5,
    }
    targets = rng.random()
    if targets < 0.15:
        peft["target_modules"] = rng.choice(TARGET_LISTS)
    elif targets < 0.6:
        peft["target_modules"] = rng.sample(TARGETS, rng.randint(1, 3))
    if rng.random() < 0.35:
        peft["modules_to_save"] = rng.choice(SAVES)
    return peft


def _peft_model(index: int, seed: int, assets: Assets) -> dict[str, Any] | None:
    """The model a LoRA sample trains instead of the sampled one, or None: now and then
    another family's tiny preset (attention left to its `auto` default), or the local
    model directory with weights (a merged export then starts from given weights)."""
    rng = random.Random(f"peft-model-{seed}-{index}")
    draw = rng.random()
    if draw < 0.35:
        return {"preset": rng.choice(PEFT_PRESETS)}
    if draw < 0.5:
        return {"hf_config": str(assets.model), "weights": str(assets.model)}
    return None


def _tensor_parallel(index: int, seed: int) -> tuple[int, int] | None:
    """Half the samples split their layers over 2 ranks: (degree, processes), on 2
    processes (FSDP over 1 data-parallel rank) or now and then 4 (over 2). Drawn from a
    stream of their own, as `_peft`. Under TP, LoRA and the chunked loss are refused
    (FS180, FS183), and so are FSDP1 and NO_SHARD (FS178, FS179): such a sample keeps
    them one time in ten, to check the refusals; else it runs FSDP2, sharded."""
    rng = random.Random(f"tp-{seed}-{index}")
    if rng.random() < 0.5:
        return None
    return 2, 4 if rng.random() < 0.25 else 2


def sample_spec(rng: random.Random, index: int, assets: Assets, seed: int = 0) -> dict[str, Any]:
    """One spec document: the sampled options on a tiny preset, 2 CPU processes (with
    --wide: any tiny preset or the model directory, 1 to 3 processes)."""
    fsdp = _fsdp(rng)
    precision = fsdp["mixed_precision"]
    computes_fp16 = precision == "fp16" or (
        isinstance(precision, dict) and precision["param_dtype"] == "float16")
    processes, model = 2, {"preset": rng.choice(["tiny-llama", "tiny-qwen2"]),
                           "attention": rng.choice(["sdpa", "eager"])}
    if assets.wide is not None:
        processes = rng.choice([1, 2, 3])
        model = _wide_model(rng, assets)
    document = {
        "apiVersion": "fsdpspec/v1",
        "kind": "TrainingJob",
        "metadata": {"name": f"sound-{index}"},
        "resources": {"gpus_per_node": processes, "accelerator": "cpu"},
        "model": model,
        "fsdp": fsdp,
        "data": _data(rng, assets, processes),
        "optimizer": _optimizer(rng),
        "train": {"max_steps": STEPS, "seed": index, "compile": rng.random() < 0.1,
                  "loss_chunks": rng.choice([1, 1, 3, 4]),
                  **({"loss_scaling": rng.choice(["dynamic", "none"])} if computes_fp16 else {})},
        "checkpoint": {"interval_steps": 2, "keep_last": 2,
                       "final": {"dtype": rng.choice(DTYPES)}},
        "logging": {"interval_steps": 1},
    }
    if (peft := _peft(index, seed)) is not None:
        document["peft"] = peft
        document["model"] = _peft_model(index, seed, assets) or model
    if (split := _tensor_parallel(index, seed)) is not None:
        degree, ranks = split
        document["parallelism"] = {"tensor_parallel": degree}
        document["resources"]["gpus_per_node"] = ranks
        document["data"] = _data(random.Random(f"tp-data-{seed}-{index}"), assets, ranks // degree)
        if random.Random(f"tp-keep-{seed}-{index}").random() >= 0.1:
            document.pop("peft", None)
            document["model"] = model
            document["train"]["loss_chunks"] = 1
            fsdp = document["fsdp"] = _fsdp(random.Random(f"tp-fsdp-{seed}-{index}"))
            fsdp["version"] = 2
            for fsdp1_only in ("limit_all_gathers", "use_orig_params", "sync_module_states",
                               "cpu_ram_efficient_loading"):
                fsdp.pop(fsdp1_only, None)
            if fsdp["sharding_strategy"] == "NO_SHARD":
                fsdp["sharding_strategy"] = "FULL_SHARD"
    return document


@dataclass
class Outcome:
    refused: list[str]  # error codes; empty when the spec validated
    failure: str | None = None  # the last lines of a run that failed


_HF_HOME: list[Path] = []  # the wide assets' Hugging Face cache, once made


def _env() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if _HF_HOME:
        env.update({"HF_HOME": str(_HF_HOME[0]), "HF_HUB_OFFLINE": "1"})
    return env


def _check_with_cache(spec: Path) -> Any:
    """validate as `fsdpspec run` sees it: with the assets' Hugging Face cache."""
    saved = {k: os.environ.get(k) for k in ("HF_HOME", "HF_HUB_OFFLINE")}
    os.environ.update({k: v for k, v in _env().items() if k in saved})
    try:
        return check_file(spec)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _fsdpspec_run(spec: Path, *overrides: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "fsdpspec", "run", str(spec)]
    for override in overrides:
        argv += ["--set", override]
    return subprocess.run(argv, cwd=spec.parent, capture_output=True, text=True, env=_env(),
                          timeout=RUN_TIMEOUT_S)


def _tail(result: subprocess.CompletedProcess) -> str:
    lines = (result.stdout + result.stderr).strip().splitlines()
    return " | ".join(lines[-4:])


def try_spec(document: dict[str, Any], directory: Path, wide: bool = False) -> Outcome:
    """Validate the spec; when clean, train 2 steps, then resume to the 3rd and export
    (with ``wide`` also export hf, load and report)."""
    directory.mkdir(parents=True)
    spec = directory / "job.yaml"
    # JSON is YAML: the spec file is the sampled document as written.
    spec.write_text(json.dumps(document, indent=1), encoding="utf-8")
    report = check_file(spec) if not wide else _check_with_cache(spec)
    errors = sorted({d.code for d in report.diagnostics if d.is_error})
    if errors:
        return Outcome(errors)
    first = _fsdpspec_run(spec, f"train.max_steps={STEPS - 1}", "checkpoint.final.enabled=false")
    if first.returncode != 0:
        return Outcome([], f"first run exit {first.returncode}: {_tail(first)}")
    second = _fsdpspec_run(spec)
    run_dir = directory / "runs" / document["metadata"]["name"]
    if second.returncode != 0:
        return Outcome([], f"resumed run exit {second.returncode}: {_tail(second)}")
    if "resumed from" not in second.stdout + second.stderr:
        return Outcome([], "the second run did not resume")
    peft = document.get("peft")
    expected = ["adapter/adapter_model.safetensors"] if peft else []
    if not peft or peft["merged"]:
        expected.append("model.safetensors")
    missing = [name for name in expected if not (run_dir / "final" / name).is_file()]
    if missing:
        return Outcome([], f"no final/{', final/'.join(missing)}")
    if wide:
        return Outcome([], _export_load_report(run_dir, directory))
    return Outcome([])


def _export_load_report(run_dir: Path, directory: Path) -> str | None:
    """`fsdpspec export hf`, load the export with transformers, `fsdpspec report`; what
    failed, or None."""
    out = directory / "exported"
    for argv in (["export", "hf", str(run_dir), "-o", str(out)],
                 ["report", str(run_dir), "-o", str(directory / "report.html")]):
        done = subprocess.run([sys.executable, "-m", "fsdpspec", *argv], cwd=directory,
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                              env=_env())
        if done.returncode != 0:
            return f"{argv[0]} exit {done.returncode}: {_tail(done)}"
    done = subprocess.run([sys.executable, "-c", _LOAD, str(out), str(run_dir)],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=_env())
    return None if done.returncode == 0 else f"loading the export failed: {_tail(done)}"


# Load an export as its user would: a model directory with transformers; an adapter
# alone (peft.merged: false) with peft onto the run's base model, built from the config
# the run trained, every adapter tensor of the file loaded.
_LOAD = """
import sys, warnings
from pathlib import Path
out, run = Path(sys.argv[1]), Path(sys.argv[2])
from transformers import AutoConfig, AutoModelForCausalLM
if (out / "config.json").is_file():
    AutoModelForCausalLM.from_pretrained(out)
if (out / "adapter").is_dir():
    from peft import PeftModel
    from fsdpspec.runfiles.resolved import read_resolved_job
    config = AutoConfig.for_model(**read_resolved_job(run / "resolved-spec.json")[0].config)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        PeftModel.from_pretrained(AutoModelForCausalLM.from_config(config), out / "adapter")
    bad = [str(w.message) for w in caught if "key" in str(w.message).lower()]
    assert not bad, bad
if not (out / "config.json").is_file() and not (out / "adapter").is_dir():
    raise SystemExit(f"{out} holds neither a model nor an adapter")
"""


def run(samples: int, seed: int, first: int, root: Path, wide: bool = False) -> dict[str, Any]:
    """Try samples ``first … first+samples-1`` of the seed's sequence; print each failure."""
    assets = make_assets(root / "assets", wide)
    if assets.wide is not None:
        _HF_HOME.append(assets.wide.hf_home)
    rng = random.Random(seed)
    refused: Counter[str] = Counter()
    ran, failed = 0, []
    for index in range(first + samples):
        document = sample_spec(rng, index, assets, seed)
        if index < first:
            continue
        try:
            outcome = try_spec(document, root / f"sample-{index}", wide)
        except subprocess.TimeoutExpired as exc:  # a failure of its own, not the run's end
            outcome = Outcome([], f"timed out after {exc.timeout:.0f} s: {exc.cmd}")
        refused.update(outcome.refused)
        verdict = ("refused " + ",".join(outcome.refused) if outcome.refused else
                   "FAILED" if outcome.failure else "trained")
        print(f"sample {index}: {verdict}", flush=True)  # progress of a long run
        if outcome.refused:
            continue
        ran += 1
        if outcome.failure:
            failed.append(index)
            print(f"FAILED sample {index}: {outcome.failure}\n  spec: "
                  f"{json.dumps(document, separators=(',', ':'))}", flush=True)
    return {"samples": samples, "refused": samples - ran, "refused_by_code": dict(refused),
            "ran": ran, "validated_but_failed": len(failed), "failed_samples": failed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first", type=int, default=0, help="skip this many samples first")
    parser.add_argument("--keep", type=Path, default=None,
                        help="work in this (new) directory and keep it")
    parser.add_argument("--wide", action="store_true",
                        help="the wider space of issue 20 (presets, model directories, "
                             "datasets, 1-3 processes, export hf, load, report)")
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True)
        result = run(args.samples, args.seed, args.first, args.keep, args.wide)
    else:
        with tempfile.TemporaryDirectory(prefix="fsdpspec-soundness-") as tmp:
            result = run(args.samples, args.seed, args.first, Path(tmp), args.wide)
    codes = ", ".join(f"{c} ×{n}" for c, n in sorted(result["refused_by_code"].items()))
    print(f"samples: {result['samples']} (seed {args.seed}, first {args.first})")
    print(f"refused: {result['refused']} ({codes or 'none'})")
    print(f"ran: {result['ran']}")
    print(f"validated but failed: {result['validated_but_failed']}")
    print(json.dumps(result))
    sys.exit(1 if result["validated_but_failed"] else 0)


if __name__ == "__main__":
    main()
