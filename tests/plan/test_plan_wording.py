"""`fsdpspec plan` does not contradict itself: the fewest GPUs count whole nodes and keep
the wanted headroom, and say what single GPUs would hold; the suggestion lines read."""

from __future__ import annotations

from pathlib import Path

SPEC = """\
apiVersion: fsdpspec/v1
kind: TrainingJob
metadata: {name: wording}
resources: {gpus_per_node: 4, accelerator: H100-80GB}
model: {preset: llama3.2-1b}
data: {seq_len: 2048, global_batch_size: 8}
"""


def test_fewest_gpus_explains_whole_nodes(cli, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    out = cli("plan", str(spec)).stdout
    assert "device: fits:" in out
    assert ("fewest H100-80GB that fit: 4 (1 whole node of 4, keeping 10% headroom; "
            "1 GPU alone would hold it)") in out
    assert ("no accumulation: no sharded gradients are carried between micro-batches "
            "(changes the effective batch size)") in out
    assert "so no the" not in out
