"""Analytic plan versus the fake-tensor trace (`plan --trace`), peak allocated per rank.

Each row is planned with `plan_job` and traced with FSDPMemTracker on FakeTensorMode and
a fake process group of the shard-group size. Prints each row's error, then the median
and maximum |error| and the worst rows; exits 1 when the median exceeds 1%, the maximum
3%, or a row is under-estimated by more than 1% (an OOM the plan would call safe).

Two sets of rows:
- the default: curated real presets (0.5B–8B and the newer families) at full depth;
- ``--sweep``: every registered family × activation checkpointing (none, full,
  selective) × FULL_SHARD / SHARD_GRAD_OP × bf16 / fp32, 8 ranks, sequence 2048,
  micro-batch 1, two accumulation steps; and ``TEMPORARY_ROWS``, the shapes at which
  temporaries set the peak (past the sliding window, large vocabularies). Each family
  at its published widths (hidden size, heads, key/value heads, MLP and expert
  widths, vocabulary) but ``SWEEP_LAYERS`` layers deep, because fake-tensor tracing
  costs per operation and 192 full-depth traces take hours on 2 cores. A Mixture of
  Experts traces in bf16 only (transformers' grouped expert matmul), so its fp32 rows
  are skipped and counted.
- ``--match lora``: one LoRA row per family (``LORA_ROWS``), at full depth.
- ``--match float8``: float8 training (``FLOAT8_ROWS``): both recipes, with and without
  the float8 all-gather, under each checkpointing mode.
- ``--tp``: tensor parallelism (``tp_rows``): every dense family with a tensor-parallel
  plan at degree 2 on one node of 8 and degree 8 on two (FSDP over the 4 or 2
  data-parallel ranks left), without and with full checkpointing, two accumulation
  steps, at published widths ``SWEEP_LAYERS`` deep (a family whose published heads do
  not split 8 ways gets heads that do); the trace runs the engine's 2-D mesh.
- ``--dpo``: preference tuning (``dpo_rows``): each reference (a frozen copy, the LoRA
  base with its adapters off, precomputed log-probs), without and with full
  checkpointing, Llama and Qwen2 at published widths ``SWEEP_LAYERS`` deep, 8 ranks,
  sequence 2048, one pair per micro-batch, two accumulation steps; the trace runs the
  engine's DPO step (both sequences, the reference's forward).

Gemma 2 and gpt-oss run with eager attention (`auto`: transformers refuses SDPA for them).

    python benchmarks/plan_accuracy.py             # the curated rows
    python benchmarks/plan_accuracy.py --sweep     # the registry sweep (170 traces, 3-240 s each)
    python benchmarks/plan_accuracy.py --match moe # the rows whose name has "moe"
    python benchmarks/plan_accuracy.py --levers    # the memory levers' rows
    python benchmarks/plan_accuracy.py --match lora # the LoRA rows (one per family)
    python benchmarks/plan_accuracy.py --match float8 # the float8 rows
    python benchmarks/plan_accuracy.py --tp --traces benchmarks/plan_accuracy_tp.traces.jsonl
    python benchmarks/plan_accuracy.py --dpo --traces benchmarks/plan_accuracy_dpo.traces.jsonl

The sweep in two parallel parts, then every row against the plan (no trace re-run):

    nice -n 19 python benchmarks/plan_accuracy.py --sweep --part 0/2 --traces t.jsonl &
    nice -n 19 python benchmarks/plan_accuracy.py --sweep --part 1/2 --traces t.jsonl
    python benchmarks/plan_accuracy.py --sweep --traces t.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from fsdpspec.catalog.families import FAMILIES
from fsdpspec.catalog.presets import preset_config
from fsdpspec.job.job import Job, resolve
from fsdpspec.plan.planner import plan_job
from fsdpspec.spec.v1 import JobSpec

GIB = 1 << 30

# name, preset, nodes × gpus_per_node, strategy, precision, checkpointing, micro-batch,
# sequence, attention, extra fsdp fields, global batch (None: no accumulation).
ROWS: list[tuple[Any, ...]] = [
    ("qwen0.5b-fs-bf16-mb4", "qwen2.5-0.5b", (1, 8), "FULL_SHARD", "bf16", "none", 4, 1024,
     "sdpa", {}, None),
    # NO_SHARD in bf16: in fp32 it runs as DDP, which the fake-tensor trace cannot run.
    ("qwen0.5b-noshard-bf16", "qwen2.5-0.5b", (1, 4), "NO_SHARD", "bf16", "none", 1, 2048,
     "sdpa", {}, None),
    ("qwen0.5b-sgo-sel-8k", "qwen2.5-0.5b", (1, 2), "SHARD_GRAD_OP", "bf16", "selective", 1,
     8192, "sdpa", {}, None),
    ("llama1b-fs-acfull-4k", "llama3.2-1b", (1, 8), "FULL_SHARD", "bf16", "full", 2, 4096,
     "sdpa", {}, None),
    ("llama1b-sgo-2k", "llama3.2-1b", (1, 8), "SHARD_GRAD_OP", "bf16", "none", 1, 2048,
     "sdpa", {}, None),
    ("llama1b-fs-accum2", "llama3.2-1b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "sdpa", {}, 16),
    ("llama3b-hybrid-sel-4k", "llama3.2-3b", (2, 8), "HYBRID_SHARD", "bf16", "selective", 1,
     4096, "sdpa", {}, None),
    ("llama3b-fs-fp32-32", "llama3.2-3b", (4, 8), "FULL_SHARD", "fp32", "none", 1, 2048,
     "sdpa", {}, None),
    ("phi3-fs-eager-1k", "phi3-mini", (1, 8), "FULL_SHARD", "bf16", "none", 1, 1024,
     "eager", {}, None),
    ("llama3b-fs-eager-mb2-1k", "llama3.2-3b", (2, 8), "FULL_SHARD", "bf16", "none", 2, 1024,
     "eager", {}, None),
    ("gemma2-2b-fs-eager-2k", "gemma2-2b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "eager", {}, None),
    ("mistral7b-fs-window-4k", "mistral-7b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 4096,
     "sdpa", {}, None),
    ("mistral7b-fs-acfull-mb2", "mistral-7b", (2, 8), "FULL_SHARD", "bf16", "full", 2, 2048,
     "sdpa", {}, None),
    ("qwen7b-hsdp-zero2-acfull", "qwen2.5-7b", (4, 8), "HYBRID_SHARD_ZERO2", "bf16", "full", 1,
     2048, "sdpa", {}, None),
    ("llama8b-fs-bf16-4k", "llama3-8b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 4096,
     "sdpa", {}, None),
    ("llama8b-fs-acfull-8k-64", "llama3-8b", (8, 8), "FULL_SHARD", "bf16", "full", 1, 8192,
     "sdpa", {}, None),
    # Newer dense families.
    ("gemma3-1b-fs-window-2k", "gemma3-1b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "sdpa", {}, None),
    ("olmo2-7b-fs-2k", "olmo2-7b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048, "sdpa", {},
     None),
    ("pythia1.4b-fs-mb4-2k", "pythia-1.4b", (1, 8), "FULL_SHARD", "bf16", "none", 4, 2048,
     "sdpa", {}, None),
    ("starcoder2-3b-sgo-2k", "starcoder2-3b", (1, 8), "SHARD_GRAD_OP", "bf16", "none", 1,
     2048, "sdpa", {}, None),
    # Mixture of Experts (bf16: transformers' grouped expert matmul).
    ("mixtral-8x7b-fs-16", "mixtral-8x7b", (2, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "sdpa", {}, None),
    ("qwen3-30b-a3b-fs-acfull", "qwen3-30b-a3b", (2, 8), "FULL_SHARD", "bf16", "full", 1,
     4096, "sdpa", {}, None),
    ("olmoe-fs-4k", "olmoe-1b-7b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 4096, "sdpa", {},
     None),
    ("phi3.5-moe-fs-16", "phi3.5-moe", (2, 8), "FULL_SHARD", "bf16", "none", 1, 2048, "sdpa",
     {}, None),
    ("gpt-oss-20b-fs-eager-1k", "gpt-oss-20b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 1024,
     "eager", {}, None),
]

# LoRA, one row per family (the frozen base in bf16, fp32 adapters on the family's default
# targets), without checkpointing and with full checkpointing; qwen3 and gemma have no
# preset and are read from their config.json under tests/models/.
_LORA = {"r": 16, "alpha": 32}
LORA_ROWS: list[tuple[Any, ...]] = [
    ("lora-llama1b-4k", "llama3.2-1b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 4096, "sdpa",
     {}, None, {"peft": _LORA}),
    ("lora-llama8b-acfull-4k-1gpu", "llama3-8b", (1, 1), "FULL_SHARD", "bf16", "full", 1, 4096,
     "sdpa", {}, None, {"peft": _LORA}),
    ("lora-mistral7b-window-4k", "mistral-7b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 4096,
     "sdpa", {}, None, {"peft": _LORA}),
    ("lora-qwen0.5b-mb2-2k", "qwen2.5-0.5b", (1, 4), "FULL_SHARD", "bf16", "none", 2, 2048,
     "sdpa", {}, None, {"peft": _LORA}),
    ("lora-qwen3-0.6b-2k", "tests/models/qwen3", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "sdpa", {}, None, {"peft": _LORA}),
    ("lora-gemma2b-acfull-2k", "tests/models/gemma", (1, 8), "FULL_SHARD", "bf16", "full", 1,
     2048, "sdpa", {}, None, {"peft": _LORA}),
    ("lora-gemma2-2b-eager-2k", "gemma2-2b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "eager", {}, None, {"peft": _LORA}),
    ("lora-gemma3-1b-2k", "gemma3-1b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048, "sdpa",
     {}, None, {"peft": _LORA}),
    ("lora-olmo2-7b-2k", "olmo2-7b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048, "sdpa",
     {}, None, {"peft": _LORA}),
    ("lora-pythia1.4b-2k", "pythia-1.4b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "sdpa", {}, None, {"peft": _LORA}),
    ("lora-starcoder2-3b-acfull", "starcoder2-3b", (1, 8), "FULL_SHARD", "bf16", "full", 1,
     2048, "sdpa", {}, None, {"peft": _LORA}),
    ("lora-phi3-eager-1k", "phi3-mini", (1, 8), "FULL_SHARD", "bf16", "none", 1, 1024, "eager",
     {}, None, {"peft": _LORA}),
    ("lora-mixtral-8x7b-16", "mixtral-8x7b", (2, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "sdpa", {}, None, {"peft": _LORA}),
    ("lora-qwen3-30b-a3b-acfull", "qwen3-30b-a3b", (2, 8), "FULL_SHARD", "bf16", "full", 1,
     4096, "sdpa", {}, None, {"peft": _LORA}),
    ("lora-olmoe-4k", "olmoe-1b-7b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 4096, "sdpa", {},
     None, {"peft": _LORA}),
    ("lora-phi3.5-moe-16", "phi3.5-moe", (2, 8), "FULL_SHARD", "bf16", "none", 1, 2048, "sdpa",
     {}, None, {"peft": _LORA}),
    ("lora-gpt-oss-20b-eager-1k", "gpt-oss-20b", (1, 8), "FULL_SHARD", "bf16", "none", 1,
     1024, "eager", {}, None, {"peft": _LORA}),
]


# float8 (torchao's Float8Linear, converted before checkpointing and FSDP): tensorwise with
# the float8 all-gather, rowwise without it, and under each checkpointing mode.
_F8 = {"float8": {"recipe": "tensorwise"}}
FLOAT8_ROWS: list[tuple[Any, ...]] = [
    ("float8-llama1b-mb2-2k", "llama3.2-1b", (1, 8), "FULL_SHARD", "bf16", "none", 2, 2048,
     "sdpa", {}, None, _F8),
    ("float8-llama1b-op-ac-4k", "llama3.2-1b", (1, 8), "FULL_SHARD", "bf16", "op", 1, 4096,
     "sdpa", {}, None, _F8),
    ("float8-llama1b-acfull-4k", "llama3.2-1b", (1, 8), "FULL_SHARD", "bf16", "full", 2, 4096,
     "sdpa", {}, None, _F8),
    ("float8-rowwise-qwen0.5b-sgo-mb4", "qwen2.5-0.5b", (1, 8), "SHARD_GRAD_OP", "bf16",
     "none", 4, 1024, "sdpa", {}, None, {"float8": {"recipe": "rowwise"}}),
    ("float8-no-gather-pythia1.4b-sel", "pythia-1.4b", (1, 8), "FULL_SHARD", "bf16",
     "selective", 1, 2048, "sdpa", {}, None,
     {"float8": {"recipe": "tensorwise", "fsdp_all_gather": False}}),
    # A small vocabulary: the peak is in a layer's backward, beside the float8 casts.
    ("float8-mistral7b-2k", "mistral-7b", (1, 8), "FULL_SHARD", "bf16", "none", 1, 2048,
     "sdpa", {}, None, _F8),
]


def lever_rows() -> list[tuple[Any, ...]]:
    """The memory levers (issue 22): the chunked loss and op-level checkpointing on one
    preset of every family with one, and the bf16 / 8-bit optimizer states. The last
    field holds the spec sections besides fsdp (train, optimizer) the row sets.
    Activation offload and 8-bit states have no row: on fake CPU tensors there is no
    device to move from, and torchao's quantisation reads values (`--trace` refuses both)."""
    families = [("llama3.2-1b", "sdpa"), ("mistral-7b", "sdpa"), ("qwen2.5-0.5b", "sdpa"),
                ("phi3-mini", "sdpa"), ("gemma2-2b", "eager"), ("gemma3-1b", "sdpa"),
                ("olmo2-7b", "sdpa"), ("pythia-1.4b", "sdpa"), ("starcoder2-3b", "sdpa"),
                ("mixtral-8x7b", "sdpa"), ("qwen3-30b-a3b", "sdpa"), ("olmoe-1b-7b", "sdpa"),
                ("phi3.5-moe", "sdpa"), ("gpt-oss-20b", "eager")]
    rows: list[tuple[Any, ...]] = []
    for preset, attention in families:
        nodes = 2 if preset in ("mixtral-8x7b", "qwen3-30b-a3b", "phi3.5-moe") else 1
        rows.append((f"{preset}-chunks8", preset, (nodes, 8), "FULL_SHARD", "bf16", "none", 1,
                     2048, attention, {}, None, {"train": {"loss_chunks": 8}}))
        rows.append((f"{preset}-op-ac", preset, (nodes, 8), "FULL_SHARD", "bf16", "op", 1, 2048,
                     attention, {}, None, {}))
    rows += [
        ("llama8b-op-ac-chunks-8k", "llama3-8b", (1, 8), "FULL_SHARD", "bf16", "op", 2, 8192,
         "sdpa", {}, None, {"train": {"loss_chunks": 8}}),
        ("llama1b-states-bf16", "llama3.2-1b", (1, 8), "FULL_SHARD", "bf16", "full", 1, 2048,
         "sdpa", {}, None, {"optimizer": {"state_dtype": "bfloat16"}}),
    ]
    return rows


