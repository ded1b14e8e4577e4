"""FS407 (input paths), FS408 (weights vs model, from safetensors headers), FS508
(tokenizer vs model vocabulary) and FS901's buffer_dtype: exact codes, positions and the
numbers in the messages, on real files."""

from __future__ import annotations

import json
import math
import shutil
import struct
from pathlib import Path

from conftest import ROOT
from fsdpspec.validate import check_file

MODELS = ROOT / "tests" / "models"
HEAD = """\
apiVersion: fsdpspec/v1
kind: TrainingJob
metadata: {name: job}
"""
DATA = "data: {seq_len: 64, global_batch_size: 8}\n"


def findings(spec: Path, *overrides: str, ignore: tuple[str, ...] = ()) -> list[tuple]:
    report = check_file(spec, list(overrides), ignore=ignore)
    return [(d.code, d.position.line, d.position.col, d.message) for d in report.diagnostics]


def write(tmp_path: Path, body: str) -> Path:
    """A spec with ``body`` (and small batches unless it says `data:` itself)."""
    spec = tmp_path / "job.yaml"
    spec.write_text(HEAD + body + ("" if "data:" in body else DATA))
    return spec


def write_safetensors(path: Path, shapes: dict[str, list[int]]) -> None:
    """A real safetensors file of float32 zeros with these tensors."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def llama_small_shapes() -> dict[str, list[int]]:
    from fsdpspec.catalog.localfiles import safetensors_shapes

    found = safetensors_shapes(MODELS / "weights-llama-small")
    assert found is not None
    return {name: list(shape) for name, shape in found.items()}


def test_each_missing_input_is_an_error_at_its_field(tmp_path: Path) -> None:
    (tmp_path / "tok-file").write_text("not a directory")
    spec = write(tmp_path, """\
model: {hf_config: ./no/config, weights: ./no/weights}
data: {source: jsonl, path: no/data.jsonl, tokenizer: tok-file, seq_len: 64}
""")
    # `./no/config`, not `no/config`: a bare `org/name` that is no local path is a Hub id.
    found = [(code, line, col) for code, line, col, _ in findings(spec)]
    assert found == [("FS407", 4, 20), ("FS407", 4, 42), ("FS407", 5, 29), ("FS407", 5, 55)]
    messages = [m for *_, m in findings(spec)]
    assert messages[0].startswith("model.hf_config: ") and "does not exist" in messages[0]
    assert messages[3].endswith("tok-file is not a directory")


def test_a_symlink_loop_is_named_as_one_not_as_missing(tmp_path: Path) -> None:
    """ELOOP used to read "does not exist" (Path.exists() is False for a loop)."""
    (tmp_path / "a.jsonl").symlink_to(tmp_path / "b.jsonl")
    (tmp_path / "b.jsonl").symlink_to(tmp_path / "a.jsonl")
    spec = write(tmp_path, "model: {preset: tiny-llama}\n"
                 "data: {source: jsonl, path: a.jsonl, seq_len: 64, global_batch_size: 8}\n")
    assert findings(spec) == [("FS407", 5, 29, f"data.path: {tmp_path / 'a.jsonl'} is a loop of "
                               "symbolic links (ELOOP); fix the link")]


def test_missing_paths_can_be_ignored_for_another_machine(tmp_path: Path, cli) -> None:
    spec = write(tmp_path, """\
