"""The JSON files `validate` reads besides the spec — tokenizer files, safetensors
headers, the Hugging Face cache's refs — are read by the one bounded reader: 100k-deep
nesting, a 5000-digit integer or a wrong type is one diagnostic at the field, and a FIFO
in their place never blocks (those run as a subprocess with a timeout)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from conftest import run_cli
from fsdpspec.validate import check_file

HEAD = """\
apiVersion: fsdpspec/v1
kind: TrainingJob
metadata: {name: job}
"""
DEEP = "[" * 100_000 + "]" * 100_000


def _findings(spec: Path) -> list[tuple[str, int, str]]:
    return [(d.code, d.position.line, d.message) for d in check_file(spec).diagnostics]


def _tokenizer_spec(tmp_path: Path, files: dict[str, str]) -> Path:
    tok = tmp_path / "tok"
    tok.mkdir()
    for name, text in files.items():
        (tok / name).write_text(text)
    spec = tmp_path / "job.yaml"
    spec.write_text(HEAD + "model: {preset: tiny-llama}\n"
                    "data: {source: corpus, tokenizer: tok, seq_len: 64, global_batch_size: 8}\n")
    return spec


TOKENIZER_FILES = {
    "deep tokenizer.json": ({"tokenizer.json": '{"model": {"vocab": ' + DEEP + "}}"},
                            "nested deeper than 32 levels"),
    "5000-digit id": ({"vocab.json": '{"a": ' + "9" * 5000 + "}"},
                      "an integer of 5000 digits is out of range"),
    "added_tokens not a list": ({"tokenizer.json": '{"model": {"vocab": {}}, "added_tokens": 5}'},
                                "added_tokens is not a list"),
    "vocab a number": ({"tokenizer.json": '{"model": {"vocab": 7}}'},
                       "model.vocab is neither"),
    "NaN": ({"added_tokens.json": '{"a": NaN}', "vocab.json": "{}"},
            "NaN is not a number JSON allows"),
}


@pytest.mark.parametrize("case", TOKENIZER_FILES)
def test_a_hostile_tokenizer_file_is_fs508_at_the_field(case: str, tmp_path: Path) -> None:
    files, reason = TOKENIZER_FILES[case]
    found = _findings(_tokenizer_spec(tmp_path, files))
    assert [(code, line) for code, line, _ in found] == [("FS508", 5)], found
    assert reason in found[0][2]


def _header(tmp_path: Path, header: bytes) -> Path:
    weights = tmp_path / "w"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    spec = tmp_path / "job.yaml"
    spec.write_text(HEAD + "model: {preset: tiny-llama, weights: w}\n"
                    "data: {seq_len: 64, global_batch_size: 8}\n")
    return spec


@pytest.mark.parametrize("header, reason", [
    (DEEP.encode(), "nested deeper than 8 levels"),
    (b'{"x": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 4]}}',
     "an integer of 5000 digits"),
    (b'{"x": {"dtype": "F32", "shape": [true], "data_offsets": [0, 4]}}', "has no shape"),
])
def test_a_hostile_safetensors_header_is_fs408(header: bytes, reason: str,
                                                tmp_path: Path) -> None:
    found = _findings(_header(tmp_path, header))
    assert [(code, line) for code, line, _ in found] == [("FS408", 4)], found
    assert reason in found[0][2]


def test_a_fifo_in_the_weights_or_the_tokenizer_never_blocks_validate(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    os.mkfifo(tmp_path / "w" / "model.safetensors")
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "vocab.json").write_text(json.dumps({"a": 1}))
    os.mkfifo(tmp_path / "tok" / "tokenizer_config.json")
    (tmp_path / "job.yaml").write_text(
        HEAD + "model: {preset: tiny-llama, weights: w}\n"
        "data: {source: dataset, path: d.jsonl, format: chat, tokenizer: tok, seq_len: 64, "
        "global_batch_size: 8}\n")
    (tmp_path / "d.jsonl").write_text('{"messages": []}\n')
    result = run_cli("validate", "--format", "concise", "job.yaml", cwd=tmp_path, timeout=30)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stdout.strip().splitlines()
    assert any(":4:" in line and "FS408" in line and "not a regular file" in line
               for line in lines), lines
    assert any(":5:" in line and "FS520" in line for line in lines), lines


def test_a_fifo_ref_in_the_hub_cache_never_blocks_validate(tmp_path: Path) -> None:
    refs = tmp_path / "hf" / "hub" / "models--acme--tiny" / "refs"
    refs.mkdir(parents=True)
    os.mkfifo(refs / "main")
    (tmp_path / "job.yaml").write_text(HEAD + "model: {preset: tiny-llama, weights: acme/tiny}\n"
                                       "data: {seq_len: 64, global_batch_size: 8}\n")
    result = run_cli("validate", "--format", "concise", "job.yaml", cwd=tmp_path, timeout=30,
                     env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "FS031" in result.stdout and ":4:" in result.stdout, result.stdout