def row_spec(row: tuple[Any, ...]) -> JobSpec:
    """The JobSpec of one benchmark row."""
    name, preset, (nodes, per_node), strategy, precision, ac, micro, seq, attention = row[:9]
    extra, gbs = row[9:11]
    sections = row[11] if len(row) > 11 else {}
    # A path names a config.json directory (relative to the repository) instead of a preset.
    source = ({"hf_config": str(Path(__file__).parents[1] / preset)} if "/" in preset
              else {"preset": preset})
    return JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": name},
        "resources": {"nodes": nodes, "gpus_per_node": per_node, "accelerator": "H100-80GB"},
        "model": {**source, "attention": attention},
        "fsdp": {"sharding_strategy": strategy, "mixed_precision": precision,
                 "activation_checkpointing": ac, **extra},
        "data": {"seq_len": seq, "micro_batch_size": micro,
                 "global_batch_size": gbs or micro * nodes * per_node},
        **sections,
    })


SWEEP_LAYERS = 4
# Published widths the recorded traces are at, for the families whose first full-size
# preset is not that model (or that ship none): Qwen3 8B, Gemma 7B.
PUBLISHED = {
    "qwen3": {"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,  # 8B
              "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
              "vocab_size": 151936, "tie_word_embeddings": False},
    "gemma": {"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576,  # 7B
              "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
              "vocab_size": 256000},
}


