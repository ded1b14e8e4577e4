"""The importers carry the expert-parallel degree into `parallelism.expert_parallel`
(issue 44): the real `fsdpspec import` on a real file, then `fsdpspec validate` of what it
wrote. A degree `validate` would refuse stops the import at its line with the rule's
code; torchtitan's expert tensor parallelism other than 1 is refused by name, 1 silently;
accelerate has no expert-parallel size, so its `ep_size` is said and not imported.
The files: tests/convert/configs/README.md and tests/convert/expert_parallel/README.md."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT, run_cli
from fsdpspec.validate import check_file

CONFIGS = ROOT / "tests" / "convert" / "configs"
DERIVED = ROOT / "tests" / "convert" / "expert_parallel"


def _import(kind: str, source: Path, out: Path, *extra: str):
    return run_cli("import", kind, str(source), "-o", str(out), *extra)


def test_torchtitan_expert_parallel_degree_is_the_field(tmp_path: Path) -> None:
    """A Qwen3 30B-A3B at expert_parallel_degree 2 (expert_tensor_parallel_degree 1, said
    nothing of) on the 8 GPUs torchtitan's -1 leaves: EP 2, experts FSDP-sharded over 4."""
    source, out = CONFIGS / "torchtitan" / "pr2465-qwen3_30b_a3b.toml", tmp_path / "job.yaml"
    result = _import("torchtitan", source, out)
    assert result.returncode == 0, result.stderr
    assert "expert_parallel: 2                # from [parallelism] expert_parallel_degree " \
        "(line 47)" in out.read_text()
    assert "expert_tensor" not in result.stderr
    validated = run_cli("validate", str(out))
    assert validated.returncode == 0, validated.stdout + validated.stderr
    spec = check_file(out).spec
    assert (spec.parallelism.expert_parallel, spec.world_size) == (2, 8)


def test_torchtitan_expert_tensor_parallelism_is_refused_by_name(tmp_path: Path) -> None:
    source = CONFIGS / "torchtitan" / "2026-llama4_17bx16e.toml"
    result = _import("torchtitan", source, tmp_path / "job.yaml")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"{source}:47: FS050 [parallelism] expert_tensor_parallel_degree 8 (expert tensor "
        "parallelism, 8-way; with 1, FSDP shards each rank's experts instead): the spec "
        "cannot say this yet; nothing imported")
    assert not (tmp_path / "job.yaml").exists()


def test_torchtitan_experts_the_degree_does_not_split_stop_the_import(tmp_path: Path) -> None:
    """gpt-oss's debug flavor has 8 experts a layer: 16 ranks cannot split them (FS161)."""
    source = DERIVED / "torchtitan-gpt_oss-debug-ep16.toml"
    result = _import("torchtitan", source, tmp_path / "job.yaml", "--gpus-per-node", "16")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"{source}:51: FS161 [parallelism] expert_parallel_degree (parallelism.expert_parallel "
        "16): expert_parallel 16 does not divide the model's 8 experts per layer; nothing "
        "imported")


def test_torchtitan_expert_parallelism_of_a_dense_model_stops_the_import(
        tmp_path: Path) -> None:
    source = DERIVED / "torchtitan-llama3_8b-ep2.toml"
    result = _import("torchtitan", source, tmp_path / "job.yaml")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"{source}:44: FS160 [parallelism] expert_parallel_degree (parallelism.expert_parallel "
        "2): expert_parallel 2 on a model without experts; nothing imported")


def test_axolotl_expert_parallel_size_is_the_field_and_its_ranks(tmp_path: Path) -> None:
    """expert_parallel_size 2 × dp_shard_size 2 is the world axolotl's plugin requires;
    its experts' layout is the spec's (efsdp 2), its other weights' is not, which a note
    says. What `validate` then refuses is what the import said of its own guesses (the
    model stands in for one the file names, FS201) and this machine (flash_attn, FS411)."""
    source, out = DERIVED / "axolotl-qwen3-30b-a3b-ep-fsdp-fft-4gpu-adamw.yaml", \
        tmp_path / "job.yaml"
    result = _import("axolotl", source, out)
    assert result.returncode == 0, result.stderr
    text = " ".join(out.read_text().split())
    assert "expert_parallel: 2 # from expert_parallel_size (line 8)" in text
    assert "gpus_per_node: 4 # dp_shard_size 2 (line 9) × expert_parallel_size 2 (line 8)" \
        in text
    assert (f"{source}:8: expert_parallel_size 2: the weights other than the experts, which "
            "axolotl shards over dp_shard_size 2 ranks and replicates over the 2 "
            "expert-parallel ranks, fsdpspec's engine shards over all 4 ranks (torchtitan's "
            "layout: the same training, less memory per rank)") in result.stderr
    assert "which the file does not name" in result.stderr
    validated = run_cli("validate", str(out), "--format", "concise")
    codes = {line.split()[1] for line in validated.stdout.splitlines() if " error " in line}
    assert codes <= {"FS201", "FS411"}, validated.stdout
    assert check_file(out).spec.parallelism.expert_parallel == 2


def test_accelerate_has_no_expert_parallel_size_so_it_is_said(tmp_path: Path) -> None:
    """accelerate 1.16's ParallelismConfig has dp_replicate, dp_shard, tp, cp and sp
    sizes: `accelerate launch` drops parallelism_config_ep_size and runs every expert on
    every rank. The import says so and does not make up the degree."""
    source, out = DERIVED / "accelerate-nd-ep2.yaml", tmp_path / "job.yaml"
    result = _import("accelerate", source, out)
    assert result.returncode == 0, result.stderr
    assert (f"{source}:21: parallelism_config_ep_size 2: accelerate has no such size "
            "(`accelerate launch` drops it and runs every expert on every rank); not "
            "imported: parallelism.expert_parallel is the spec's") in result.stderr
    assert check_file(out).spec.parallelism.expert_parallel == 1
    validated = run_cli("validate", str(out))
    assert validated.returncode == 0, validated.stdout + validated.stderr
