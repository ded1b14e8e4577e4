"""Lint rules: the registry's contract, every documented example, exact positions of
small inline specs, layer classes per model family, and rule selection."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import CASES, ROOT
from fsdpspec.lint import RULES
from fsdpspec.lint.docs import parse_doc, rules_markdown
from fsdpspec.lint.selection import is_selected
from fsdpspec.spec.diagnostics import Severity
from fsdpspec.validate import check_file

BASE = {
    "apiVersion": "fsdpspec/v1",
    "kind": "TrainingJob",
    "metadata": {"name": "example"},
    "model": {"preset": "tiny-llama"},
    "data": {"seq_len": 64, "global_batch_size": 8},
    "train": {"max_steps": 100},
    "checkpoint": {"interval_steps": 50},
}
FAMILY_LAYERS = {"llama": "LlamaDecoderLayer", "mistral": "MistralDecoderLayer",
                 "qwen2": "Qwen2DecoderLayer", "gemma2": "Gemma2DecoderLayer",
                 "phi3": "Phi3DecoderLayer"}
ALL = sorted(RULES)


def _merge(base: dict, fragment: dict) -> dict:
    """Overlay a documentation fragment on BASE; `model` is replaced as a whole, since a
    spec has exactly one model source."""
    out = dict(base)
    for key, value in fragment.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "model":
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _codes_of_example(rule_code: str, label: str, tmp_path: Path) -> list[str]:
    tmp_path = tmp_path / label
    tmp_path.mkdir()
    from ruamel.yaml import YAML

    fragment = YAML(typ="safe", pure=True).load(parse_doc(RULES[rule_code].doc).examples[label])
    # Examples may name the fixture configs as `models/<family>`.
    (tmp_path / "models").symlink_to(ROOT / "tests" / "models")
    spec = tmp_path / f"{label}.yaml"
    spec.write_text(json.dumps(_merge(BASE, fragment)))  # JSON is YAML
    # Examples name data files they do not ship: a missing input (FS407) counts only in
    # FS407's own examples.
    return [d.code for d in check_file(spec).diagnostics
            if d.code != "FS407" or rule_code == "FS407"]


def lint(tmp_path: Path, text: str, *overrides: str) -> list[tuple[int, int, str]]:
    spec = tmp_path / "job.yaml"
    spec.write_text(text)
    report = check_file(spec, overrides)
    return [(d.position.line, d.position.col, d.code) for d in report.diagnostics]


HEAD = """\
apiVersion: fsdpspec/v1
kind: TrainingJob
metadata: {name: job}
"""


# --- the registry's contract -------------------------------------------------------

def test_at_least_25_rules_with_unique_codes_in_families() -> None:
    assert len(RULES) >= 25
    assert all(re.fullmatch(r"FS[1-59]\d\d", code) for code in RULES)
    names = [r.name for r in RULES.values()]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("code", ALL)
def test_rule_is_documented(code: str) -> None:
    rule = RULES[code]
    doc = parse_doc(rule.doc)
    assert rule.summary and rule.hint and doc.prose
    assert set(doc.examples) == {"FAIL", "PASS"}
    assert isinstance(rule.severity, Severity)


@pytest.mark.parametrize("code", ALL)
def test_documented_fail_example_fires_and_pass_example_is_clean(code: str, tmp_path) -> None:
    assert code in _codes_of_example(code, "FAIL", tmp_path)
    assert _codes_of_example(code, "PASS", tmp_path) == []


def test_every_rule_has_failing_and_passing_golden_cases() -> None:
    invalid = {p.stem.split("-")[1] for p in (CASES / "invalid").glob("lint-FS*.yaml")}
    valid = {p.stem.split("-")[1] for p in (CASES / "valid").glob("lint-FS*-ok.yaml")}
    for code in ALL:
        assert code in invalid, f"no failing golden case for {code}"
        assert code in valid, f"no passing golden case for {code}"
        failing = (CASES / "invalid").glob(f"lint-{code}-*.expected")
        assert any(code in p.read_text() for p in failing), code


def test_docs_rules_md_is_in_sync() -> None:
    assert (ROOT / "docs" / "rules.md").read_text() == rules_markdown(), (
        "docs/rules.md is stale: run `fsdpspec rules --markdown > docs/rules.md`")


# --- exact positions ---------------------------------------------------------------

def test_layer_class_of_another_family_points_at_the_list_item(tmp_path) -> None:
    text = HEAD + """\
model: {preset: tiny-qwen2}
fsdp:
  transformer_layer_cls:
    - Qwen2DecoderLayer
    - LlamaDecoderLayer
data: {seq_len: 64, global_batch_size: 1}
"""
    assert lint(tmp_path, text) == [(8, 7, "FS111")]


def test_other_module_classes_of_the_model_are_accepted(tmp_path) -> None:
    text = HEAD + """\
model: {preset: tiny-llama}
fsdp: {transformer_layer_cls: [LlamaDecoderLayer, Embedding]}
data: {seq_len: 64, global_batch_size: 1}
"""
    assert lint(tmp_path, text) == []


def test_world_size_in_env_points_at_the_value(tmp_path) -> None:
    text = HEAD + """\
model: {preset: tiny-llama}
resources: {gpus_per_node: 2}
data: {seq_len: 64, global_batch_size: 8}
launch:
  env: {WORLD_SIZE: "4", MASTER_PORT: "1234"}
"""
    assert lint(tmp_path, text) == [(8, 21, "FS101"), (8, 39, "FS102")]


def test_precision_shorthand_is_reported_at_its_key(tmp_path) -> None:
    text = HEAD + """\