def published_config(model_type: str) -> dict[str, Any]:
    """The family's published widths (PUBLISHED, else its first full-size preset),
    ``SWEEP_LAYERS`` deep."""
    if model_type in PUBLISHED:
        config = dict(PUBLISHED[model_type])
    else:
        config = preset_config(next(p for p in FAMILIES[model_type].presets
                                    if not p.startswith("tiny-")))
    config["num_hidden_layers"] = SWEEP_LAYERS
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"][:SWEEP_LAYERS]
    return config


# The shapes at which temporaries, not saved activations, set the peak (issue 33): past
# the sliding window (an explicit mask per layer, keys and values repeated to every
# head; eager: the S² probabilities), large vocabularies (the fp32 logits and their
# gradients), and StarCoder2-3B's published attention dropout (on the CPU SDPA has no
# fused dropout kernel; the trace measures the GPU's). FULL_SHARD, bf16, 8 ranks,
# micro-batch 1: name, family, checkpointing, sequence, layers (None: the preset's full
# depth), config keys set on the published widths, global batch (8: no accumulation).
_DROPOUT = {"attention_dropout": 0.1, "residual_dropout": 0.1, "embedding_dropout": 0.1}
TEMPORARY_ROWS: list[tuple[Any, ...]] = [
    ("starcoder2-3b-published-ac:full-2k", "starcoder2", "full", 2048, None, _DROPOUT, 8),
    ("starcoder2-window-ac:full-8k", "starcoder2", "full", 8192, SWEEP_LAYERS, {}, 16),
    ("starcoder2-window-ac:none-8k", "starcoder2", "none", 8192, SWEEP_LAYERS, {}, 16),
    ("mistral-window-ac:full-8k", "mistral", "full", 8192, SWEEP_LAYERS, {}, 16),
    ("gemma2-window-eager-ac:full-8k", "gemma2", "full", 8192, SWEEP_LAYERS, {}, 16),
    ("gemma3_text-window-ac:none-4k", "gemma3_text", "none", 4096, SWEEP_LAYERS, {}, 16),
    ("gemma-vocab256k-ac:full-4k", "gemma", "full", 4096, SWEEP_LAYERS, {}, 16),
    ("qwen3-vocab152k-ac:full-4k", "qwen3", "full", 4096, SWEEP_LAYERS, {}, 16),
]


