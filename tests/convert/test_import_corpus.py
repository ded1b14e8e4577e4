"""`fsdpspec import accelerate|trainer|axolotl|torchtitan` on real configs taken from
public projects (tests/convert/configs/README.md cites each): every one imports with the
strategy, offload, checkpointing, precision, state dict type, process count and FSDP
version its tool runs, or is refused with one line per feature the spec lacks. An
import that needs nothing we lack then validates and dry-runs clean.

The expectations are read off the source files by hand (and their tools' defaults:
accelerate and the Trainer default to FSDP1 with FULL_STATE_DICT and no backward
prefetch; torchtitan shards with FSDP2; an HF `bf16: auto` is bf16). Everything runs
through click's runner on the real CLI, except one subprocess per kind."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from conftest import ROOT, run_cli
from fsdpspec.catalog.families import FAMILIES
from fsdpspec.catalog.presets import PRESETS
from fsdpspec.cli.main import cli
from fsdpspec.convert.source_kinds import KINDS
from fsdpspec.lint.environment import missing_packages
from fsdpspec.lint.registry import RULES
from fsdpspec.validate import check_file

CONFIGS = ROOT / "tests" / "convert" / "configs"
BF16, FP32 = "bfloat16", "float32"


def job(version: int, strategy: str, offload: bool, ac: str, precision: str,
        state_dict: str, world: int, *, errors: tuple[str, ...] = (), **more: Any) -> dict:
    return dict(version=version, strategy=strategy, offload=offload, ac=ac,
                precision=precision, state_dict=state_dict, world=world, errors=errors, **more)


def refused(*features: str) -> dict:
    return {"refused": features}


# fsdpspec/lint/unbuilt.py refuses each of these features until it lands: its code is
# expected of an import that uses the feature while the rule is registered, and no
# longer once the feature has landed (which deletes the rule).
UNBUILT = {"FS169": ("tp", 1)}


def unbuilt(expected: dict) -> tuple[str, ...]:
    return tuple(code for code, (key, off) in UNBUILT.items()
                 if code in RULES and expected.get(key, off) != off)


FULL, SGO = "FULL_SHARD", "SHARD_GRAD_OP"
FSD, SSD = "FULL_STATE_DICT", "SHARDED_STATE_DICT"

EXPECTED: dict[str, dict] = {
    # accelerate: FSDP1 unless fsdp_version 2; num_processes counts all machines.
    "accelerate/accelerate-template-fsdp.yaml": job(1, FULL, False, "none", BF16, SSD, 2),
    "accelerate/accelerate-slurm-fsdp.yaml": job(1, FULL, False, "none", FP32, SSD, 8),
    "accelerate/accelerate-tests-latest-fsdp.yaml": job(1, FULL, False, "none", FP32, SSD, 1),
    # parallelism_config: world = dp_replicate × dp_shard × tp × cp.
    "accelerate/accelerate-cp8.yaml": job(2, FULL, False, "full", BF16, SSD, 8, cp=8),
    "accelerate/accelerate-tp-hsdp.yaml": job(2, "HYBRID_SHARD", False, "none", BF16, SSD, 8,
                                              tp=2, shard_group_size=2),
    "accelerate/accelerate-nd.yaml": job(2, FULL, False, "none", BF16, SSD, 8, cp=4),
    # fp8 with Transformer Engine (the spec's float8 is torchao's).
    "accelerate/accelerate-fp8-te.yaml": refused("FS050 fp8_config.backend TE (Transformer "
                                                 "Engine float8"),
    "accelerate/trl-fsdp1.yaml": job(1, FULL, False, "none", BF16, FSD, 8),
    "accelerate/trl-fsdp2.yaml": job(2, FULL, False, "none", BF16, FSD, 8),
    "accelerate/trl-context-parallel-2gpu.yaml": job(2, FULL, False, "full", BF16, FSD, 2,
                                                     cp=2),
    "accelerate/alignment-handbook-fsdp.yaml": job(1, FULL, False, "none", BF16, SSD, 8),
    "accelerate/llamafactory-fsdp.yaml": job(1, FULL, False, "none", BF16, FSD, 2),
    "accelerate/llamafactory-fsdp2.yaml": job(2, FULL, False, "none", BF16, FSD, 2),
    "accelerate/llamafactory-multiple-nodes.yaml": job(1, FULL, False, "none", BF16, FSD, 16,
                                                       nodes=2),
    "accelerate/llamafactory-offload.yaml": job(1, FULL, True, "none", BF16, FSD, 2),
    "accelerate/peft-sft-fsdp.yaml": job(1, FULL, False, "none", BF16, SSD, 8),
    "accelerate/peft-sft-fsdp-qlora.yaml": job(1, FULL, True, "none", FP32, SSD, 2),
    "accelerate/peft-tests-fsdp2.yaml": job(2, FULL, False, "none", BF16, SSD, 2),
    # fsdp_config keys without `fsdp_`, which accelerate launch prefixes and obeys.
    "accelerate/hf-blog-pytorch-fsdp.yaml": job(1, FULL, False, "none", FP32, FSD, 2),
    # HF Trainer: the process count is the launcher's; gradient_checkpointing is full AC.
    "trainer/fastchat-train-vicuna-7b.sh": job(1, FULL, False, "full", BF16, FSD, 4),
    "trainer/fastchat-train-vicuna-13b.sh": job(1, FULL, True, "full", BF16, FSD, 8),
    "trainer/fastchat-test-readme-train.sh": job(1, FULL, False, "full", BF16, FSD, 4,
                                                 preset="llama2-7b"),
    # No sequence length in the script: the spec's 2048 does not fit, 1024 is assumed.
    "trainer/alpaca-readme-llama.sh": job(1, FULL, False, "none", BF16, FSD, 4, seq=1024),
    "trainer/alpaca-readme-opt.sh": job(1, FULL, False, "none", BF16, FSD, 4),
    "trainer/qwerty-pretrain.sh": job(1, FULL, False, "none", BF16, FSD, 2, seq=512),
    "trainer/qwerty-finetune.sh": job(1, FULL, False, "full", BF16, FSD, 3),
    "trainer/qwerty-finetune-2-machine.sh": job(1, FULL, False, "none", BF16, FSD, 6, nodes=2),
    # Its model is a stand-in (a local path) that fits no number of GPUs at the script's
    # lengths: the import stops and names the flags (issue 42).
    "trainer/scicom-fsdp1-peft/fsdp1-peft.sh": refused(
        "FS201 resources.gpus_per_node 8: needs 255.9 GiB",
        "the model qwen3-0.6b does not fit 8 × H100-80GB as configured (peak 255.9 of 79.1 "
        "GiB), which the file does not name: name your model with --preset or --hf-config"),
    # gpt-oss runs eager attention only (FS410): its probabilities fit at 1024 tokens, which
    # the import assumes (the script says no length). fsdp.json: use_orig_params false
    # with activation checkpointing (FS903: written true).
    "trainer/scicom-fsdp1-ep/fsdp1.sh": job(1, FULL, False, "full", BF16, FSD, 8,
                                            preset="gpt-oss-20b", use_orig_params=True,
                                            seq=1024),
    "trainer/scicom-gpt-oss-lora/fsdp1-gpt-oss-120b-lora-256.sh": job(
        1, FULL, False, "full", BF16, FSD, 8, use_orig_params=True),
    # axolotl: `fsdp: [full_shard, auto_wrap]` is FSDP1; processes are not in the file.
    "axolotl/llama-3-fft-8b-liger-fsdp.yaml": job(1, FULL, True, "full", BF16, FSD, 8,
                                                  use_orig_params=True),
    "axolotl/phi3-ft-fsdp.yml": job(1, FULL, True, "full", BF16, FSD, 8, preset="phi3-mini",
                                    use_orig_params=True),
    "axolotl/qwen2-adamw-pretrain-fsdp2.yaml": job(2, FULL, False, "none", BF16, FSD, 8,
                                                   preset="qwen2.5-0.5b"),
    "axolotl/gpt-oss-20b-fft-fsdp2.yaml": refused("activation_offloading True"),
    # expert_parallel_size 2 × dp_shard_size 2 is the 4 GPUs it says; the 8-bit AdamW's int8
    # state checkpoints sharded only (FS551), and on the 4 GPUs the model it names (a
    # stand-in: the Instruct-2507 id is no preset) does not fit.
    "axolotl/qwen3-30b-a3b-ep-fsdp-fft-4gpu.yaml": refused(
        "FS551 optimizer (optimizer.state_dtype 'int8')",
        "the model qwen3-30b-a3b does not fit 4 × H100-80GB as configured"),
    # LoRA / QLoRA: peft (method, r, alpha, dropout, target_modules; [] = the family's
    # projections, which lora_target_linear is). axolotl's QLoRA configs are FSDP1, under
    # which the engine does not train QLoRA (FS312): they import as FSDP2, which drops the
    # FSDP1-only use_orig_params.
    "axolotl/llama-2-qlora-fsdp.yml": job(2, FULL, True, "full", BF16, FSD, 8,
                                          preset="llama2-7b", use_orig_params=None,
                                          peft=("qlora", 32, 16, 0.05, [])),
    "axolotl/qwen2-qlora-fsdp.yaml": job(2, FULL, True, "full", BF16, FSD, 8,
                                         use_orig_params=None,
                                         peft=("qlora", 32, 64, 0.05, [])),
    "axolotl/qwen3-qlora-fsdp.yaml": job(2, FULL, True, "full", BF16, FSD, 8,
                                         use_orig_params=None,
                                         peft=("qlora", 32, 64, 0.05, [])),
    "axolotl/llama-3-qlora-fsdp-70b.yaml": job(2, FULL, True, "full", BF16, FSD, 8,
                                               use_orig_params=None,
                                               peft=("qlora", 8, 16, 0.05, [])),
    # mixtral-8x7b, named by the file: QLoRA of its stacked experts is not built, and at
    # its 4096 tokens FSDP alone fits no number of H100s (expert parallelism 2 would).
    "axolotl/mixtral-qlora-fsdp.yml": refused(
        "FS316 adapter (peft.method 'qlora'): peft.method qlora on Mixtral models, a Mixture "
        "of Experts",
        "FS201 resources.gpus_per_node 8: needs 93.7 GiB",
        "the model mixtral-8x7b does not fit 8 × H100-80GB as configured (peak 93.7 of 79.1 "
        "GiB), on the assumed GPU: give --accelerator for yours"),
    "axolotl/dstack-axolotl-qlora-fsdp.yaml": job(2, FULL, True, "full", BF16, FSD, 8,
                                                  preset="llama3-8b", use_orig_params=None,
                                                  peft=("qlora", 8, 16, 0.05, [])),
    # No fsdp key: axolotl would run DDP; imported as an FSDP job (said on stderr).
    "axolotl/llama-3-lora-1b.yml": job(1, FULL, False, "full", BF16, FSD, 8,
                                       preset="llama3.2-1b", peft=("lora", 16, 32, 0.05, [
                                           "gate_proj", "down_proj", "up_proj", "q_proj",
                                           "v_proj", "k_proj", "o_proj"])),
    "axolotl/mistral-lora-mps.yml": job(1, FULL, False, "full", BF16, FSD, 8,
                                        preset="mistral-7b", peft=("lora", 32, 16, 0.05, [])),
    "axolotl/llama-3-lora-8b.yml": refused("load_in_8bit True (an 8-bit quantized base"),
    "axolotl/glm47-flash-lora-fsdp.yaml": refused("load_in_8bit True"),
    "axolotl/modal-llama-3.1-lora.yml": refused("load_in_8bit True"),
    "axolotl/llama-2-gptq-lora.yml": refused("FS050 gptq True (a GPTQ-quantized base model)"),
    # dp_replicate_size × dp_shard_size × tensor_parallel_size × context_parallel_size
    # devices; a tensor- or context-parallel group reads one batch.
    "axolotl/llama-3_1-8b-hsdp-tp.yaml": job(2, "HYBRID_SHARD", False, "none", BF16, FSD, 16,
                                             preset="llama3-8b", tp=2, shard_group_size=4,
                                             global_batch=8),
    # Context parallelism refuses its flash_attention_2 (ring attention replaces SDPA:
    # FS192) and tensor parallelism beside it (FS195): `validate` would, so the import does.
    "axolotl/qwen3-8b-fsdp-tp-cp.yaml": refused(
        "FS195 context_parallel_size (parallelism.context_parallel 2): context_parallel 2 "
        "with tensor_parallel 2 is not in this release",
        "FS192 attn_implementation (model.attention 'flash_attention_2'): context "
        "parallelism runs ring attention around SDPA"),
    # Issue 42's real configs: CP beside flash attention and QLoRA (FS192, FS196), warmup
    # past the last step (FS502).
    "axolotl/nemotron-h-nano-30b-a3b-qlora-cp.yaml": refused(
        "FS196 adapter (peft.method 'qlora'): qlora with context parallelism is not in this "
        "release",
        "FS192 flash_attention (model.attention 'flash_attention_2')"),
    # GLM-4.5-Air, named by its Hub id, is the glm-4.5-air preset (issue 45): its LoRA
    # targets gate/up/down_proj, which peft turns into adapters on its experts too.
    "axolotl/glm45-air-lora-fsdp2.yaml": refused(
        "FS146 lora_target_modules (peft.target_modules ['gate_proj', 'down_proj', "
        "'up_proj', 'q_proj', 'v_proj', '…): peft.target_modules 'gate_proj': peft converts "
        "it into adapters on the experts and router of model_type 'glm4_moe'"),
    # GLM-4.7-Flash is a Mixture of Experts no preset stands in for (issue 45).
    "axolotl/glm47-flash-qlora-fsdp.yaml": refused(
        "FS055 base_model zai-org/GLM-4.7-Flash: a GLM-4.7-Flash model (a Mixture of Experts, "
        "transformers' glm4_moe_lite) that no preset stands in for"),
    "torchtitan/lambda-llama3_405b-16xgb300-8k.toml": refused(
        "FS502 [lr_scheduler] warmup_steps (optimizer.scheduler.warmup_steps 200): "
        "warmup_steps 200 ≥ max_steps 10",
        "FS201 resources.gpus_per_node 8",
        "the model llama3.1-405b does not fit 8 × H100-80GB"),
    # fp8: torchao tensorwise through accelerate, which keeps lm_head in high precision.
    "axolotl/llama-3-3b-fp8-fsdp2.yaml": job(2, FULL, False, "none", BF16, FSD, 8,
                                             preset="llama3.2-3b",
                                             float8=("tensorwise", ["lm_head"], True)),
    "axolotl/llama3-8b-fsdp2-alst.yaml": refused("activation_offloading legacy"),
    "axolotl/qwen2-muon-pretrain-fsdp2.yaml": refused("optimizer muon"),
    # rl: dpo is train.objective dpo: no adapter, so TRL's reference, a frozen copy; its
    # chat_template.default dataset is chat preference records (issue 46).
    "axolotl/qwen2-dpo.yaml": job(1, FULL, False, "full", BF16, FSD, 8, preset="qwen2.5-0.5b",
                                  dpo=("dpo", 0.1, "model", "preference", "conversation")),
    # Objectives and models the engine does not train (it trains next-token loss and DPO).
    "axolotl/falcon-e-3b-dpo.yaml": refused("FS050 use_onebitllms True (a 1-bit (BitNet) model",
                                            "FS050 datasets[0] type chatml.ultra (a DPO "
                                            "dataset type that rewrites the records"),
    "axolotl/falcon-e-3b-ft.yaml": refused("FS050 use_onebitllms True (a 1-bit"),
    "axolotl/llama-3-3b-qat-fsdp2.yaml": refused("FS050 qat (quantization-aware training"),
    "axolotl/llama-3-qlora-1b-kto.yaml": refused("FS050 rl kto (KTO training"),
    "axolotl/qwen2-reward-model.yaml": refused("FS050 reward_model True (a reward model"),
    # TRL's DPO script (`trl dpo`, trl/scripts/dpo.py) is train.objective dpo over
    # DPOConfig's defaults (bf16, gradient checkpointing, beta 0.1); no adapter, so TRL's
    # reference, a frozen copy. Qwen2-0.5B-Instruct is no preset: the Qwen2 family's
    # first stands in, on the one process `python` runs (FS201, said).
    "trainer/trl-cli-dpo.sh": job(1, FULL, False, "full", BF16, FSD, 4, preset="qwen2.5-0.5b",
                                  dpo=("dpo", 0.1, "model", "preference", "prompt")),
    "trainer/trl-dpo-script-docstring.sh": job(
        1, FULL, False, "full", BF16, FSD, 1, preset="qwen2.5-7b", errors=("FS201",),
        assumed="which the file does not name", dpo=("dpo", 0.1, "model", "preference",
                                                     "prompt")),
    # torchtitan: FSDP2, data_parallel_shard_degree -1 over the assumed 8 GPUs.
    "torchtitan/2024-debug_model.toml": job(2, FULL, False, "selective", BF16, SSD, 8,
                                            ac_every=2),
    # qwen3 32B, torchtitan's flavor, does not fit the 8 GPUs the import assumes.
    "torchtitan/2026-qwen3_32b.toml": job(2, FULL, False, "full", BF16, SSD, 8,
                                          preset="qwen3-32b", errors=("FS201",),
                                          assumed="a GPU count"),
    # selective_ac_option "op": the engine's op-level policy (torchtitan's).
    "torchtitan/2024-llama3_8b.toml": job(2, FULL, False, "op", BF16, SSD, 8,
                                          preset="llama3-8b"),
    "torchtitan/2024-llama2_7b.toml": job(2, FULL, False, "op", BF16, SSD, 8,
                                          preset="llama2-7b"),
    # tensor_parallel_degree 8 of the 8 GPUs the import assumes: one data-parallel rank,
    # which does not hold it (FS201); the note says how many GPUs do.
    "torchtitan/2024-llama3_70b.toml": job(2, FULL, False, "full", BF16, SSD, 8,
                                           preset="llama3-70b", tp=8, global_batch=8,
                                           errors=("FS201",), assumed="a GPU count"),
    "torchtitan/2026-llama3_8b.toml": job(2, FULL, False, "op", BF16, SSD, 8,
                                          preset="llama3-8b"),
    "torchtitan/2026-llama3_70b.toml": job(2, FULL, False, "full", BF16, SSD, 8,
                                           preset="llama3-70b", tp=8, global_batch=8,
                                           errors=("FS201",), assumed="a GPU count"),
    # float8 (2025: converters = "float8", the [float8] table; 2026: converters =
    # ["float8"]) beside TP 8 is refused (FS323), and so is its float8 all-gather over
    # one data-parallel rank, which gathers nothing (FS324); the note says the GPU count
    # the import assumed holds too few.
    **{f"torchtitan/{year}-llama3_405b.toml": refused(
        "FS323 [parallelism] tensor_parallel_degree (parallelism.tensor_parallel 8)",
        "FS324", "the model llama3.1-405b does not fit 8 × H100-80GB as configured (peak "
        "993.3 of 79.1 GiB), a GPU count the file does not say: it fits on 120")
       for year in (2025, 2026)},
    "torchtitan/2026-qwen3_0.6b.toml": job(2, FULL, False, "op", BF16, SSD, 8,
                                           preset="qwen3-0.6b"),
    # expert_parallel_degree is parallelism.expert_parallel (issue 44): torchtitan's main
    # has one EP config, whose DeepSeek-V3 16B flavor no preset stands in for; a pull
    # request's Qwen3 30B-A3B at EP 2 imports and validates. Expert tensor parallelism
    # other than 1 is refused.
    "torchtitan/2026-deepseek_v3_16b.toml": refused(
        "FS055 [model] name and flavor deepseek_v3 16B: a DeepSeek-V3 model (a Mixture of "
        "Experts, transformers' deepseek_v3) that no preset stands in for; pass --hf-config"),
    "torchtitan/pr2465-qwen3_30b_a3b.toml": job(2, FULL, False, "full", BF16, SSD, 8,
                                                preset="qwen3-30b-a3b", ep=2),
    "torchtitan/2026-llama4_17bx16e.toml": refused(
        "FS050 [parallelism] expert_tensor_parallel_degree 8 (expert tensor parallelism, "
        "8-way; with 1, FSDP shards each rank's experts instead)"),
    # Issue 45: a Mixture of Experts a config names is its family and shape (torchtitan's
    # flavor tables, debug flavors included), or the import stops naming the model and
    # its family (FS055): no preset stands in for DeepSeek-V3's 16B flavor, Llama 4's
    # 17Bx16E (refused first for its expert tensor parallelism) or Mistral Small 4.
    "torchtitan/2026-qwen3_moe_debug.toml": job(2, FULL, False, "op", BF16, SSD, 8,
                                                preset="torchtitan-qwen3-moe-debug"),
    "torchtitan/2026-gpt_oss-debug_model.toml": job(2, FULL, False, "none", BF16, SSD, 8,
                                                    preset="torchtitan-gpt-oss-debug"),
    # DeepSeek-V3's and Llama 4's debug flavors at their shape (DeepSeek's softmax router
    # said beside it).
    "torchtitan/2026-deepseek_v3-debug_model.toml": job(
        2, FULL, False, "op", BF16, SSD, 8, preset="torchtitan-deepseek-v3-debug"),
    "torchtitan/2026-llama4-debug_model.toml": job(
        2, FULL, False, "op", BF16, SSD, 8, preset="torchtitan-llama4-debug"),
    "axolotl/mistral4-fft-text.yml": refused(
        "FS055 base_model axolotl-ai-co/Mistral-Small-4-119B-2603-BF16: a Mistral Small 4 "
        "model (a Mixture of Experts, transformers' mistral4) that no preset stands in for; "
        "pass --preset NAME, or --hf-config"),
    **{f"axolotl/llama-4-{size}-qlora-fsdp1.yaml": refused(
        f"FS055 base_model axolotl-quants/Llama-4-{size.title()}-17B-{experts}E-Linearized-bnb-"
        "nf4-bf16: a Llama 4 model (a Mixture of Experts, transformers' llama4_text) that no "
        "preset stands in for") for size, experts in (("scout", 16), ("maverick", 128))},
    # gradient_checkpointing: offload is axolotl's CPU-offloaded checkpointing: full
    # checkpointing with fsdp.activation_offload.
    "axolotl/qwen3-32b-qlora.yaml": job(2, FULL, False, "full", BF16, FSD, 8,
                                        preset="qwen3-32b", activation_offload=True,
                                        global_batch=16, use_orig_params=None,
                                        peft=("qlora", 16, 32, 0.0, [
                                            "q_proj", "k_proj", "v_proj", "o_proj",
                                            "down_proj", "up_proj"])),
}


def _corpus() -> list[str]:
    return sorted(str(p.relative_to(CONFIGS)) for p in CONFIGS.glob("*/**/*")
                  if p.suffix in (".yaml", ".yml", ".toml", ".sh"))


def test_every_corpus_file_is_expected_and_cited() -> None:
    readme = (CONFIGS / "README.md").read_text()
    files = _corpus()
    assert files == sorted(EXPECTED)
    assert [f for f in files if f"`{f}`" not in readme] == []
    for kind in KINDS:
        assert len([f for f in files if f.startswith(kind + "/")]) >= 8, kind


def _import(name: str, out: Path):
    kind = name.split("/")[0]
    return CliRunner().invoke(cli, ["import", kind, str(CONFIGS / name), "-o", str(out)])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_imports_as_its_tool_runs_it(name: str, tmp_path: Path) -> None:
    out = tmp_path / "job.yaml"
    result = _import(name, out)
    expected = EXPECTED[name]
    assert "Traceback" not in result.output
    if "refused" in expected:
        assert result.exit_code == 1, result.output
        assert not out.exists()
        lines = [line for line in result.output.splitlines() if "nothing imported" in line]
        for feature in expected["refused"]:
            line = next((x for x in lines if feature in x), None)
            assert line is not None, (feature, result.output)
            assert line.startswith(f"{CONFIGS / name}:"), line
        assert len(lines) == len(expected["refused"]), result.output
        return
    assert result.exit_code == 0, result.output
    report = check_file(out)
    spec = report.spec
    assert spec is not None, [d.message for d in report.diagnostics]
    fsdp = spec.fsdp
    assert (fsdp.version, fsdp.sharding_strategy, fsdp.cpu_offload,
            fsdp.activation_checkpointing, fsdp.mixed_precision.param_dtype,
            fsdp.state_dict_type, spec.world_size) == (
        expected["version"], expected["strategy"], expected["offload"], expected["ac"],
        expected["precision"], expected["state_dict"], expected["world"])
    assert spec.resources.nodes == expected.get("nodes", 1)
    float8 = spec.float8 and (spec.float8.recipe, spec.float8.exclude,
                              spec.float8.fsdp_all_gather)
    p = spec.parallelism
    assert (p.tensor_parallel, p.context_parallel, p.expert_parallel, float8) == (
        expected.get("tp", 1), expected.get("cp", 1), expected.get("ep", 1),
        expected.get("float8"))
    for key, field in (("preset", spec.model.preset), ("ac_every", fsdp.ac_every),
                       ("seq", spec.data.seq_len),
                       ("use_orig_params", fsdp.use_orig_params),
                       ("shard_group_size", fsdp.shard_group_size),
                       ("activation_offload", fsdp.activation_offload),
                       ("global_batch", spec.data.global_batch_size),
                       ("dpo", (spec.train.objective, spec.train.dpo.beta,
                                spec.train.dpo.reference, spec.data.format,
                                spec.data.prompt_field))):
        if key in expected:
            assert field == expected[key], key
    peft = spec.peft
    assert (peft and (peft.method, peft.r, peft.alpha, peft.dropout, peft.target_modules)) == \
        expected.get("peft")
    errors = sorted(d.code for d in report.diagnostics if d.is_error)
    assert errors == sorted(expected["errors"] + unbuilt(expected) + _missing_here(spec))
    if "FS201" in expected["errors"]:  # the import said which assumption fails, and what to set
        line = next(x for x in result.output.splitlines() if "does not fit" in x)
        assert expected["assumed"] in line, line
    if expected["version"] == 2 and name.startswith("axolotl/") and "qlora" in name:
        # written for FSDP1: imported as FSDP2, the one the engine trains QLoRA under
        assert "QLoRA under FSDP1: imported as fsdp.version 2, because fsdpspec's engine " \
            "trains QLoRA under FSDP2 only" in result.output


CLEAN = [n for n, e in sorted(EXPECTED.items())
         if "refused" not in e and not e["errors"] and not unbuilt(e)]


def _missing_here(spec) -> tuple[str, ...]:
    """FS411 when the imported job needs a package this machine lacks (flash_attn for
    the flash attention its source asks for, tensorboard): the import is right, the
    machine needs the package."""
    return ("FS411",) if missing_packages(spec) else ()


@pytest.mark.parametrize("name", CLEAN)
def test_import_then_validate_then_dry_run_is_clean(name: str, tmp_path: Path) -> None:
    out = tmp_path / "job.yaml"
    assert _import(name, out).exit_code == 0
    runner = CliRunner()
    if _missing_here(check_file(out).spec):  # needs a package we lack: said, at its line
        refused = runner.invoke(cli, ["validate", str(out), "--format", "concise"])
        assert refused.exit_code == 1
        assert [line.split()[1] for line in refused.output.splitlines()
                if " error " in line] == ["FS411"], refused.output
        return
    validated = runner.invoke(cli, ["validate", str(out), "--format", "concise"])
    assert validated.exit_code == 0, validated.output
    assert " error " not in validated.output
    dry = runner.invoke(cli, ["run", "--dry-run", str(out)])
    assert dry.exit_code == 0, dry.output


@pytest.mark.parametrize("name", ["accelerate/trl-fsdp2.yaml", "trainer/qwerty-finetune.sh",
                                  "axolotl/mistral-lora-mps.yml",
                                  "torchtitan/2026-llama3_8b.toml"])
def test_each_kind_as_a_user_types_it(name: str, tmp_path: Path) -> None:
    """The real `fsdpspec` process, once per kind."""
    kind = name.split("/")[0]
    out = tmp_path / "job.yaml"
    result = run_cli("import", kind, str(CONFIGS / name), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stderr
    assert out.read_text().startswith("# Imported from the ")


def test_docs_name_every_key_each_importer_reads_or_refuses() -> None:
    """docs/import.md's tables against the importers' own tables."""
    from fsdpspec.convert import (
        accelerate,
        axolotl,
        axolotl_dpo,
        axolotl_lora,
        hftrain,
        torchtitan,
        trainer,
        trl_dpo,
    )

    text = (ROOT / "docs" / "import.md").read_text()
    keys = [*hftrain._SIMPLE, *hftrain._SPECIAL, *trainer._FSDP_WORDS, *trainer._SEQ_LEN,
            *accelerate._REFUSED_SIZES, *accelerate._DEGREES, *axolotl._RENAMED,
            *axolotl._REFUSED_SIZES, *axolotl._DEGREES, axolotl._FP8_GATHER, *torchtitan._DEGREES,
            *axolotl._REFUSED_SWITCHES, *axolotl._ATTENTION_FLAGS, *axolotl_lora.KEYS,
            *axolotl_lora._BNB_KEYS, *axolotl_dpo.KEYS, *hftrain._STATE_DTYPES,
            *torchtitan._REFUSED_DEGREES, *trl_dpo.KEYS]
    assert [k for k in keys if f"`{k}" not in text and f" {k}" not in text
            and f"`--{k}" not in text] == []


def test_the_docs_name_the_registry_s_kinds() -> None:
    """docs/commands.md's table and the import command's own line list the declared kinds
    (`fsdpspec.convert.source_kinds.KINDS`), in order."""
    listed = "|".join(KINDS)
    assert f"fsdpspec import {listed.replace('|', chr(92) + '|')} FILE" in (
        ROOT / "docs" / "commands.md").read_text()
    assert f"`fsdpspec import {listed} FILE" in (
        ROOT / "fsdpspec" / "cli" / "import_config.py").read_text()


# Rules about the machine the test runs on, not the imported spec (a package, an input
# file or a Hub cache it lacks): the job runs where those are.
MACHINE_RULES = {"FS031", "FS407", "FS411"}


def _every_config() -> list[str]:
    """Every file of the corpus, the hand-written accelerate configs and the bare
    fsdp_config JSON files included."""
    return sorted(str(p.relative_to(CONFIGS)) for p in CONFIGS.rglob("*")
                  if p.is_file() and p.name != "README.md")


@pytest.mark.parametrize("name", _every_config())
def test_no_import_writes_what_validate_refuses(name: str, tmp_path: Path) -> None:
    """Issue 42: an import that exits 0 wrote a spec `validate` accepts, except for the
    memory (FS201) of a model or GPU count the import assumed, which it said it assumed
    (with the flag or field to set); one that stops writes nothing and says why."""
    kind = name.split("/")[0] if "/" in name else "accelerate"
    out = tmp_path / "job.yaml"
    result = CliRunner().invoke(cli, ["import", kind, str(CONFIGS / name), "-o", str(out)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    if result.exit_code != 0:
        assert not out.exists()
        assert result.output.rstrip().endswith("nothing imported"), result.output
        return
    errors = {d.code for d in check_file(out).diagnostics if d.is_error} - MACHINE_RULES
    assert errors <= {"FS201"}, (errors, result.output)
    if errors:
        note = next(x for x in result.output.splitlines() if "does not fit" in x)
        assert "which the file does not name: name your model with --preset or --hf-config" \
            in note or "a GPU count the file does not say: it fits on " in note, note


_PRESET_LINE = re.compile(r"^  preset: (\S+) +# (.*)$", re.M)
_SAID = re.compile(r"a .+ model (of its family )?\((dense|a Mixture of Experts)\)"
                   r"|a model of a family fsdpspec cannot tell")


@pytest.mark.parametrize("name", _every_config())
def test_no_stand_in_of_another_family_goes_unsaid(name: str, tmp_path: Path) -> None:
    """Issue 45: a preset the import planned in place of the model its file names (a
    guess: its comment says "assumed" or "not in the source") says, on its own line of
    the written spec, what it stands in for: a model of the same family, or of which
    family, or that the family cannot be told; it is never a dense model for a Mixture
    of Experts. A file that names no model gets its layer class's family."""
    kind = name.split("/")[0] if "/" in name else "accelerate"
    out = tmp_path / "job.yaml"
    if CliRunner().invoke(cli, ["import", kind, str(CONFIGS / name), "-o", str(out)]
                          ).exit_code != 0:
        return
    found = _PRESET_LINE.search(out.read_text())
    if found is None or not found[2].startswith(("assumed", "not in the source")):
        return  # the source's own model: a preset of its geometry, or its config
    preset, comment = found.groups()
    stand_in = FAMILIES[PRESETS[preset]["model_type"]]
    if "stands in for" not in comment:
        assert comment.startswith("not in the source: your model"), comment
        layers = check_file(out).spec.fsdp.transformer_layer_cls
        assert all(layer in stand_in.module_classes() for layer in layers), comment
        return
    said = comment.split(f"{preset} ", 1)[1]
    assert _SAID.search(said), comment
    assert stand_in.moe or "a Mixture of Experts" not in said, comment
