"""The defects issue 23 found in `fsdpspec import accelerate`, one test each, and the
Trainer / axolotl readers' own edges: every line asserts the message and its line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from ruamel.yaml import YAML

from fsdpspec.cli.main import cli
from fsdpspec.lint.registry import RULES
from fsdpspec.validate import check_file

HEAD = "distributed_type: FSDP\nmixed_precision: bf16\n"


def _import(tmp_path: Path, kind: str, name: str, text: str, *extra: str):
    source = tmp_path / name
    source.write_text(text)
    out = tmp_path / "job.yaml"
    # --force: some tests import twice into one out.
    result = CliRunner().invoke(cli, ["import", kind, str(source), "-o", str(out), "--force",
                                      *extra])
    return source, out, result


def _errors(out: Path) -> list[str]:
    return [d.code for d in check_file(out).diagnostics if d.is_error]


@pytest.mark.parametrize("section", ["  cp_size: 8\n", "  parallelism_config_cp_size: 8\n"])
def test_context_parallel_size_is_the_degree_from_its_line(tmp_path: Path, section: str) -> None:
    source, out, result = _import(tmp_path, "accelerate", "cp.yaml", HEAD + "num_processes: 8\n"
                                  "fsdp_config:\n  fsdp_version: 2\nparallelism_config:\n"
                                  + section + "  sp_size: 1\n")
    assert result.exit_code == 0, result.output
    key = section.split(":")[0].strip()
    assert f"context_parallel: 8 # from {key} (line 7)" in " ".join(out.read_text().split())
    spec = check_file(out).spec
    assert (spec.parallelism.context_parallel, spec.world_size) == (8, 8)
    _, out, result = _import(tmp_path, "accelerate", "cp.yaml", source.read_text().replace(
        "sp_size: 1", "sp_size: 2"))
    assert result.exit_code == 1
    assert result.output.strip() == (f"{source}:8: FS050 sp_size 2 (sequence parallelism, "
                                     "2-way): the spec cannot say this yet; nothing imported")


def test_tensor_parallel_hsdp_and_pure_hsdp_are_hybrid(tmp_path: Path) -> None:
    layout = (HEAD + "num_processes: 8\nfsdp_config:\n  fsdp_version: 2\n"
              "  fsdp_reshard_after_forward: true\nparallelism_config:\n"
              "  dp_replicate_size: 2\n  dp_shard_size: {shard}\n  tp_size: {tp}\n")
    for shard, tp in ((2, 2), (4, 1)):
        _, out, result = _import(tmp_path, "accelerate", "a.yaml", layout.format(shard=shard,
                                                                                 tp=tp))
        assert result.exit_code == 0, result.output
        spec = check_file(out).spec
        assert (spec.fsdp.sharding_strategy, spec.fsdp.shard_group_size,
                spec.parallelism.tensor_parallel, spec.world_size) == ("HYBRID_SHARD", shard,
                                                                       tp, 8)
        # FS169 refuses tensor parallelism until it lands (fsdpspec/lint/unbuilt.py)
        assert _errors(out) == (["FS169"] if tp > 1 and "FS169" in RULES else [])
    # 2 × 2 × 2 of 16 processes: accelerate stops on the mismatch, so does the import
    source, out, result = _import(tmp_path, "accelerate", "a.yaml", layout.format(
        shard=2, tp=2).replace("num_processes: 8", "num_processes: 16"))
    assert result.exit_code == 1
    assert result.output.strip() == (f"{source}:8: FS052 parallelism_config sizes multiply to 8 "
                                     "processes, not num_processes 16 (line 3): accelerate "
                                     "stops on it; nothing imported")


def test_a_layer_class_of_another_model_is_reported_not_copied(tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, "accelerate", "bert.yaml", HEAD + "num_processes: 1\n"
                                  "fsdp_config:\n  fsdp_transformer_layer_cls_to_wrap: "
                                  "BertLayer\n")
    assert result.exit_code == 0
    assert (f"{source}:5: fsdp_transformer_layer_cls_to_wrap BertLayer is not a layer of the "
            "model llama3.2-1b: not imported (the model's LlamaDecoderLayer is wrapped)"
            ) in result.output
    assert "BertLayer" not in out.read_text().split("fsdp:")[1].split("#")[0]
    assert check_file(out).spec.fsdp.transformer_layer_cls == []
    assert _errors(out) == []


FOUR_MACHINES = """\
distributed_type: FSDP
mixed_precision: bf16
num_machines: 4
num_processes: 4
fsdp_config:
  fsdp_version: 2
  fsdp_sharding_strategy: HYBRID_SHARD
  fsdp_reshard_after_forward: true
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
"""


def test_four_machines_without_an_ip_say_what_to_set(tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, "accelerate", "four.yaml", FOUR_MACHINES)
    assert result.exit_code == 0
    assert (f"{source}: 4 nodes and no rendezvous host in the source: set "
            "launch.rdzv_endpoint (the first node's host:port) before `fsdpspec run`"
            ) in result.output
    # The exports derive the endpoint, so FS025 no longer applies; the placeholder model
    # (the source names none) does not fit unwrapped on 4 GPUs, and the import says so.
    assert "the model llama3-8b does not fit 4 × H100-80GB" in result.output
    assert _errors(out) == ["FS201"]


def test_an_fsdp2_hybrid_strategy_is_not_silently_replaced(tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, "accelerate", "four.yaml", FOUR_MACHINES)
    assert (f"{source}:7: fsdp_sharding_strategy HYBRID_SHARD is not read by accelerate with "
            "fsdp_version 2, which shards as FULL_SHARD over all processes (hybrid sharding "
            "is parallelism_config's dp_replicate_size × dp_shard_size): not imported"
            ) in result.output
    assert YAML(typ="safe").load(out.read_text())["fsdp"]["sharding_strategy"] == "FULL_SHARD"
    # Under FSDP1 accelerate obeys fsdp_sharding_strategy, and the other key is the note.
    # (Its four one-GPU shard groups replicate the model: the 8B stand-in fits no GPU.)
    text = FOUR_MACHINES.replace("fsdp_version: 2", "fsdp_version: 1").replace(
        "fsdp_reshard_after_forward: true", "fsdp_reshard_after_forward: SHARD_GRAD_OP")
    source, out, result = _import(tmp_path, "accelerate", "four.yaml", text,
                                  "--preset", "llama3.2-1b")
    assert f"{source}:8: fsdp_reshard_after_forward SHARD_GRAD_OP is not read" in result.output
    assert YAML(typ="safe").load(out.read_text())["fsdp"]["sharding_strategy"] == "HYBRID_SHARD"


def test_real_accelerate_keys_get_no_wrong_hint(tmp_path: Path) -> None:
    source, _, result = _import(tmp_path, "accelerate", "keys.yaml", HEAD + "num_processes: 2\n"
                                "dynamo_backend: INDUCTOR\nfsdp_config:\n"
                                "  fsdp_ignored_modules: [lm_head]\n  fsdp_offload_param: true\n")
    assert result.exit_code == 0, result.output
    assert "did you mean fsdp_sync_module_states" not in result.output
    assert "did you mean rdzv_backend" not in result.output
    assert f"{source}:4: dynamo_backend: accelerate's torch.compile backend" in result.output
    assert f"{source}:6: fsdp_ignored_modules: modules FSDP would leave unsharded" in result.output
    assert (f"{source}:7: unknown key fsdp_offload_param (did you mean fsdp_offload_params?)"
            ) in result.output


def test_flat_params_with_checkpointing_import_as_a_job_that_validates(tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, "accelerate", "ac.yaml", HEAD + "num_processes: 2\n"
                                  "fsdp_config:\n  fsdp_activation_checkpointing: true\n"
                                  "  fsdp_use_orig_params: false\n")
    assert result.exit_code == 0
    assert f"{source}:6: use_orig_params false with activation checkpointing" in result.output
    assert "FS903" in out.read_text() and check_file(out).spec.fsdp.use_orig_params is True
    assert _errors(out) == []


def test_export_writes_the_fsdp2_form_with_hybrid_as_parallelism_config(tmp_path: Path) -> None:
    _, spec, result = _import(tmp_path, "accelerate", "a.yaml", HEAD + "num_processes: 8\n"
                              "fsdp_config:\n  fsdp_version: 2\nparallelism_config:\n"
                              "  dp_replicate_size: 2\n  dp_shard_size: 4\n")
    exported = tmp_path / "back.yaml"
    result = CliRunner().invoke(cli, ["export", "accelerate", str(spec), "-o", str(exported)])
    assert result.exit_code == 0, result.output
    config = YAML(typ="safe").load(exported.read_text())
    assert config["fsdp_config"]["fsdp_version"] == 2
    assert config["fsdp_config"]["fsdp_reshard_after_forward"] is True
    assert "fsdp_sharding_strategy" not in config["fsdp_config"]
    assert config["parallelism_config"] == {"parallelism_config_dp_replicate_size": 2,
                                            "parallelism_config_dp_shard_size": 4}


# ---- HF Trainer -----------------------------------------------------------------------

def test_trainer_arguments_file_with_inline_prefixless_config(tmp_path: Path) -> None:
    arguments = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "fsdp": ["shard_grad_op",
                 "auto_wrap", "offload"], "fsdp_config": {"backward_prefetch": "backward_post",
                 "fsdp_version": "1", "use_orig_params": "true"}, "bf16": True,
                 "per_device_train_batch_size": 2, "gradient_accumulation_steps": 4,
                 "max_steps": 100, "warmup_ratio": 0.1, "save_steps": 50,
                 "lr_scheduler_type": "cosine", "learning_rate": 1e-5}
    source, out, result = _import(tmp_path, "trainer", "args.json",
                                  json.dumps(arguments, indent=2), "--gpus-per-node", "2")
    assert result.exit_code == 0, result.output
    spec = check_file(out).spec
    assert spec.model.preset == "qwen2.5-0.5b"
    assert (spec.fsdp.sharding_strategy, spec.fsdp.cpu_offload, spec.fsdp.backward_prefetch,
            spec.fsdp.use_orig_params) == ("SHARD_GRAD_OP", True, "BACKWARD_POST", True)
    assert (spec.data.micro_batch_size, spec.data.global_batch_size) == (2, 16)
    assert (spec.train.max_steps, spec.optimizer.scheduler.warmup_steps) == (100, 10)
    assert spec.optimizer.scheduler.min_lr_ratio == 0.0
    text = out.read_text()  # lines of the JSON file's own keys, nested ones too
    assert "from fsdp shard_grad_op (line 3)" in text
    assert "from backward_prefetch (line 9)" in text
    assert _errors(out) == []


def test_trainer_yaml_and_a_config_file_beside_the_script(tmp_path: Path) -> None:
    (tmp_path / "fsdp.json").write_text(
        '{\n  "fsdp_activation_checkpointing": "true",\n'
        '  "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]\n}')
    script = ("export NGPU=4\n"
              "accelerate launch --num_processes 4 train.py \\\n"
              "  --fsdp 'full_shard auto_wrap' --fsdp_config fsdp.json \\\n"
              "  --max-steps=20 --fp16 --seed $SEED\n")
    source, out, result = _import(tmp_path, "trainer", "run.sh", script)
    assert result.exit_code == 0, result.output
    assert f"{source}:4: --seed $SEED: a shell variable" in result.output
    spec = check_file(out).spec
    assert (spec.world_size, spec.train.max_steps, spec.fsdp.activation_checkpointing,
            spec.fsdp.mixed_precision.param_dtype) == (4, 20, "full", "float16")
    assert f"{tmp_path / 'fsdp.json'}:2" in out.read_text()


def test_a_script_with_two_launches_or_none_is_one_line(tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, "trainer", "two.sh",
                                  "torchrun a.py --fsdp full_shard\npython b.py\n")
    assert result.exit_code == 1 and not out.exists()
    assert result.output.strip().endswith(
        f"{source}: 2 launch commands (lines 1, 2); import reads a script with one; "
        "nothing imported")
    source, out, result = _import(tmp_path, "trainer", "none.sh", "echo hi\n")
    assert result.exit_code == 1 and "no torchrun, accelerate launch or python command" in (
        result.output)



# ---- torchtitan ------------------------------------------------------------------------

TITAN = '[model]\nname = "llama3"\nflavor = "8B"\n[activation_checkpoint]\n'  # lines 1-4


def test_torchtitan_op_checkpointing_is_the_op_mode(tmp_path: Path) -> None:
    _, out, result = _import(tmp_path, "torchtitan", "a.toml", TITAN + 'mode = "selective"\n'
                             'selective_ac_option = "op"\n')
    assert result.exit_code == 0, result.output
    assert check_file(out).spec.fsdp.activation_checkpointing == "op"
    assert "# from [activation_checkpoint] selective_ac_option (line 6)" in out.read_text()


@pytest.mark.parametrize(("text", "line", "expected"), [
    ('mode = "selective"\nselective_ac_option = "op"\n'
     'per_op_sac_force_recompute_mm_shapes_by_fqns = ["attention.wq"]\n', 7,
     "FS050 [activation_checkpoint] per_op_sac_force_recompute_mm_shapes_by_fqns "
     "['attention.wq'] (matrix multiplies forced to be recomputed"),
    ('mode = "memory_budget"\nmemory_budget = 0.5\n', 5,
     "FS050 [activation_checkpoint] mode memory_budget (recomputation chosen by the compiler"),
    ('mode = "selective"\nselective_ac_option = "ops"\n', 6,
     "FS052 [activation_checkpoint] selective_ac_option 'ops' is not 'op' or a number"),
])
def test_torchtitan_checkpointing_the_spec_cannot_say_is_refused(
        tmp_path: Path, text: str, line: int, expected: str) -> None:
    source, out, result = _import(tmp_path, "torchtitan", "a.toml", TITAN + text)
    assert result.exit_code == 1 and not out.exists()
    assert result.output.startswith(f"{source}:{line}: {expected}"), result.output


def test_torchtitan_selective_zero_checkpoints_every_layer(tmp_path: Path) -> None:
    _, out, result = _import(tmp_path, "torchtitan", "a.toml", TITAN + 'mode = "selective"\n'
                             'selective_ac_option = "0"\n')
    assert result.exit_code == 0, result.output
    fsdp = check_file(out).spec.fsdp
    assert (fsdp.activation_checkpointing, fsdp.ac_every) == ("selective", 1)


def test_torchtitan_float8_filters_are_the_hf_names_and_the_small_layer_filter(
        tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, "torchtitan", "f8.toml", (
        '[model]\nname = "llama3"\nflavor = "8B"\nconverters = ["quantize.linear.float8"]\n'
        '[quantize.linear.float8]\nrecipe_name = "rowwise"\n'
        'filter_fqns = ["output", "auto_filter_small_kn", "attention.wk", "tok_embeddings"]\n'))
    assert result.exit_code == 0, result.output
    assert (f"{source}:7: [quantize.linear.float8] filter_fqns ['tok_embeddings']: not "
            "torchtitan module names fsdpspec knows") in result.output
    float8 = check_file(out).spec.float8
    assert (float8.recipe, float8.exclude, float8.skip_small, float8.fsdp_all_gather) == (
        "rowwise", ["lm_head", "k_proj"], True, False)
    text = " ".join(out.read_text().split())
    assert "recipe: rowwise # from [quantize.linear.float8] recipe_name (line 6)" in text
    _, out, result = _import(tmp_path, "torchtitan", "f8.toml", source.read_text().replace(
        '"rowwise"', '"rowwise_with_gw_hp"'))
    assert result.exit_code == 1 and "FS050 [quantize.linear.float8] recipe_name " \
        "rowwise_with_gw_hp (a float8 recipe the spec lacks" in result.output