def sweep_rows() -> tuple[list[tuple[Any, ...]], list[str]]:
    """The sweep's rows (name, config, strategy, precision, checkpointing, attention,
    sequence, layers, config keys, global batch) and the names of the rows it cannot trace."""
    rows, skipped = [], []
    # Every family in one setting before the next setting: a partial run covers them all.
    for ac, strategy, precision in itertools.product(
            ("full", "none", "selective"), ("FULL_SHARD", "SHARD_GRAD_OP"), ("bf16", "fp32")):
        for model_type, fam in FAMILIES.items():
            short = "fs" if strategy == "FULL_SHARD" else "sgo"
            name = f"{model_type}-ac:{ac}-{short}-{precision}"
            if fam.moe and precision == "fp32":
                skipped.append(name)
                continue
            rows.append((name, model_type, strategy, precision, ac, "auto", 2048,
                         SWEEP_LAYERS, {}, 16))
    rows += [(name, model_type, "FULL_SHARD", "bf16", ac, "auto", seq, layers, keys, gbs)
             for name, model_type, ac, seq, layers, keys, gbs in TEMPORARY_ROWS]
    return rows, skipped


# Heads (and MLP widths) that split 8 ways, for the families whose published ones do not.
_TP_HEADS = {"qwen2": {"num_attention_heads": 32, "num_key_value_heads": 8},
             "gemma3_text": {"num_attention_heads": 8, "num_key_value_heads": 8},
             "starcoder2": {"num_key_value_heads": 8}}


