"""`fsdpspec import trainer` of TRL's DPO launch scripts (issue 46): `trl/scripts/dpo.py`
(through `accelerate launch`, `python`, `python -m trl.scripts.dpo`) and `trl dpo` carry
DPOConfig's beta, loss, label smoothing and reference into `train.dpo`, ModelConfig's
LoRA into `peft` (the reference is then the adapter's base), and the dataset into
`data.format: preference`, over DPOConfig's own defaults, each marked; what the spec
cannot say is refused at its line, and TRL's other objectives stay refused.
(The imported docs script trains 2 steps: tests/engine/test_dpo_training.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT, run_cli
from fsdpspec.cli.main import cli
from fsdpspec.validate import check_file

SCRIPTS = ROOT / "tests" / "convert" / "trl_dpo"
# accelerate launch … trl/scripts/dpo.py, then one argument a line (lines 2-3 name the
# dataset and the model); a case's own arguments start at line 4.
HEAD = ("accelerate launch --num_processes 2 trl/scripts/dpo.py \\\n"
        "    --dataset_name pairs.jsonl \\\n"
        "    --model_name_or_path Qwen/Qwen2.5-0.5B \\\n")


def _import(tmp_path: Path, arguments: list[str], head: str = HEAD):
    source = tmp_path / "dpo.sh"
    source.write_text(head + "".join(f"    {a} \\\n" for a in arguments) + "\n")
    (tmp_path / "pairs.jsonl").write_text('{"prompt": "Hi", "chosen": " Hello", '
                                          '"rejected": " Go"}\n')
    out = tmp_path / "job.yaml"
    result = CliRunner().invoke(cli, ["import", "trainer", str(source), "-o", str(out)])
    return source, out, result


def _refusals(result) -> list[str]:
    return [line for line in result.output.splitlines() if "nothing imported" in line]


def _validated(path: Path) -> list[str]:
    """`fsdpspec validate` of a written spec, as a user runs it: its error lines."""
    result = run_cli("validate", str(path), "--format", "concise")
    assert "Traceback" not in result.stderr, result.stderr
    return [line for line in result.stdout.splitlines() if " error " in line]


def test_the_docs_dpo_launch_imports_with_its_assumptions_marked(tmp_path: Path) -> None:
    out = tmp_path / "job.yaml"
    source = SCRIPTS / "accelerate-multi-gpu.sh"
    result = run_cli("import", "trainer", str(source), "-o", str(out))
    assert result.returncode == 0, result.stderr
    spec = check_file(out).spec
    assert (spec.train.objective, spec.train.dpo.beta, spec.train.dpo.loss,
            spec.train.dpo.reference) == ("dpo", 0.1, "sigmoid", "model")
    assert (spec.data.source, spec.data.path, spec.data.format, spec.data.seq_len) == (
        "dataset", "trl-lib/ultrafeedback_binarized", "preference", 1024)
    assert (spec.optimizer.lr, spec.data.micro_batch_size, spec.data.global_batch_size,
            spec.fsdp.activation_checkpointing, spec.fsdp.mixed_precision.param_dtype) == (
        5e-7, 2, 2 * 8 * 8, "full", "bfloat16")
    text = out.read_text()
    for marked in ("beta: 0.1                       # not in the source: TRL's default beta",
                   "# not in the source: DPOConfig's default max_length",
                   "# not in the source: DPOConfig's bf16, true where fp16 is not set",
                   "# assumed: qwen2.5-7b stands in for a Qwen2 model of its family (dense): "
                   "Qwen/Qwen2-0.5B-Instruct"):
        assert marked in text, marked
    said = result.stderr
    assert f"{source}:2: --dataset_name trl-lib/ultrafeedback_binarized: imported as " \
        "data.format preference, assuming each record holds a prompt, a chosen and a " \
        "rejected completion" in said
    assert "not on this machine or in the Hugging Face cache: fetch it, or --set " \
        "data.path to a local preference file" in said
    assert f"{source}:3: --model_name_or_path Qwen/Qwen2-0.5B-Instruct is not a preset" in said
    # The stand-in (7B for a 0.5B model) is the one refusal: the memory of a model the
    # import assumed, which it said (issue 42's rule).
    assert [line.split()[1] for line in _validated(out)] == ["FS201"]
    assert "the model qwen2.5-7b does not fit 8 × H100-80GB as configured" in said


def test_the_docs_lora_launch_is_an_adapter_run_against_its_base(tmp_path: Path) -> None:
    out = tmp_path / "job.yaml"
    result = run_cli("import", "trainer", str(SCRIPTS / "accelerate-multi-gpu-lora.sh"),
                     "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert _validated(out) == []
    spec = check_file(out).spec
    peft = spec.peft
    assert (peft.method, peft.r, peft.alpha, peft.dropout, peft.target_modules) == (
        "lora", 32, 16.0, 0.05, ["q_proj", "v_proj"])
    assert (spec.train.dpo.reference, spec.optimizer.lr, spec.train.max_steps,
            spec.fsdp.activation_checkpointing) == ("adapter", 5e-6, 1000, "full")
    text = out.read_text()
    assert "# not in the source: TRL's default lora_dropout" in text
    assert "# not in the source: peft's default targets for qwen2 (TRL's LoraConfig names " \
        "none; --use_peft, line 13)" in text
    assert "# not in the source: DPOConfig's default gradient_checkpointing true" in text


@pytest.mark.parametrize(("arguments", "expected"), [
    (["--beta 0.3", "--loss_type ipo", "--precompute_ref_log_probs"],
     {"beta": 0.3, "loss": "ipo", "reference": "precomputed"}),
    (["--label_smoothing 0.1", "--loss_type sigmoid", "--max_length 512"],
     {"label_smoothing": 0.1, "loss": "sigmoid", "seq_len": 512}),
    (["--use_peft", "--precompute_ref_log_probs True"], {"reference": "precomputed"}),
    (["--use_peft", "--lora_target_modules q_proj k_proj", "--use_rslora"],
     {"reference": "adapter", "targets": ["q_proj", "k_proj"], "alpha": 32 * 4.0}),
    (["--use_peft", "--lora_target_modules all-linear"], {"targets": ["all-linear"]}),
    # ModelConfig makes one name a string, which peft full-matches as a regular expression.
    (["--use_peft", r"--lora_target_modules '.*\.q_proj'"], {"targets": r".*\.q_proj"}),
    (["--no_gradient_checkpointing", "--fp16"], {"ac": "none", "precision": "float16"}),
    (["--learning_rate 2e-5", "--dataset_train_split train_prefs", "--dataset_streaming"],
     {"lr": 2e-5, "split": "train_prefs", "streaming": True}),
])
def test_dpoconfig_and_modelconfig_arguments_carry(tmp_path: Path, arguments: list[str],
                                                   expected: dict) -> None:
    _, out, result = _import(tmp_path, arguments)
    assert result.exit_code == 0, result.output
    spec = check_file(out).spec
    got = {"beta": spec.train.dpo.beta, "loss": spec.train.dpo.loss,
           "reference": spec.train.dpo.reference, "label_smoothing": spec.train.dpo.label_smoothing,
           "seq_len": spec.data.seq_len, "ac": spec.fsdp.activation_checkpointing,
           "precision": spec.fsdp.mixed_precision.param_dtype, "lr": spec.optimizer.lr,
           "split": spec.data.split, "streaming": spec.data.streaming,
           "targets": spec.peft and spec.peft.target_modules,
           "alpha": spec.peft and spec.peft.alpha}
    assert {key: got[key] for key in expected} == expected


@pytest.mark.parametrize("head", [
    "trl dpo \\\n    --num_processes 4 \\\n    --accelerate_config fsdp2 \\\n",
    "python -m trl.scripts.dpo \\\n    --nproc_per_node 4 \\\n    --bf16 \\\n",
    "torchrun --nproc_per_node 4 trl/scripts/dpo.py \\\n    --bf16 \\\n    --bf16 \\\n",
])
def test_each_way_of_running_the_script_is_read(tmp_path: Path, head: str) -> None:
    arguments = ["--dataset_name pairs.jsonl", "--model_name_or_path Qwen/Qwen2.5-0.5B"]
    source, out, result = _import(tmp_path, arguments, head)
    assert result.exit_code == 0, result.output
    spec = check_file(out).spec
    assert (spec.train.objective, spec.data.format, spec.model.preset) == (
        "dpo", "preference", "qwen2.5-0.5b")
    if head.startswith("trl"):
        assert spec.world_size == 4
        assert f"{source}:3: --accelerate_config fsdp2: the accelerate config is not read " \
            "here" in result.output
    if "-m trl" in head:  # python runs one process; its --nproc_per_node is the script's
        assert spec.world_size == 1


@pytest.mark.parametrize(("value", "attention"), [("sdpa", "sdpa"), ("sdpa eager", "auto")])
def test_attn_implementation_is_the_model_s_attention_or_a_note(
        tmp_path: Path, value: str, attention: str) -> None:
    source, out, result = _import(tmp_path, [f"--attn_implementation {value}"])
    assert result.exit_code == 0, result.output
    assert check_file(out).spec.model.attention == attention
    assert (f"{source}:4: --attn_implementation ['sdpa', 'eager']: the spec has eager, "
            "flash_attention_2, sdpa; not imported" in result.output) == (attention == "auto")


def test_what_trl_1_16_does_not_read_or_import_cannot_is_a_note(tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, ["--max_prompt_length 512", "--config dpo.yaml",
                                             "--dataset_config default"])
    assert result.exit_code == 0, result.output
    for line, note in ((4, "--max_prompt_length 512: not a DPOConfig argument in TRL 1.16"),
                       (5, "--config dpo.yaml: TRL's file of script arguments is not read"),
                       (6, "--dataset_config: no v1 field; not imported")):
        assert f"{source}:{line}: {note}" in result.output, note


def test_a_program_named_for_dpo_is_read_as_trl_s_script_and_said(tmp_path: Path) -> None:
    head = "accelerate launch scripts/run_dpo.py \\\n    --dataset_name pairs.jsonl \\\n"
    source, out, result = _import(tmp_path, [], head)
    assert result.exit_code == 0, result.output
    assert check_file(out).spec.train.objective == "dpo"
    assert f"{source}:1: the training program scripts/run_dpo.py: read as TRL's DPO " \
        "script (trl/scripts/dpo.py)" in result.output


@pytest.mark.parametrize(("arguments", "refusal"), [
    (["--loss_type hinge"], "4: FS050 --loss_type hinge (the spec's DPO losses are sigmoid "
                            "and ipo"),
    (["--loss_type sigmoid sft"], "4: FS050 --loss_type ['sigmoid', 'sft'] (the spec's DPO "
                                  "losses"),
    (["--max_steps 10", "--use_weighting"], "5: FS050 --use_weighting (WPO's weighting"),
    (["--rpo_alpha 1.0"], "4: FS050 --rpo_alpha 1.0 (RPO's NLL term"),
    (["--truncation_mode keep_end"], "4: FS050 --truncation_mode keep_end (the prompt's start"),
    (["--sync_ref_model True"], "4: FS050 --sync_ref_model (TR-DPO's reference"),
    (["--use_peft", "--use_dora"], "5: FS051 --use_dora (DoRA"),
    (["--use_peft", "--load_in_4bit"], "5: FS050 --load_in_4bit (TRL's QLoRA, a 4-bit "
                                       "bitsandbytes base): not read by this import yet"),
    (["--precompute_ref_log_probs maybe"], "4: FS052 --precompute_ref_log_probs: 'maybe' is "
                                           "not a boolean"),
    (["--use_peft", "--lora_r many"], "5: FS052 --lora_r: 'many' is not a whole number"),
])
def test_what_the_spec_cannot_say_is_refused_at_its_line(tmp_path: Path, arguments: list[str],
                                                         refusal: str) -> None:
    source, out, result = _import(tmp_path, arguments)
    assert result.exit_code == 1 and not out.exists()
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    assert [line.startswith(f"{source}:{refusal}") for line in _refusals(result)] == [True], \
        result.output


def test_peft_without_targets_on_a_model_peft_has_none_for_is_refused(tmp_path: Path) -> None:
    head = HEAD.replace("Qwen/Qwen2.5-0.5B", "microsoft/Phi-3-mini-4k-instruct")
    source, out, result = _import(tmp_path, ["--use_peft"], head)
    assert result.exit_code == 1 and not out.exists()
    assert [line.startswith(f"{source}:4: FS051 --use_peft without --lora_target_modules on "
                            "a model phi3 (peft has no default targets for it")
            for line in _refusals(result)] == [True], result.output


@pytest.mark.parametrize(("head", "refusal"), [
    ("trl kto \\\n", "1: FS050 trl kto (KTO training"),
    ("accelerate launch trl/scripts/orpo.py \\\n", "1: FS050 the training program "
                                                    "trl/scripts/orpo.py (ORPO training"),
    ("python -m trl.scripts.grpo \\\n", "1: FS050 the training program trl.scripts.grpo "
                                        "(GRPO training"),
    ("accelerate launch trl/scripts/reward_modeling.py \\\n", "1: FS050 the training program "
     "trl/scripts/reward_modeling.py (REWARD training, a preference, RL or reward objective"),
])
def test_trl_s_other_objectives_stay_refused(tmp_path: Path, head: str, refusal: str) -> None:
    source, out, result = _import(tmp_path, ["--beta 0.1"], head)
    assert result.exit_code == 1 and not out.exists()
    assert [line.startswith(f"{source}:{refusal}") for line in _refusals(result)] == [True], \
        result.output


def test_the_defaults_written_are_trl_s_own() -> None:
    """What the import writes where a script is silent, against TRL's dataclasses (the
    installed TRL, the test extra's referee)."""
    import dataclasses

    trl = pytest.importorskip("trl")
    from fsdpspec.convert import dpo, trl_dpo

    def default(cls: type, name: str):
        field = next(f for f in dataclasses.fields(cls) if f.name == name)
        return field.default_factory() if callable(field.default_factory) else field.default

    assert (default(trl.DPOConfig, "learning_rate"), default(trl.DPOConfig, "max_length"),
            default(trl.DPOConfig, "beta"), default(trl.DPOConfig, "loss_type"),
            default(trl.DPOConfig, "gradient_checkpointing")) == (
        trl_dpo._LEARNING_RATE, trl_dpo._MAX_LENGTH, dpo.DEFAULT_BETA, ["sigmoid"], True)
    assert {key: default(trl.ModelConfig, key) for key in trl_dpo._LORA} == {
        key: value for key, (_, value, _) in trl_dpo._LORA.items()}
    owner = {"lora_task_type": trl.ModelConfig}
    assert {key: default(owner.get(key, trl.DPOConfig), key) for key in trl_dpo._CHOICES} == {
        key: value for key, (value, _) in trl_dpo._CHOICES.items()}
