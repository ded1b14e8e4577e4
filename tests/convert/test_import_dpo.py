"""`fsdpspec import axolotl` of `rl: dpo` configs (issue 46): the objective, beta, loss,
label smoothing and reference carry into `train.dpo`, a `chat_template.default` dataset
into `data.format: preference` with its fields; what the spec cannot say is refused at
its key's line (FS050), and the other RL objectives stay refused.
(The corpus's real DPO example: test_import_corpus.py; trained: tests/engine/
test_dpo_training.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from fsdpspec.cli.main import cli
from fsdpspec.validate import check_file

HEAD = ("base_model: Qwen/Qwen2.5-0.5B\nfsdp_version: 2\nbf16: true\nmicro_batch_size: 1\n"
        "rl: dpo\n"  # lines 1-5
        "datasets:\n  - path: pairs.jsonl\n    type: chat_template.default\n"
        "    field_messages: conversation\n    field_chosen: good\n    field_rejected: bad\n")
# lines 6-11; a config's own keys from line 12


def _import(tmp_path: Path, text: str, head: str = HEAD):
    source = tmp_path / "axolotl.yaml"
    source.write_text(head + text)
    (tmp_path / "pairs.jsonl").write_text(
        '{"conversation": [{"role": "user", "content": "Hi"}], '
        '"good": [{"role": "assistant", "content": "Hello"}], '
        '"bad": [{"role": "assistant", "content": "Go"}]}\n')
    out = tmp_path / "job.yaml"
    return source, out, CliRunner().invoke(cli, ["import", "axolotl", str(source), "-o",
                                                 str(out)])


def _refusals(result) -> list[str]:
    return [line for line in result.output.splitlines() if "nothing imported" in line]


def test_rl_dpo_is_the_dpo_objective_on_the_dataset_s_preference_fields(
        tmp_path: Path) -> None:
    _, out, result = _import(tmp_path, "rl_beta: 0.25\ndpo_label_smoothing: 0.1\n")
    assert result.exit_code == 0, result.output
    report = check_file(out)
    spec = report.spec
    assert (spec.train.objective, spec.train.dpo.beta, spec.train.dpo.label_smoothing,
            spec.train.dpo.loss, spec.train.dpo.reference) == ("dpo", 0.25, 0.1, "sigmoid",
                                                               "model")
    assert (spec.data.source, spec.data.path, spec.data.format, spec.data.prompt_field,
            spec.data.chosen_field, spec.data.rejected_field) == (
        "dataset", "pairs.jsonl", "preference", "conversation", "good", "bad")
    text = out.read_text()
    assert "beta: 0.25" in text and "# from rl_beta (line 12)" in text
    assert "without an adapter: TRL's reference, a frozen copy of the model" in text
    assert "assuming each record's chosen and rejected are lists of {role, content} " \
        "messages" in result.output
    assert [d.code for d in report.diagnostics if d.is_error] == []


@pytest.mark.parametrize(("text", "reference", "beta"), [
    ("adapter: lora\nlora_r: 8\nlora_alpha: 16\nlora_target_linear: true\n", "adapter", 0.1),
    ("precompute_ref_log_probs: true\ndpo_beta: 0.5\n", "precomputed", 0.5),
    ("rl_beta: 0.5\ntrl:\n  beta: 0.3\n", "model", 0.3),  # axolotl: trl.beta wins
])
def test_the_reference_is_trl_s_for_the_config(tmp_path: Path, text: str, reference: str,
                                                beta: float) -> None:
    _, out, result = _import(tmp_path, text)
    assert result.exit_code == 0, result.output
    report = check_file(out)
    assert (report.spec.train.dpo.reference, report.spec.train.dpo.beta) == (reference, beta)
    assert [d.code for d in report.diagnostics if d.is_error] == []


def test_dpo_loss_type_ipo_is_the_ipo_loss(tmp_path: Path) -> None:
    _, out, result = _import(tmp_path, "dpo_loss_type:\n  - ipo\n")
    assert result.exit_code == 0, result.output
    assert check_file(out).spec.train.dpo.loss == "ipo"


@pytest.mark.parametrize(("text", "refusal"), [
    ("dpo_use_weighting: true\n", "12: FS050 dpo_use_weighting True (WPO's weighting"),
    ("rpo_alpha: 0.5\n", "12: FS050 rpo_alpha 0.5 (RPO's NLL term"),
    ("dpo_loss_type:\n  - sigmoid\n  - sft\n", "12: FS050 dpo_loss_type ['sigmoid', 'sft'] "
                                                "(the spec's DPO losses are sigmoid and ipo"),
])
def test_a_dpo_setting_the_spec_cannot_say_is_refused_at_its_line(
        tmp_path: Path, text: str, refusal: str) -> None:
    source, out, result = _import(tmp_path, text)
    assert result.exit_code == 1 and not out.exists()
    assert [line.startswith(f"{source}:{refusal}") for line in _refusals(result)] == [True], \
        result.output


@pytest.mark.parametrize(("text", "refusal"), [
    ("dpo_loss_type: {}\n", "12: FS050 dpo_loss_type {} (the spec's DPO losses"),
    ("precompute_ref_log_probs: [1]\n", "12: FS052 precompute_ref_log_probs: [1] is not a "
                                         "boolean"),
])
def test_a_dpo_value_of_no_shape_axolotl_reads_is_one_line(tmp_path: Path, text: str,
                                                           refusal: str) -> None:
    source, out, result = _import(tmp_path, text)
    assert result.exit_code == 1 and not out.exists() and result.exception is not None
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    assert [line.startswith(f"{source}:{refusal}") for line in _refusals(result)] == [True], \
        result.output


DATASET = "    type: chat_template.default\n    field_messages: conversation\n" \
    "    field_chosen: good\n    field_rejected: bad\n"


@pytest.mark.parametrize(("dataset", "fields", "said"), [
    # axolotl resolves a type without a function to its `.default`
    ("    type: chat_template\n    field_messages: conversation\n    field_chosen: good\n"
     "    field_rejected: bad\n", ("conversation", "good", "bad"), "chat messages"),
    ("    type: passthrough\n", ("prompt", "chosen", "rejected"),
     "type passthrough hands TRL the records as they are"),
    ("", ("prompt", "chosen", "rejected"), "type none hands TRL the records as they are"),
    # a `type:` mapping is user_defined.default; formats that are the field itself
    ("    type:\n      field_prompt: question\n      field_chosen: good\n"
     "      field_rejected: bad\n      prompt_format: '{prompt}'\n"
     "      chosen_format: '{chosen}'\n", ("question", "good", "bad"),
     "a user-defined type without templates"),
])
def test_a_dpo_dataset_type_whose_records_are_preference_records_is_read(
        tmp_path: Path, dataset: str, fields: tuple[str, str, str], said: str) -> None:
    _, out, result = _import(tmp_path, "", HEAD.replace(DATASET, dataset))
    assert result.exit_code == 0, result.output
    data = check_file(out).spec.data
    assert (data.format, data.prompt_field, data.chosen_field, data.rejected_field) == (
        "preference", *fields)
    assert said in result.output


@pytest.mark.parametrize(("dataset", "refusal"), [
    ("    type: chatml.intel\n", "FS050 datasets[0] type chatml.intel (a DPO dataset type "
                                 "that rewrites the records: axolotl's chatml.*, llama3.*"),
    ("    type: llama3.argilla\n", "FS050 datasets[0] type llama3.argilla (a DPO dataset"),
    ("    type: chatml.prompt_pairs\n", "FS050 datasets[0] type chatml.prompt_pairs (a DPO"),
    ("    type:\n      prompt_format: '[INST] {prompt} [/INST]'\n",
     "FS050 datasets[0] type {prompt_format: '[INST] {prompt} [/INST]'} (a template around "
     "the record's field"),
    ("    type: user_defined.default\n", "FS052 datasets[0] type user_defined.default: "
                                         "axolotl reads a user-defined type's fields from a"),
])
def test_a_dpo_dataset_type_the_spec_does_not_read_is_refused_at_its_line(
        tmp_path: Path, dataset: str, refusal: str) -> None:
    source, out, result = _import(tmp_path, "", HEAD.replace(DATASET, dataset))
    assert result.exit_code == 1 and not out.exists()
    assert [line.startswith(f"{source}:6: {refusal}")
            for line in _refusals(result)] == [True], result.output


def test_dpo_without_a_dataset_is_refused_for_its_data(tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, "", HEAD.split("datasets:")[0])
    assert result.exit_code == 1 and not out.exists()
    assert [line.startswith(f"{source}:5: FS560 rl (train.objective 'dpo'): train.objective "
                            "dpo needs data.format preference, not text")
            for line in _refusals(result)] == [True], result.output


def test_the_other_rl_objectives_stay_refused(tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, "", HEAD.replace("rl: dpo", "rl: kto"))
    assert result.exit_code == 1 and not out.exists()
    assert [line.startswith(f"{source}:5: FS050 rl kto (KTO training")
            for line in _refusals(result)] == [True], result.output
