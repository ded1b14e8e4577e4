"""`fsdpspec run` refuses, before any process starts, a job that cannot read its inputs,
cannot write its run directory, has no room on disk for one checkpoint, or whose run
directory another `fsdpspec run` holds: one line, exit 1, nothing written. Real files,
a real read-only filesystem (/proc), the real disk, a real lock holder."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli

HEAD = """\
apiVersion: fsdpspec/v1
kind: TrainingJob
metadata: {name: preflight}
resources: {gpus_per_node: 2, accelerator: cpu, host_memory_gib: 8}
"""
TINY = "model: {preset: tiny-llama}\n"
CORPUS = "data: {source: corpus, seq_len: 32, micro_batch_size: 1, global_batch_size: 4}\n"
TRAIN = "train: {max_steps: 2}\ncheckpoint: {interval_steps: 1}\n"
# validate reports missing inputs first (FS407); a spec written for another machine
# ignores FS407, and the pre-flight still refuses.
PAST_FS407 = ("--set", "lint.ignore=[FS407]")


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def refused(tmp_path: Path, text: str, *args: str) -> str:
    """Write job.yaml, run it, check the refusal left nothing behind; its error line."""
    (tmp_path / "job.yaml").write_text(text)
    before = tree(tmp_path)
    result = run_cli("run", "job.yaml", *args, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert tree(tmp_path) == before
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: "), result.stderr
    return last.removeprefix("Error: ")


def test_missing_data_file_is_named_with_its_position(tmp_path: Path) -> None:
    data = "data: {source: jsonl, path: train.jsonl, seq_len: 32, global_batch_size: 4}\n"
    assert refused(tmp_path, HEAD + TINY + data + TRAIN, *PAST_FS407) == (
        f"job.yaml:6:29: data.path: {tmp_path / 'train.jsonl'} does not exist")


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is not None,
                    reason="tensorboard is installed here")
def test_a_package_the_settings_need_is_missing(tmp_path: Path) -> None:
    """validate says it (FS411); a spec that ignores FS411 is refused again at the start."""
    logging = "logging: {tensorboard: true}\n"
    assert refused(tmp_path, HEAD + TINY + CORPUS + TRAIN + logging,
                   "--set", "lint.ignore=[FS411]") == (
        "job.yaml:9:24: logging.tensorboard needs the tensorboard package, which is not "
        "installed (pip install tensorboard)")


def test_an_explicit_resume_checkpoint_must_exist(tmp_path: Path) -> None:
    resume = "checkpoint: {interval_steps: 1, resume: runs/old/step-00000004}\n"
    assert refused(tmp_path, HEAD + TINY + CORPUS + "train: {max_steps: 2}\n" + resume) == (
        "job.yaml:8:41: checkpoint.resume: runs/old/step-00000004 does not exist")


def test_weights_that_are_a_file_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "weights.safetensors").write_bytes(b"")
    model = "model: {preset: tiny-llama, weights: weights.safetensors}\n"
    assert refused(tmp_path, HEAD + model + CORPUS + TRAIN, *PAST_FS407) == (
        f"job.yaml:5:38: model.weights: {tmp_path / 'weights.safetensors'} is not a directory")


def test_tokenizer_behind_a_dangling_link(tmp_path: Path) -> None:
    (tmp_path / "tok").symlink_to(tmp_path / "gone")
    data = "data: {source: corpus, tokenizer: tok, seq_len: 32, global_batch_size: 4}\n"
    # A dangling link resolves to its target when the spec's paths are made absolute.
    assert refused(tmp_path, HEAD + TINY + data + TRAIN, *PAST_FS407) == (
        f"job.yaml:6:35: data.tokenizer: {tmp_path / 'gone'} does not exist")


def test_run_directory_below_a_file(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a file, not a directory\n")
    assert refused(tmp_path, HEAD + TINY + CORPUS + TRAIN, "--set",
                   "checkpoint.dir=notes.txt/runs") == (
        f"run directory {tmp_path / 'notes.txt/runs'} cannot be created: "
        f"{tmp_path / 'notes.txt'} is not a directory")


def test_run_directory_on_a_read_only_filesystem(tmp_path: Path) -> None:
    """/proc takes no new files, even from root (permission bits would say yes)."""
    message = refused(tmp_path, HEAD + TINY + CORPUS + TRAIN, "--set",
                      "checkpoint.dir=/proc/fsdpspec-test/{name}")
    assert message.startswith("run directory /proc/fsdpspec-test/preflight is not writable: "
                              "cannot create a file in /proc ("), message


BIG = """\
apiVersion: fsdpspec/v1
kind: TrainingJob
metadata: {name: big}
resources: {nodes: 64, gpus_per_node: 8, accelerator: H100-80GB, host_memory_gib: 4096}
model: {preset: llama3.1-405b}
fsdp: {mixed_precision: bf16, activation_checkpointing: full}
data: {source: synthetic, seq_len: 4096, global_batch_size: 512}
optimizer: {lr: 1.0e-4}
train: {max_steps: 1000}
checkpoint: {interval_steps: 100}
launch: {rdzv_endpoint: "node-0:29500"}
"""
# 405.9e9 parameters × 12 bytes (fp32 weights + AdamW's two fp32 states) ≈ 4536 GiB.
BIG_CHECKPOINT_GIB = 405.9e9 * 12 / 2**30


def test_no_room_for_one_checkpoint(tmp_path: Path) -> None:
    """A valid 512-GPU job whose sharded checkpoint (~4.4 TiB) the disk cannot hold."""
    if shutil.disk_usage(tmp_path).free > BIG_CHECKPOINT_GIB * 2**30:
        pytest.skip("this disk has room for a 405B checkpoint")
    message = refused(tmp_path, BIG)
    match = re.fullmatch(rf"run directory {tmp_path / 'runs' / 'big'} has [\d.]+ GiB free; one "
                         r"checkpoint of this job needs ([\d.]+) GiB", message)
    assert match, message
    assert float(match[1]) == pytest.approx(BIG_CHECKPOINT_GIB, rel=0.01)


# Holds a run directory's lock, as a running `fsdpspec run` does: argv = job file, run dir.
HOLDER = """
import sys, time
from pathlib import Path
from fsdpspec_runners.local.runlock import run_lock
from fsdpspec.validate import check_file

with run_lock(check_file(Path(sys.argv[1])).spec, Path(sys.argv[2])):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_held_run_directory_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    """A live holder of the lock: refused, its pid named, nothing written. Once the holder
    is SIGKILLed its lock file stays behind, and the next run takes it over."""
    from fsdpspec.validate import check_file
    from fsdpspec_runners.local.runlock import lock_path, run_lock

    job = tmp_path / "job.yaml"
    job.write_text(HEAD + TINY + CORPUS + TRAIN)
    spec, run_dir = check_file(job).spec, tmp_path / "runs" / "preflight"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(job), str(run_dir)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        result = run_cli("run", "job.yaml", cwd=tmp_path)
        assert result.returncode == 1
        assert result.stderr.strip().splitlines()[-1] == (
            f"Error: {run_dir} is in use by another `fsdpspec run` (pid {holder.pid}): "
            "wait for it to finish, or stop it")
        assert [p.name for p in run_dir.iterdir()] == [lock_path(spec, run_dir).name]
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    stale = lock_path(spec, run_dir)
    assert stale.read_text().split()[0] == str(holder.pid)  # left behind by the kill
    with run_lock(spec, run_dir):
        assert stale.read_text().split()[0] == str(os.getpid())
    assert list(run_dir.iterdir()) == []  # released: the lock file goes with it