def tp_rows() -> list[tuple[Any, ...]]:
    """The tensor-parallel rows: sweep rows with a degree (the last field)."""
    rows = []
    for ac, tp in itertools.product(("none", "full"), (2, 8)):
        for model_type, fam in FAMILIES.items():
            if fam.moe is None and not fam.tensor_parallel_plan.refused:
                rows.append((f"{model_type}-tp{tp}-ac:{ac}", model_type, "FULL_SHARD", "bf16",
                             ac, "auto", 2048, SWEEP_LAYERS, _TP_HEADS.get(model_type, {}),
                             2 * 8 * (tp // 4 or 1) // tp, tp))
    return rows


# Preference tuning (DPO): each reference, without and with full checkpointing, on two
# dense families (DPO refuses a Mixture of Experts: FS563); the adapter's rows train LoRA.
_DPO = {"source": "dataset", "path": "pairs.jsonl", "format": "preference"}


def dpo_rows() -> list[tuple[Any, ...]]:
    """The DPO rows: sweep rows with the spec sections they set (the last field)."""
    rows = []
    for model_type, ac, reference in itertools.product(
            ("llama", "qwen2"), ("none", "full"), ("model", "adapter", "precomputed")):
        sections: dict[str, Any] = {"train": {"objective": "dpo",
                                              "dpo": {"reference": reference}}}
        if reference == "adapter":
            sections["peft"] = _LORA
        rows.append((f"dpo-{model_type}-{reference}-ac:{ac}", model_type, "FULL_SHARD",
                     "bf16", ac, "auto", 2048, SWEEP_LAYERS, {}, 16, 1, sections))
    return rows


def sweep_job(row: tuple[Any, ...]) -> Job:
    name, model_type, strategy, precision, ac, attention, seq, layers, keys, gbs = row[:10]
    tp = row[10] if len(row) > 10 else 1
    sections = row[11] if len(row) > 11 else {}
    nodes = tp // 4 or 1  # degree 8 on two nodes: FSDP over 2 data-parallel ranks
    config = published_config(model_type) | keys
    if layers is None:  # the preset's full depth
        full = [p for p in FAMILIES[model_type].presets if not p.startswith("tiny-")]
        config["num_hidden_layers"] = preset_config(full[0])["num_hidden_layers"]
    config["max_position_embeddings"] = max(seq, config.get("max_position_embeddings", 0))
    spec = JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "sweep"},
        "resources": {"nodes": nodes, "gpus_per_node": 8, "accelerator": "H100-80GB"},
        "model": {"hf_config": f"{model_type}/config.json", "attention": attention},
        "fsdp": {"sharding_strategy": strategy, "mixed_precision": precision,
                 "activation_checkpointing": ac},
        "parallelism": {"tensor_parallel": tp},
        "data": {"seq_len": seq, "micro_batch_size": 1, "global_batch_size": gbs,
                 **(_DPO if "train" in sections else {})},
        **sections,
    })
    return resolve(spec, Path.cwd(), config=config)


