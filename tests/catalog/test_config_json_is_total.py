"""Model config JSON (issue 11, item 3): a total reader. Every malformed config.json is
one FS030 error at model.hf_config naming the key; a huge layer count plans at once
(its time is printed by benchmarks/time_limits.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import run_cli
from fsdpspec.validate import check_file

GOOD = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 512, "max_position_embeddings": 512}
SPEC = """\
apiVersion: fsdpspec/v1
kind: TrainingJob
metadata: {name: cfg}
model: {hf_config: config.json}
data: {seq_len: 64, global_batch_size: 1}
"""

BAD_TEXT = {
    "nan": ('{"model_type": "llama", "hidden_size": NaN}', "NaN"),
    "infinity": ('{"model_type": "llama", "hidden_size": -Infinity}', "Infinity"),
    "overflowing-float": ('{"model_type": "llama", "rope_theta": 1e999}', "overflows"),
    "huge-int": ('{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}", "digits"),
    "deep": ("[" * 100_000 + "]" * 100_000, "nested deeper"),
    "deep-object": ('{"a": ' * 40 + "1" + "}" * 40, "nested deeper"),
    "not-an-object": ("[1, 2]", "JSON object"),
    "truncated": ('{"model_type": "lla', "not valid JSON"),
    "latin1": (b'{"model_type": "\xe9"}', "not valid JSON"),
}
BAD_VALUES = {
    "model_type": (["llama"], "model_type must be a string"),
    "sliding_window": ("4096", "sliding_window must be a non-negative integer"),
    "hidden_size": (0, "hidden_size must be a positive integer"),
    "num_hidden_layers": (-2, "num_hidden_layers must be a positive integer"),
    "num_key_value_heads": (3, "not a multiple of num_key_value_heads 3"),
    "tie_word_embeddings": ("yes", "tie_word_embeddings must be true or false"),
    "rope_theta": ({"a": 1}, "rope_theta must be a finite number"),
    "vocab_size": (True, "vocab_size must be a positive integer"),
}


def _problems(tmp_path: Path) -> list[tuple[str, str, int]]:
    (tmp_path / "job.yaml").write_text(SPEC)
    report = check_file(tmp_path / "job.yaml")
    return [(d.code, d.message, d.position.line) for d in report.diagnostics if d.is_error]


@pytest.mark.parametrize("case", BAD_TEXT)
def test_a_config_that_is_not_plain_json_is_fs030(case: str, tmp_path: Path) -> None:
    text, reason = BAD_TEXT[case]
    path = tmp_path / "config.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    ((code, message, line),) = _problems(tmp_path)
    assert (code, line) == ("FS030", 4) and reason in message, message


@pytest.mark.parametrize("key", BAD_VALUES)
def test_a_wrongly_typed_key_is_fs030_naming_the_key(key: str, tmp_path: Path) -> None:
    value, reason = BAD_VALUES[key]
    (tmp_path / "config.json").write_text(json.dumps(GOOD | {key: value}))
    ((code, message, line),) = _problems(tmp_path)
    assert (code, line) == ("FS030", 4) and reason in message, message


def test_a_fifo_as_config_is_fs030_and_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "config.json")
    ((code, message, _),) = _problems(tmp_path)
    assert code == "FS030" and "not a regular file" in message


@pytest.mark.parametrize("policy", ["transformer", "size", "none"])
def test_two_billion_layers_are_planned_per_layer_shape(policy: str, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(GOOD | {"num_hidden_layers": 2**31 - 1}))
    (tmp_path / "job.yaml").write_text(SPEC)
    result = run_cli("plan", "job.yaml", "--set", f"fsdp.auto_wrap_policy={policy}",
                     "--format", "json", cwd=tmp_path, timeout=60)
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr
    assert json.loads(result.stdout)["parameters"]["total"] > 2**31
