"""Issue 42 §4: a `float8.exclude` name that keeps no Linear out of float8 is said
(FS326), as a `peft.target_modules` name is (FS140, through the same matcher), and a
float8 section that converts nothing is refused (FS327)."""

from __future__ import annotations

from pathlib import Path

from fsdpspec.validate import check_file

HEAD = """\
apiVersion: fsdpspec/v1
kind: TrainingJob
metadata: {name: job}
model: {preset: tiny-llama}
data: {seq_len: 64, global_batch_size: 8}
resources: {gpus_per_node: 2}
"""


def _found(tmp_path: Path, exclude: str) -> list[tuple[int, int, str, str]]:
    spec = tmp_path / "job.yaml"
    spec.write_text(HEAD + f"float8:\n  exclude: {exclude}\n")
    return [(d.position.line, d.position.col, d.code, d.message)
            for d in check_file(spec).diagnostics if d.is_error]


def test_names_that_match_nothing_are_said_at_their_item(tmp_path: Path) -> None:
    found = _found(tmp_path, '[lm_head, nothere, "layers\\\\.0\\\\..*", mlp]')
    assert found == [
        (8, 22, "FS326", "float8.exclude 'nothere' matches no module of tiny-llama"),
        (8, 31, "FS326", "float8.exclude 'layers\\\\.0\\\\..*' matches no module of tiny-llama "
         "(it is matched literally, as a module's path or its end, not as a regular "
         "expression)"),
        (8, 50, "FS326", "float8.exclude 'mlp' matches model.layers.*.mlp, not a Linear "
         "module of tiny-llama")]


def test_paths_suffixes_and_layer_indices_match_as_peft_matches(tmp_path: Path) -> None:
    assert _found(tmp_path, "[lm_head, model.layers.0.mlp.down_proj, self_attn.q_proj]") == []
    assert [f[2:] for f in _found(tmp_path, "[layers.99.mlp.down_proj]")] == [
        ("FS326", "float8.exclude 'layers.99.mlp.down_proj' matches no module of tiny-llama")]


def test_excluding_every_linear_is_a_float8_run_of_nothing(tmp_path: Path) -> None:
    every = "[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head]"
    assert _found(tmp_path, every) == [
        (8, 12, "FS327", "float8 converts no Linear module of tiny-llama: float8.exclude "
         "and skip_small leave none")]
