"""`fsdpspec import axolotl` of LoRA and QLoRA configs: what peft is handed becomes the
`peft` section; an adapter the section cannot say is refused at its key's line (FS051);
and `lora_target_linear` is the family's projections, checked on the models transformers
builds."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsdpspec.catalog.families import FAMILIES
from fsdpspec.catalog.presets import preset_config
from fsdpspec.cli.main import cli
from fsdpspec.convert.axolotl_lora import LINEAR_ROUTERS
from fsdpspec.validate import check_file

HEAD = "base_model: mistralai/Mistral-7B-v0.1\nfsdp_version: 2\nfsdp_config:\n" \
       "  reshard_after_forward: true\nbf16: true\nmicro_batch_size: 1\n"  # lines 1-6


def _import(tmp_path: Path, text: str, *extra: str):
    source = tmp_path / "axolotl.yaml"
    source.write_text(HEAD + text)
    out = tmp_path / "job.yaml"
    result = CliRunner().invoke(cli, ["import", "axolotl", str(source), "-o", str(out),
                                      *extra])
    return source, out, result


def test_lora_keys_are_the_peft_section_and_the_job_validates(tmp_path: Path) -> None:
    _, out, result = _import(tmp_path, (
        "adapter: lora\nlora_r: 16\nlora_alpha: 32\nlora_dropout: 0.1\n"
        "lora_target_modules:\n  - q_proj\n  - v_proj\nlora_modules_to_save:\n  - lm_head\n"
        "lora_fan_in_fan_out:\nlora_model_dir:\n"))
    assert result.exit_code == 0, result.output
    report = check_file(out)
    peft = report.spec.peft
    assert (peft.method, peft.r, peft.alpha, peft.dropout, peft.target_modules,
            peft.modules_to_save) == ("lora", 16, 32.0, 0.1, ["q_proj", "v_proj"], ["lm_head"])
    assert "# from lora_r (line 8)" in out.read_text()
    assert [d.code for d in report.diagnostics if d.is_error] == []


def test_rslora_is_its_scale_as_alpha_over_r(tmp_path: Path) -> None:
    _, out, result = _import(tmp_path, "adapter: lora\nlora_r: 16\nlora_alpha: 8\n"
                             "lora_target_linear: true\npeft_use_rslora: true\n")
    assert result.exit_code == 0, result.output
    peft = check_file(out).spec.peft
    # rsLoRA multiplies the adapter by alpha/√r; the spec by alpha/r.
    assert peft.alpha / peft.r == pytest.approx(8 / math.sqrt(16))
    assert "rsLoRA scales by alpha/√r" in out.read_text()


def test_target_linear_is_the_family_projections_plus_named_extras(tmp_path: Path) -> None:
    _, out, result = _import(tmp_path, "adapter: lora\nlora_r: 8\nlora_alpha: 16\n"
                             "lora_target_linear: true\nlora_target_modules:\n  - lm_head\n")
    assert result.exit_code == 0, result.output
    assert check_file(out).spec.peft.target_modules == [*FAMILIES["mistral"].lora_targets,
                                                        "lm_head"]


@pytest.mark.parametrize(("text", "line", "feature"), [
    ("peft_use_dora: true\n", 11, "peft_use_dora True (DoRA, weight-decomposed adapters)"),
    ("lora_fan_in_fan_out: true\n", 11, "lora_fan_in_fan_out True (adapters on transposed"),
    ("peft_layers_to_transform: [0, 1]\n", 11, "peft_layers_to_transform … (adapters on some"),
    ("lora_model_dir: ./old-adapter\n", 11, "lora_model_dir ./old-adapter (training on from"),
    ("peft_init_lora_weights: pissa\n", 11, "peft_init_lora_weights pissa (an adapter init"),
    ("loraplus_lr_ratio: 16\n", 11, "loraplus_lr_ratio 16 (LoRA+"),
])
def test_an_adapter_the_section_cannot_say_is_refused_at_its_line(
        tmp_path: Path, text: str, line: int, feature: str) -> None:
    source, out, result = _import(tmp_path, "adapter: lora\nlora_r: 8\nlora_alpha: 16\n"
                                  "lora_target_linear: true\n" + text)
    assert result.exit_code == 1 and not out.exists()
    assert result.output.strip().startswith(f"{source}:{line}: FS051 {feature}"), result.output
    assert result.output.strip().endswith("the spec cannot say this yet; nothing imported")


def test_a_string_target_is_the_regular_expression_peft_full_matches(tmp_path: Path) -> None:
    """peft full-matches a string lora_target_modules against each module's path: it is
    carried as written; one that matches no module stops the import at its line."""
    from fsdpspec.validate import check_file

    regex = r"model\.layers\.\d+\.self_attn\.(q|v)_proj"
    _, out, result = _import(tmp_path, "adapter: lora\nlora_r: 8\nlora_alpha: 16\n"
                             f"lora_target_modules: '{regex}'\n")
    assert result.exit_code == 0, result.output
    report = check_file(out)
    assert report.spec.peft.target_modules == regex
    assert [d.code for d in report.diagnostics if d.severity.value == "error"] == []
    assert [name for name, _ in report.job.adapters.linears] == ["q_proj", "v_proj"]
    (tmp_path / "bad").mkdir()
    source, out, result = _import(tmp_path / "bad", "adapter: lora\nlora_r: 8\n"
                                  "lora_alpha: 16\nlora_target_modules: q_proj\n")
    assert result.exit_code == 1 and not out.exists()
    assert result.output == (f"{source}:10: FS140 lora_target_modules (peft.target_modules "
                             "'q_proj'): peft.target_modules 'q_proj' (a regular expression) "
                             "matches no module of Mistral models; nothing imported\n")


def test_target_parameters_are_carried(tmp_path: Path) -> None:
    """lora_target_parameters (peft's target_parameters) alone is a LoRA of those
    parameters; a non-list is one FS052 line."""
    source, out, result = _import(tmp_path, "adapter: lora\nlora_r: 8\nlora_alpha: 16\n"
                                  "lora_target_parameters:\n  - mlp.down_proj.weight\n")
    assert result.exit_code == 0, result.output
    from fsdpspec.validate import check_file

    report = check_file(out)
    assert report.spec.peft.target_parameters == ["mlp.down_proj.weight"]
    assert report.spec.peft.target_modules == [] and report.job.lora_targets == ()
    (tmp_path / "bad").mkdir()
    source, out, result = _import(tmp_path / "bad", "adapter: lora\nlora_r: 8\n"
                                  "lora_alpha: 16\nlora_target_linear: true\n"
                                  "lora_target_parameters: 3\n")
    assert result.exit_code == 1 and not out.exists()
    assert result.output.startswith(f"{source}:11: FS052 lora_target_parameters is not a list "
                                    "of parameter names"), result.output


def test_no_target_or_no_alpha_is_one_line_each(tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, "adapter: lora\nlora_r: 8\nlora_alpha: 16\n")
    assert result.exit_code == 1 and not out.exists()
    assert result.output.startswith(f"{source}:7: FS052 adapter lora with neither "
                                    "lora_target_modules, lora_target_linear nor "
                                    "lora_target_parameters")
    source, out, result = _import(tmp_path, "adapter: lora\nlora_r: 0\n"
                                  "lora_target_linear: true\n")
    assert result.exit_code == 1 and not out.exists()
    assert result.output.splitlines() == [
        f"{source}:7: FS052 adapter lora without lora_alpha (peft stops on it); nothing "
        "imported", f"{source}:8: FS052 lora_r 0 is not a rank; nothing imported"]


def test_target_linear_on_a_model_with_a_linear_router_is_refused(tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, "adapter: lora\nlora_r: 8\nlora_alpha: 16\n"
                                  "lora_target_linear: true\n", "--preset", "tiny-phimoe")
    assert result.exit_code == 1 and not out.exists()
    assert result.output.startswith(f"{source}:10: FS051 lora_target_linear on a model "
                                    "phimoe, whose router is a linear layer")


def test_lora_keys_without_an_adapter_are_notes(tmp_path: Path) -> None:
    source, out, result = _import(tmp_path, "lora_r: 8\nlora_target_linear: true\n")
    assert result.exit_code == 0 and check_file(out).spec.peft is None
    assert f"{source}:7: lora_r: no adapter is set, so axolotl trains none" in result.output
    assert f"{source}:8: lora_target_linear: no adapter is set" in result.output


def test_qlora_in_fp4_is_refused_at_its_source_line(tmp_path: Path) -> None:
    """FSDP2 trains QLoRA on NF4 only: `validate` would refuse fp4 (FS314), so the import
    stops at the source key it came from and writes nothing."""
    source, out, result = _import(tmp_path, "adapter: qlora\nlora_r: 8\nlora_alpha: 16\n"
                                  "load_in_4bit: true\nlora_target_linear: true\n"
                                  "bnb_config_kwargs:\n"
                                  "  bnb_4bit_quant_type: fp4\n  llm_int8_threshold: 6.0\n")
    line = next(n for n, text in enumerate(source.read_text().splitlines(), 1)
                if text.startswith("bnb_config_kwargs"))
    assert result.exit_code == 1 and not out.exists(), result.output
    assert result.output.startswith(
        f"{source}:{line}: FS314 bnb_config_kwargs bnb_4bit_quant_type "
        "(peft.quantization.quant_type 'fp4'): "
        "peft.quantization.quant_type fp4 is not built by the engine"), result.output
    assert result.output.rstrip().endswith("; nothing imported")


def test_4bit_without_qlora_and_qlora_without_4bit_are_refused(tmp_path: Path) -> None:
    source, _, result = _import(tmp_path, "adapter: lora\nload_in_4bit: true\n"
                                "lora_target_linear: true\n")
    assert result.exit_code == 1
    assert f"{source}:8: FS050 load_in_4bit True (a 4-bit quantized base model)" in (
        result.output)
    source, _, result = _import(tmp_path, "adapter: qlora\nlora_target_linear: true\n")
    assert result.exit_code == 1
    assert f"{source}:7: FS052 adapter qlora without load_in_4bit: true" in result.output


def test_trainer_adamw_torch_8bit_is_int8_states_under_fsdp2_only(tmp_path: Path) -> None:
    fsdp2 = tmp_path / "fsdp2.json"
    fsdp2.write_text('{"fsdp": "full_shard auto_wrap", "optim": "adamw_torch_8bit",\n'
                     ' "fsdp_config": {"fsdp_version": 2},\n'
                     ' "model_name_or_path": "meta-llama/Llama-3.2-1B", "max_steps": 5}\n')
    out = tmp_path / "job.yaml"
    result = CliRunner().invoke(cli, ["import", "trainer", str(fsdp2), "-o", str(out)])
    assert result.exit_code == 0, result.output
    optimizer = check_file(out).spec.optimizer
    assert (optimizer.name, optimizer.state_dtype) == ("adamw", "int8")
    # The Trainer's default FSDP1 keeps no int8 state (FS551): refused at the optim line.
    fsdp1 = tmp_path / "args.json"
    fsdp1.write_text('{"fsdp": "full_shard auto_wrap", "optim": "adamw_torch_8bit",\n'
                     ' "model_name_or_path": "meta-llama/Llama-3.2-1B", "max_steps": 5}\n')
    out.unlink()
    result = CliRunner().invoke(cli, ["import", "trainer", str(fsdp1), "-o", str(out)])
    assert (result.exit_code, out.exists()) == (1, False), result.output
    assert f"{fsdp1}:1: FS551 optim (optimizer.state_dtype 'int8'): optimizer.state_dtype " \
        "int8 runs under fsdp.version 2 only; nothing imported" in result.output


def test_target_linear_is_what_transformers_builds() -> None:
    """axolotl's lora_target_linear adapts every nn.Linear (and '*Linear*' class) but
    lm_head; on each registered family's model, built on the meta device, that is the
    family's projections, except where the router is a Linear (LINEAR_ROUTERS)."""
    import torch
    import transformers

    checked = set()
    for found in FAMILIES.values():
        if not found.presets:
            continue
        # One layer is enough to name a layer's modules (and builds in milliseconds).
        values = {k: v for k, v in preset_config(found.presets[-1]).items()
                  if k != "layer_types"}
        config = transformers.AutoConfig.for_model(**{**values, "num_hidden_layers": 1})
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
        linear = {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                  if isinstance(module, torch.nn.Linear) or "Linear" in type(module).__name__}
        same = linear - {"lm_head"} == set(found.lora_targets)
        assert same == (found.model_type not in LINEAR_ROUTERS), (found.model_type, linear)
        checked.add(found.model_type)
    assert LINEAR_ROUTERS <= checked and len(checked) >= 10