model: {hf_config: /cluster/models/llama, weights: /cluster/weights}
data: {source: text, path: /cluster/data, seq_len: 64}
lint: {ignore: [FS407]}
""")
    assert findings(spec) == []
    assert findings(spec, "lint.ignore=[]", ignore=("FS407",)) == []
    # `fsdpspec run` still refuses: its pre-flight reads the inputs.
    ran = cli("run", str(spec), cwd=tmp_path)
    assert ran.returncode == 1
    assert "model.hf_config" in ran.stderr and "/cluster/models/llama does not exist" in ran.stderr
    assert "Traceback" not in ran.stderr and not (tmp_path / "runs").exists()


def test_weights_that_match_the_model_are_clean(tmp_path: Path) -> None:
    spec = write(tmp_path, f"model: {{hf_config: {MODELS / 'llama-small'}, "
                           f"weights: {MODELS / 'weights-llama-small'}}}\n")
    assert findings(spec) == []


def test_weights_of_another_size_name_a_tensor_and_both_shapes(tmp_path: Path) -> None:
    weights = MODELS / "weights-llama-small"
    spec = write(tmp_path, f"model: {{preset: tiny-llama, weights: {weights}}}\n")
    [(code, line, col, message)] = findings(spec)
    assert (code, line, col) == ("FS408", 4, 38)
    assert "(4,824 parameters) do not match the model (115,008)" in message
    assert "[260, 8] in the files but [320, 64] for the model" in message


def test_weights_with_a_foreign_or_missing_tensor(tmp_path: Path) -> None:
    shapes = llama_small_shapes()
    shapes["model.layers.0.mlp.extra.weight"] = [2, 2]
    (tmp_path / "extra").mkdir()
    write_safetensors(tmp_path / "extra" / "model.safetensors", shapes)
    del shapes["model.layers.0.mlp.extra.weight"], shapes["model.norm.weight"]
    (tmp_path / "short").mkdir()
    write_safetensors(tmp_path / "short" / "model.safetensors", shapes)
    model = f"model: {{hf_config: {MODELS / 'llama-small'}, weights: WEIGHTS}}\n"
    extra = findings(write(tmp_path, model.replace("WEIGHTS", "extra")))
    assert [f[0] for f in extra] == ["FS408"]
    assert "1 tensor(s) are not the model's, e.g. model.layers.0.mlp.extra.weight" in extra[0][3]
    short = findings(write(tmp_path, model.replace("WEIGHTS", "short")))
    assert "missing, e.g. model.norm.weight" in short[0][3]


def test_unreadable_header_and_bin_only_weights(tmp_path: Path) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "model.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{oops")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "pytorch_model.bin").write_bytes(b"torch pickle")
    bad = findings(write(tmp_path, "model: {preset: tiny-llama, weights: bad}\n"))
    assert [f[0] for f in bad] == ["FS408"] and "header is not JSON" in bad[0][3]
    # .bin files need torch to read: validate leaves them to the run.
    assert findings(write(tmp_path, "model: {preset: tiny-llama, weights: bin}\n")) == []


def test_tokenizer_larger_than_the_model_names_both_sizes(tmp_path: Path) -> None:
    shutil.copytree(MODELS / "tokenizer-400", tmp_path / "tok")
    spec = write(tmp_path, "model: {preset: tiny-llama}\n"
                           "data: {source: corpus, tokenizer: tok, seq_len: 64}\n")
    [(code, line, col, message)] = findings(spec)
    assert (code, line, col) == ("FS508", 5, 35)
    assert message == "the tokenizer has 400 token ids but the model's vocab_size is 320"
    # Synthetic data never reads the tokenizer.
    assert findings(spec, "data.source=synthetic", ignore=("FS505",)) == []


def test_tokenizer_from_vocab_json_counts_added_tokens(tmp_path: Path) -> None:
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "vocab.json").write_text(json.dumps({f"t{i}": i for i in range(300)}))
    (tok / "added_tokens.json").write_text(json.dumps({"<pad>": 330}))
    spec = write(tmp_path, "model: {preset: tiny-llama}\n"
                           "data: {source: corpus, tokenizer: tok, seq_len: 64}\n")
    assert [f[3] for f in findings(spec)] == [
        "the tokenizer has 331 token ids but the model's vocab_size is 320"]
    (tok / "added_tokens.json").unlink()
    assert findings(spec) == []


def test_buffer_dtype_is_an_fsdp1_option(tmp_path: Path) -> None:
    spec = write(tmp_path, """\
model: {preset: tiny-llama}
fsdp:
  mixed_precision: {param_dtype: bfloat16, buffer_dtype: bfloat16}
""")
    [(code, line, col, message)] = findings(spec)
    assert (code, line, col) == ("FS901", 6, 58)
    assert message == ("fsdp.mixed_precision.buffer_dtype is an FSDP1 option; fsdp.version 2 "
                       "ignores it")
    assert findings(spec, "fsdp.version=1") == []
    # The bf16 shorthand names no buffer dtype of its own: nothing to warn about.
    shorthand = write(tmp_path, "model: {preset: tiny-llama}\nfsdp: {mixed_precision: bf16}\n")
    assert findings(shorthand) == []


def test_fs408_work_is_bounded_by_the_files_not_the_layer_count(tmp_path: Path) -> None:
    """A config asking for 2^31 - 1 layers: the headers are compared by lookup, never by
    listing the model's 19 billion tensor names (which took minutes)."""
    shutil.copytree(MODELS / "llama-small", tmp_path / "cfg")
    config = json.loads((tmp_path / "cfg" / "config.json").read_text())
    config["num_hidden_layers"] = 2**31 - 1
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(config))
    shutil.copytree(MODELS / "weights-llama-small", tmp_path / "w")
    found = [f for f in findings(write(tmp_path, "model: {hf_config: cfg, weights: w}\n"))
             if f[0] == "FS408"]
    # 3 tensors outside the layers (embeddings, norm, lm_head) and 9 in each Llama layer.
    missing = 3 + 9 * (2**31 - 1) - len(llama_small_shapes())
    assert found and found[0][1:3] == (4, 34), found
    assert f": {missing} of the model's tensors are missing, e.g. model.layers." in found[0][3]
