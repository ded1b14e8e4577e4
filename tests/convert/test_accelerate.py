"""accelerate interop: real-world-shaped configs import into specs that validate, export
back with the same meaning on every key the two share, and the docs table matches the
vocabulary table."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from conftest import ROOT, run_cli
from fsdpspec.catalog.config_source import layer_classes
from fsdpspec.convert import accelerate_vocab as vocab
from fsdpspec.convert.accelerate import export_config
from fsdpspec.validate import check_file

CONFIGS = sorted((ROOT / "tests" / "convert" / "configs").glob("*.yaml"))


def load(path: Path) -> dict[str, Any]:
    return YAML(typ="safe").load(path.read_text())


def flat(config: dict[str, Any]) -> dict[str, Any]:
    """Top-level keys and fsdp_config keys side by side; nulls mean "not set"."""
    merged = {k: v for k, v in config.items() if k != "fsdp_config"}
    merged.update(config.get("fsdp_config") or {})
    return {k: v for k, v in merged.items() if v is not None}


def meaning(key: str, value: Any) -> Any:
    """A value in one spelling: strategy numbers as names, strings as booleans, comma
    lists as lists (written from accelerate's own conventions, not the importer's)."""
    if key == "fsdp_sharding_strategy" and str(value).isdigit():
        return vocab.SHARDING_STRATEGY_BY_NUMBER[int(value)]
    if key == "fsdp_transformer_layer_cls_to_wrap" and isinstance(value, str):
        return value.split(",")
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def import_to(config: Path, tmp_path: Path) -> tuple[Path, str]:
    out = tmp_path / "job.yaml"
    result = run_cli("import", "accelerate", str(config), "-o", str(out))
    assert result.returncode == 0, result.stderr
    return out, result.stderr


def test_enough_configs() -> None:
    assert len(CONFIGS) >= 6
    shapes = [flat(load(c)) for c in CONFIGS]
    assert any(s.get("fsdp_version", 1) == 1 for s in shapes)
    assert any(s.get("fsdp_version") == 2 for s in shapes)
    assert any(isinstance(s.get("fsdp_sharding_strategy"), int) for s in shapes)
    assert any("fsdp_backward_prefetch_policy" in s for s in shapes)
    assert any(s.get("num_machines", 1) > 1 for s in shapes)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_import_validates_and_exports_back(config: Path, tmp_path: Path) -> None:
    spec_file, stderr = import_to(config, tmp_path)
    report = check_file(spec_file)
    assert not report.has_errors, [d.message for d in report.diagnostics]
    assert report.spec is not None
    layers = layer_classes(report.spec.fsdp.transformer_layer_cls, report.model_config)
    exported, _ = export_config(report.spec, layers)
    original, back = flat(load(config)), flat(exported)
    mapped = [k for k in original if k in vocab.KEY_TO_FIELD
              and k not in vocab.SILENT_NOOP_KEYS]
    shared = [k for k in mapped if k in back]
    assert shared, "nothing in common"
    # FS904: fsdp1-hybrid-multinode-strings asks for FSDP1 flat parameters over 4 hybrid
    # shard groups, which torch cannot checkpoint: written true, and said.
    rewritten = {"fsdp_use_orig_params"} if config.stem == "fsdp1-hybrid-multinode-strings" \
        else set()
    if rewritten:
        assert (f"{config}:13: use_orig_params false with 4 hybrid shard groups: torch fails "
                "at the first checkpoint (FS904); wrote fsdp.use_orig_params: true, which "
                "trains the same model") in stderr
    for key in set(shared) - rewritten:
        assert meaning(key, back[key]) == meaning(key, original[key]), key
    # Every mapped key of the source comes back, except the other FSDP version's spelling.
    version_specific = {"fsdp_sharding_strategy", "fsdp_reshard_after_forward"}
    assert set(mapped) - set(shared) <= version_specific


def test_legacy_prefetch_key_is_called_a_no_op(tmp_path: Path) -> None:
    config = ROOT / "tests" / "convert" / "configs" / "legacy-size-wrap-fp16.yaml"
    spec_file, stderr = import_to(config, tmp_path)
    line = next(i for i, text in enumerate(config.read_text().splitlines(), 1)
                if "fsdp_backward_prefetch_policy" in text)
    assert f"{config}:{line}: fsdp_backward_prefetch_policy" in stderr
    assert "silently ignores" in stderr
    # accelerate ran this config with no backward prefetch; so does the spec.
    assert "backward_prefetch: NONE" in spec_file.read_text()


def test_unknown_keys_are_reported_with_their_lines(tmp_path: Path) -> None:
    config = ROOT / "tests" / "convert" / "configs" / "unknown-keys-no-prefetch.yaml"
    _, stderr = import_to(config, tmp_path)
    assert (f"{config}:7: unknown key fsdp_offload_param (did you mean "
            "fsdp_offload_params?): not imported") in stderr
    assert f"{config}:12: unknown key gradient_accumulation_steps: not imported" in stderr


def test_imported_spec_says_where_values_came_from(tmp_path: Path) -> None:
    config = ROOT / "tests" / "convert" / "configs" / "seed-numeric-strategy.yaml"
    text = import_to(config, tmp_path)[0].read_text()
    assert re.search(r"sharding_strategy: FULL_SHARD +# from fsdp_sharding_strategy "
                     r"\(line 8\)", text)
    assert re.search(r"gpus_per_node: 4 +# num_processes 4", text)
    assert "version: 1" in text  # accelerate's default when fsdp_version is absent


def test_spec_exports_and_imports_back(tmp_path: Path) -> None:
    """The other direction: the seed recipe spec → accelerate → spec keeps its FSDP."""
    source = ROOT / "examples" / "fsdp1-seed-recipe.yaml"
    exported = tmp_path / "accelerate.yaml"
    result = run_cli("export", "accelerate", str(source), "-o", str(exported))
    assert result.returncode == 0, result.stderr
    spec_file, _ = import_to(exported, tmp_path)
    before, after = check_file(source).spec, check_file(spec_file).spec
    assert before is not None and after is not None
    for name in ("version", "sharding_strategy", "auto_wrap_policy", "cpu_offload",
                 "backward_prefetch", "state_dict_type", "sync_module_states"):
        assert getattr(after.fsdp, name) == getattr(before.fsdp, name), name
    assert after.world_size == before.world_size


def test_bad_config_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("fsdp_config: [unclosed\n")
    result = run_cli("import", "accelerate", str(bad), "-o", str(tmp_path / "out.yaml"))
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "out.yaml").exists()


def test_docs_table_matches_the_vocabulary() -> None:
    text = (ROOT / "docs" / "accelerate.md").read_text()
    rows = re.findall(r"^\| `([a-z_]+)` \| `([a-z_.]+)` \|", text, flags=re.MULTILINE)
    assert dict(rows) == vocab.KEY_TO_FIELD
    assert len(rows) == len(vocab.KEY_TO_FIELD)


def test_a_family_without_a_preset_asks_for_the_model(tmp_path: Path) -> None:
    """Guessing a Llama preset for a Gemma layer would write a spec FS111 rejects."""
    config = tmp_path / "gemma.yaml"
    config.write_text("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n"
                      "  fsdp_transformer_layer_cls_to_wrap: GemmaDecoderLayer\n")
    result = run_cli("import", "accelerate", str(config), "-o", str(tmp_path / "job.yaml"))
    assert result.returncode == 2
    assert "no preset of the gemma family wraps GemmaDecoderLayer" in result.stderr
    assert not (tmp_path / "job.yaml").exists()


def test_expert_parallelism_is_said_not_written(tmp_path: Path) -> None:
    """accelerate's ParallelismConfig has no expert-parallel size: the export names the
    field it leaves out, and the config runs the job as plain FSDP."""
    spec = tmp_path / "job.yaml"
    spec.write_text("apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: moe}\n"
                    "model: {preset: tiny-mixtral}\nresources: {accelerator: cpu, "
                    "gpus_per_node: 2}\nfsdp: {mixed_precision: bf16}\n"
                    "data: {seq_len: 64, global_batch_size: 8}\n"
                    "parallelism: {expert_parallel: 2}\n")
    out = tmp_path / "accelerate.yaml"
    result = run_cli("export", "accelerate", str(spec), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert (f"{spec}: note: parallelism.expert_parallel 2: accelerate's parallelism_config "
            "has no expert-parallel size; not written") in result.stderr
    assert "expert" not in out.read_text()