def measure(job: Job, known: dict[str, Any] | None = None) -> tuple[int, int, int, float]:
    """(shard-group size, analytic peak allocated, traced peak, seconds the trace took)
    of one row; ``known`` is the row's recorded trace, if any (the plan is recomputed)."""
    plan = plan_job(job)
    if known is not None:
        return (plan.job.layout.shard_size, plan.device.peak_allocated, known["traced"],
                known["seconds"])
    from fsdpspec_runners.engine.trace import trace_job

    start = time.perf_counter()
    traced = trace_job(job)
    return (plan.job.layout.shard_size, plan.device.peak_allocated, traced.peak_bytes,
            time.perf_counter() - start)


def recorded_traces(path: Path | None) -> dict[str, Any]:
    """Row name → its recorded trace ({"traced": bytes, "seconds": s}) from ``--traces``.
    A trace depends on torch, transformers and the engine, not on the analytic model, so
    parts of a sweep can run in parallel processes (or resume) and the plan be rechecked
    against them in seconds. Delete the file after changing the engine or a package."""
    if path is None or not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines()
    return {r["row"]: r for r in map(json.loads, lines) if r}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None, help="run the first N rows")
    parser.add_argument("--match", default="", help="only rows whose name contains this")
    parser.add_argument("--sweep", action="store_true",
                        help="every registered family × checkpointing × strategy × dtype")
    parser.add_argument("--tp", action="store_true",
                        help="the tensor-parallel rows (degree 2 and 8, every dense family)")
    parser.add_argument("--dpo", action="store_true",
                        help="the DPO rows (each reference, AC none / full, two families)")
    parser.add_argument("--levers", action="store_true",
                        help="the memory levers' rows instead (chunked loss, op-level AC, "
                             "optimizer state precision)")
    parser.add_argument("--part", default="0/1", metavar="I/N",
                        help="run every N-th row from the I-th (split a sweep over processes)")
    parser.add_argument("--traces", type=Path, default=None, metavar="FILE",
                        help="JSONL of traced peaks: rows found there are not traced again, "
                             "new traces are appended")
    parser.add_argument("--recorded", action="store_true",
                        help="only the rows --traces holds (trace nothing; a sweep in progress)")
    args = parser.parse_args()
    known = recorded_traces(args.traces)
    if args.sweep or args.tp or args.dpo:
        rows, skipped = ((tp_rows(), []) if args.tp else (dpo_rows(), []) if args.dpo
                         else sweep_rows())
        part, parts = (int(x) for x in args.part.split("/"))
        jobs = [(r[0], sweep_job(r)) for r in rows[: args.rows][part::parts]
                if args.match in r[0]]
        print(f"{len(rows)} rows; {len(skipped)} skipped (a Mixture of Experts traces in "
              f"bf16 only); {SWEEP_LAYERS} layers at published widths")
    else:
        curated = lever_rows() if args.levers else ROWS + LORA_ROWS + FLOAT8_ROWS
        jobs = [(r[0], resolve(row_spec(r), Path.cwd())) for r in curated[: args.rows]
                if args.match in r[0]]
    if args.recorded:
        jobs = [(name, job) for name, job in jobs if name in known]
    if lora := {job.geometry.family for name, job in jobs if name.startswith("lora-")}:
        missing = sorted(set(FAMILIES) - lora)
        print(f"LoRA rows cover {len(lora)} of {len(FAMILIES)} registered families"
              + (f" (not: {', '.join(missing)})" if missing else ""))
    print(f"{'row':<34}{'shard':>6}{'analytic GiB':>14}{'traced GiB':>12}{'error':>8}{'s':>6}")
    errors: list[tuple[float, str]] = []
    for name, job in jobs:
        # Read again before each row: another process of the sweep may have traced it.
        known = known | recorded_traces(args.traces)
        shard, analytic, traced, seconds = measure(job, known.get(name))
        if args.traces is not None and name not in known:
            with args.traces.open("a", encoding="utf-8") as out:  # one line per row
                out.write(json.dumps({"row": name, "traced": traced, "seconds": seconds}) + "\n")
        error = (analytic - traced) / traced
        errors.append((error, name))
        print(f"{name:<34}{shard:>6}{analytic / GIB:>14.2f}{traced / GIB:>12.2f}"
              f"{100 * error:>+7.2f}%{seconds:>6.0f}", flush=True)
    return summarise(errors)


def summarise(errors: list[tuple[float, str]]) -> int:
    """Median and maximum |error|, the worst rows, and the verdict against the targets."""
    if not errors:
        print("no rows matched")
        return 1
    sizes = [abs(e) for e, _ in errors]
    median, worst = statistics.median(sizes), max(sizes)
    under = [(e, n) for e, n in errors if e < -0.01]
    print("worst rows: " + ", ".join(f"{n} {100 * e:+.2f}%"
                                     for e, n in sorted(errors, key=lambda x: -abs(x[0]))[:5]))
    print(f"under-estimated by more than 1%: {len(under)} row(s)")
    print(f"median |error| {100 * median:.2f}%   max |error| {100 * worst:.2f}%"
          f"   (targets: median ≤ 1%, max ≤ 3%, none under by more than 1%)")
    return 0 if median <= 0.01 and worst <= 0.03 and not under else 1


if __name__ == "__main__":
    sys.exit(main())
