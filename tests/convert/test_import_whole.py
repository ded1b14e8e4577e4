"""Configs imported whole (issue 33): what real public configs say that the importers
dropped or refused, each as a user types `fsdpspec import KIND FILE` on the file of
tests/convert/configs (or that file placed as its repository holds it)."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from conftest import ROOT
from fsdpspec.cli.main import cli
from fsdpspec.validate import check_file

CONFIGS = ROOT / "tests" / "convert" / "configs"


def _import(kind: str, source: Path, out: Path, *extra: str):
    return CliRunner().invoke(cli, ["import", kind, str(source), "-o", str(out), *extra])


def _validate(out: Path):
    return CliRunner().invoke(cli, ["validate", str(out), "--format", "concise"])


def test_accelerate_keys_without_the_prefix_are_honoured(tmp_path: Path) -> None:
    """accelerate launch prefixes an fsdp_config key that lacks `fsdp_` and obeys it
    (commands/launch.py), as the HF blog's `accelerate config` output writes them."""
    source = CONFIGS / "accelerate" / "hf-blog-pytorch-fsdp.yaml"
    out = tmp_path / "job.yaml"
    result = _import("accelerate", source, out)
    assert result.exit_code == 0, result.output
    assert "unknown key" not in result.output
    text = out.read_text()
    assert "sharding_strategy: FULL_SHARD     # from sharding_strategy (line 7)" in text
    assert "min_num_params: 2000              # from min_num_params (line 5)" in text
    # The shape: offload_params true under fsdp_config is offload, not dropped.
    offloaded = tmp_path / "offload.yaml"
    offloaded.write_text(source.read_text().replace("offload_params: false",
                                                    "offload_params: true"))
    offload_out = tmp_path / "offload-job.yaml"
    assert _import("accelerate", offloaded, offload_out).exit_code == 0
    assert check_file(offload_out).spec.fsdp.cpu_offload is True


def _repository(tmp_path: Path, with_config: bool) -> Path:
    """scicom's fsdp1.sh two directories below its repository's root, and the
    fsdp.json it names at that root (where the script is run from)."""
    real = CONFIGS / "trainer" / "scicom-fsdp1-ep"
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    script = tmp_path / "repo" / "scripts" / "ep" / "fsdp1.sh"
    script.parent.mkdir(parents=True)
    shutil.copy(real / "fsdp1.sh", script)
    if with_config:
        shutil.copy(real / "fsdp.json", tmp_path / "repo" / "fsdp.json")
    return script


def test_a_script_s_fsdp_config_is_found_at_its_repository_root(tmp_path: Path) -> None:
    script = _repository(tmp_path, with_config=True)
    out = tmp_path / "job.yaml"
    result = _import("trainer", script, out)
    assert result.exit_code == 0, result.output
    spec = check_file(out).spec
    assert (spec.fsdp.transformer_layer_cls, spec.fsdp.activation_checkpointing,
            spec.fsdp.backward_prefetch) == (["GptOssDecoderLayer"], "full", "BACKWARD_PRE")
    assert f"{tmp_path / 'repo' / 'fsdp.json'}:7" in out.read_text()


def test_an_fsdp_config_not_found_is_named_and_the_rest_imported(tmp_path: Path) -> None:
    script = _repository(tmp_path, with_config=False)
    out = tmp_path / "job.yaml"
    result = _import("trainer", script, out)
    assert result.exit_code == 0, result.output
    assert f"{script}:7: FS053 --fsdp_config fsdp.json: no such file beside fsdp1.sh, in " \
        f"its parent directories up to {tmp_path / 'repo'} or in the working directory; " \
        "its FSDP keys are not imported (the rest of the job is)" in result.output
    spec = check_file(out).spec  # the script's own arguments are there
    assert (spec.world_size, spec.data.micro_batch_size, spec.train.max_steps,
            spec.model.preset) == (8, 8, 200, "gpt-oss-20b")


def test_a_bare_fsdp_config_json_is_read_as_one(tmp_path: Path) -> None:
    """The file TrainingArguments' --fsdp_config names, imported on its own."""
    source = CONFIGS / "trainer" / "scicom-fsdp1-ep" / "fsdp.json"
    out = tmp_path / "job.yaml"
    result = _import("trainer", source, out)
    assert result.exit_code == 0, result.output
    assert "no v1 field" not in result.output
    assert "read as an fsdp_config (the file TrainingArguments' --fsdp_config names)" in (
        result.output)
    fsdp = check_file(out).spec.fsdp
    assert (fsdp.auto_wrap_policy, fsdp.transformer_layer_cls, fsdp.sharding_strategy,
            fsdp.activation_checkpointing) == ("transformer", ["GptOssDecoderLayer"],
                                               "FULL_SHARD", "full")


