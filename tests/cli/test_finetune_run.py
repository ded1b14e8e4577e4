"""The README's fine-tune flow through `fsdpspec run` itself (not torchrun): a
`data.source: dataset` spec whose training data is a local directory (its split named by
its file names) and whose evaluation data is a single file. One run answers both: one
process, a tiny preset, 2 steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("datasets")

from conftest import run_cli  # noqa: E402

SPEC = """\
apiVersion: fsdpspec/v1
kind: TrainingJob
metadata: {name: readme-sft}
resources: {gpus_per_node: 1, accelerator: cpu, host_memory_gib: 8}
model: {preset: tiny-llama}
fsdp: {mixed_precision: fp32}
data:
  source: dataset
  path: chats
  format: text
  seq_len: 32
  global_batch_size: 2
  micro_batch_size: 2
  eval: {path: held-out.jsonl}
train: {max_steps: 2, eval_interval_steps: 2}
checkpoint: {interval_steps: 0, final: {dtype: float32}}
logging: {interval_steps: 1}
"""


def _records(file: Path, count: int) -> None:
    file.write_text("".join(json.dumps({"text": f"record {i} " * 8}) + "\n"
                            for i in range(count)))


pytestmark = pytest.mark.slow


def test_fsdpspec_run_trains_a_local_dataset_directory_and_file(tmp_path: Path) -> None:
    (tmp_path / "chats").mkdir()
    _records(tmp_path / "chats" / "train.jsonl", 16)
    _records(tmp_path / "held-out.jsonl", 4)
    (tmp_path / "job.yaml").write_text(SPEC)
    done = run_cli("run", "job.yaml", cwd=tmp_path, timeout=240,
                   env={"HF_HOME": str(tmp_path / "hf-home"), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    run_dir = tmp_path / "runs" / "readme-sft"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2]
    assert [r["step"] for r in records if "eval_loss" in r] == [2]
    assert (run_dir / "final" / "model.safetensors").is_file()
