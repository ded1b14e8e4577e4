"""axolotl's LoRA-on-experts examples (issue 45; tests/convert/peft_targets/README.md
cites them): their targets are carried as peft takes them, `lora_target_parameters` as
`peft.target_parameters` and a string `lora_target_modules` as the regular expression peft
full-matches, and no refusal of the import names a target key."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from fsdpspec.catalog.presets import preset_config
from fsdpspec.cli.main import cli
from fsdpspec.convert import axolotl_lora
from fsdpspec.convert.axolotl import _entries
from fsdpspec.convert.draft import Draft
from fsdpspec.convert.sources import read_yaml

FILES = Path(__file__).with_name("peft_targets")
EXPERTS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
GLM_REGEX = (r"model.layers.[\d]+.(self_attn.(q_a_proj|q_b_proj|kv_a_proj_with_mqa|"
             r"kv_b_proj|o_proj)|mlp.(shared_experts.)?(gate_proj|up_proj|down_proj))")
CARRIED = {
    "qwen3_30ba3b_ep_lora_4gpu.yaml": (["q_proj", "k_proj", "v_proj", "o_proj"], None),
    "m2-qlora.yaml": (None, EXPERTS),
    "glm-5.2-nvfp4-lora.yaml": (GLM_REGEX, ["experts.gate_up_proj", "experts.down_proj"]),
}


@pytest.mark.parametrize("name", CARRIED)
def test_the_targets_are_carried_as_peft_takes_them(name: str) -> None:
    entries = _entries(read_yaml(FILES / name))
    draft = Draft()
    targets = axolotl_lora.apply_adapter(entries, draft)
    assert targets is not None and draft.refusals == []
    targets.resolve(draft, preset_config("qwen3-30b-a3b"))
    assert draft.refusals == []
    modules, parameters = CARRIED[name]
    assert (draft.value("peft.target_modules"), draft.value("peft.target_parameters")) == (
        modules, parameters)


@pytest.mark.parametrize("name", ["qwen3_30ba3b_ep_lora_4gpu.yaml", "glm-5.2-nvfp4-lora.yaml"])
def test_the_import_stops_on_what_the_spec_lacks_not_on_the_targets(
        name: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["import", "axolotl", str(FILES / name), "-o",
                                      str(tmp_path / "job.yaml")])
    lines = result.output.strip().splitlines()
    print(result.output)
    assert lines and not any("lora_target" in line or "peft." in line for line in lines)