model: {preset: tiny-llama}
resources: {accelerator: T4}
fsdp:
  mixed_precision: bf16
data: {seq_len: 64, global_batch_size: 1}
"""
    assert lint(tmp_path, text) == [(7, 3, "FS303")]


def test_a_set_flag_is_where_its_problem_is(tmp_path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(HEAD + "model: {preset: tiny-llama}\ndata: {seq_len: 64, "
                    "global_batch_size: 1}\n")
    report = check_file(spec, ["fsdp.forward_prefetch=true"])
    [found] = report.diagnostics
    assert (found.code, found.file) == ("FS901", "--set fsdp.forward_prefetch=true")


def test_defaults_are_not_reported_as_written(tmp_path) -> None:
    """forward_prefetch / limit_all_gathers / min_num_params left at their defaults."""
    text = HEAD + "model: {preset: tiny-llama}\ndata: {seq_len: 64, global_batch_size: 1}\n"
    assert lint(tmp_path, text) == []


# --- layer classes from a local config.json ----------------------------------------

@pytest.mark.parametrize("family", sorted(FAMILY_LAYERS))
def test_layer_class_rule_names_the_family_layer(family: str, tmp_path) -> None:
    config = ROOT / "tests" / "models" / family / "config.json"
    spec = tmp_path / "job.yaml"
    spec.write_text(HEAD + f"model: {{hf_config: {config.parent}}}\n"
                    "fsdp: {transformer_layer_cls: [WrongLayer]}\n"
                    "data: {seq_len: 64, global_batch_size: 1}\n")
    # Only the wrapping rules: the fixtures are full-size models that need real GPUs.
    [found] = check_file(spec, select=["FS11"]).diagnostics
    assert found.code == "FS111"
    assert found.hint == f"use {FAMILY_LAYERS[family]} (inferred from the model)"
    spec.write_text(spec.read_text().replace("WrongLayer", FAMILY_LAYERS[family]))
    assert check_file(spec, select=["FS11"]).diagnostics == []


# --- selection ---------------------------------------------------------------------

@pytest.mark.parametrize(("select", "ignore", "selected"), [
    ((), (), True),
    (("FS1",), (), True),
    (("FS5",), (), False),
    ((), ("FS1",), False),
    (("FS111",), ("FS1",), True),     # the longer prefix wins
    (("FS1",), ("FS111",), False),
    (("FS1",), ("FS1xx",), False),    # a tie ignores; `xx` is a spelling of the prefix
    (("fs11",), (), True),
])
def test_longest_prefix_wins(select, ignore, selected) -> None:
    assert is_selected("FS111", select, ignore) is selected


def test_spec_lint_ignore_silences_a_rule(tmp_path) -> None:
    text = HEAD + """\
model: {preset: tiny-llama}
data: {seq_len: 64, global_batch_size: 1}
train: {max_steps: 10}
checkpoint: {interval_steps: 0}
lint: {ignore: [FS4xx]}
"""
    assert lint(tmp_path, text) == []
    assert lint(tmp_path, text.replace("FS4xx", "FS5")) == [(7, 30, "FS401")]


def test_cli_select_and_ignore(cli, tmp_path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(HEAD + "model: {preset: tiny-llama}\n"
                    "data: {seq_len: 64, global_batch_size: 1}\ntrain: {max_steps: 10}\n"
                    "checkpoint: {interval_steps: 0}\noptimizer: {lr: 0.5}\n")
    both = cli("validate", "--format", "concise", str(spec))
    assert [line.split()[1] for line in both.stdout.splitlines()] == ["FS401", "FS504"]
    only = cli("validate", "--format", "concise", "--select", "FS5", str(spec))
    assert [line.split()[1] for line in only.stdout.splitlines()] == ["FS504"]
    assert only.returncode == 0
    strict = cli("validate", "--strict", "--ignore", "FS504", "--format", "concise", str(spec))
    assert strict.returncode == 1 and "FS504" not in strict.stdout


def test_cli_prefix_that_matches_no_rule_is_a_usage_error(cli) -> None:
    result = cli("validate", "--ignore", "FS77", "examples/quickstart.yaml")
    assert result.returncode == 2
    assert "'FS77' matches no lint rule" in result.stderr


def test_rules_and_explain_commands(cli) -> None:
    listing = cli("rules").stdout.splitlines()
    assert [line.split()[0] for line in listing] == sorted(RULES)
    assert listing[sorted(RULES).index("FS111")].split()[1:3] == ["error", "layer-cls-not-in-model"]
    explained = cli("explain", "fs111")
    assert explained.returncode == 0
    assert explained.stdout.startswith("FS111 layer-cls-not-in-model (error): ")
    assert "FAIL:" in explained.stdout and "PASS:" in explained.stdout
    unknown = cli("explain", "FS999")
    assert unknown.returncode == 2 and "no code 'FS999'" in unknown.stderr


def test_accepted_classes_cover_what_transformers_builds() -> None:
    """No false alarm: every parameter-holding module class transformers instantiates for
    the fixture configs is accepted, and the suggested decoder layer is among them."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from fsdpspec.catalog.families import FAMILIES

    for family, layer in FAMILY_LAYERS.items():
        config = json.loads((ROOT / "tests" / "models" / family / "config.json").read_text())
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(
                transformers.AutoConfig.for_model(**config))
        built = {type(m).__name__ for m in model.modules()
                 if next(m.parameters(), None) is not None}
        assert layer in built
        assert built <= FAMILIES[config["model_type"]].module_classes(), family