def test_a_bare_fsdp_config_with_prefixed_keys_is_one_too(tmp_path: Path) -> None:
    """Older transformers wrote the keys `fsdp_`-prefixed, layer classes among them."""
    source = tmp_path / "fsdp_config.json"
    source.write_text('{"fsdp_transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"],\n'
                      ' "fsdp_backward_prefetch": "backward_pre"}\n')
    out = tmp_path / "job.yaml"
    result = _import("trainer", source, out)
    assert result.exit_code == 0 and "no v1 field" not in result.output, result.output
    fsdp = check_file(out).spec.fsdp
    assert (fsdp.transformer_layer_cls, fsdp.backward_prefetch) == (["LlamaDecoderLayer"],
                                                                    "BACKWARD_PRE")


def test_the_default_global_batch_is_whole_micro_batches_on_every_rank(tmp_path: Path) -> None:
    """An accelerate config names no batch; on 3 processes the spec's default 32 would
    fail its own validate (FS501)."""
    source = tmp_path / "three.yaml"
    source.write_text((CONFIGS / "accelerate" / "llamafactory-fsdp.yaml").read_text()
                      .replace("num_processes: 2", "num_processes: 3"))
    out = tmp_path / "job.yaml"
    assert _import("accelerate", source, out).exit_code == 0
    assert "global_batch_size: 33             # assumed (the source does not say)" in (
        out.read_text())
    validated = _validate(out)
    assert validated.exit_code == 0 and " error " not in validated.output, validated.output


def test_assumptions_that_do_not_fit_are_changed_said_or_refused(tmp_path: Path) -> None:
    """Issue 42: the import's own guesses must fit. A sequence length the script does not
    say is shortened until gpt-oss-20b fits its 8 GPUs; a GPU count the TOML does not say
    is written with a note that says how many fit; a stand-in that fits no number of GPUs
    stops the import, naming the flags."""
    out = tmp_path / "named.yaml"
    named = _import("trainer", CONFIGS / "trainer" / "scicom-fsdp1-ep" / "fsdp1.sh", out)
    assert named.exit_code == 0, named.output
    assert "seq_len: 1024                     # assumed (the source does not say): the " \
        "spec's default 2048 does not fit the GPUs; the longest power of two that does" \
        in out.read_text()
    assert " error " not in _validate(out).output
    out = tmp_path / "count.yaml"
    count = _import("torchtitan", CONFIGS / "torchtitan" / "2026-llama3_70b.toml", out)
    assert count.exit_code == 0, count.output
    assert "the model llama3-70b does not fit 8 × H100-80GB as configured (peak 173.5 of " \
        "79.1 GiB), a GPU count the file does not say: it fits on 24; set resources.nodes " \
        "(or pass --gpus-per-node)" in count.output
    assert [line.split()[1] for line in _validate(out).output.splitlines()
            if " error " in line and "FS411" not in line] == ["FS201"]
    out = tmp_path / "stand-in.yaml"
    source = CONFIGS / "trainer" / "scicom-fsdp1-peft" / "fsdp1-peft.sh"
    stand_in = _import("trainer", source, out)
    assert (stand_in.exit_code, out.exists()) == (1, False)
    assert stand_in.output.splitlines() == [
        f"{source}: FS201 resources.gpus_per_node 8: needs 255.9 GiB per GPU at its peak "
        "(backward: loss) but H100-80GB has 79.1 GiB; no number of H100-80GB fits this "
        "configuration; nothing imported",
        f"{source}: the model qwen3-0.6b does not fit 8 × H100-80GB as configured (peak "
        "255.9 of 79.1 GiB), which the file does not name: name your model with --preset or "
        "--hf-config; see `fsdpspec plan`; nothing imported"]


def test_qlora_written_for_fsdp1_imports_as_fsdp2_and_validates(tmp_path: Path) -> None:
    source = CONFIGS / "axolotl" / "llama-2-qlora-fsdp.yml"
    out = tmp_path / "job.yaml"
    result = _import("axolotl", source, out, "--preset", "llama2-7b")
    assert result.exit_code == 0, result.output
    assert f"{source}:18: QLoRA under FSDP1: imported as fsdp.version 2, because fsdpspec's " \
        "engine trains QLoRA under FSDP2 only (FSDP1 cannot shard its 4-bit weights, " \
        "FS312); same sharding, offload and checkpointing; FSDP1-only backward_prefetch, " \
        "limit_all_gathers, use_orig_params not imported" in result.output
    spec = check_file(out).spec
    assert (spec.fsdp.version, spec.peft.method, spec.fsdp.cpu_offload) == (2, "qlora", True)
    errors = [line for line in _validate(out).output.splitlines() if " error " in line]
    # flash attention, as the file asks, needs its package on this machine (FS411)
    assert [line.split()[1] for line in errors] in ([], ["FS411"]), errors
