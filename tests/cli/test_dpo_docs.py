"""docs/dpo.md's run, as typed: its spec and its text records written where it says,
then each command of its console block through the `fsdpspec` CLI. The stopped run
computes the reference log-probs; the resumed one reads them back."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("datasets")

from conftest import ROOT, run_cli  # noqa: E402

DOC = (ROOT / "docs" / "dpo.md").read_text()
# Its run's console block, as shown (tests/test_doc_commands.py: run by this test).
RUN = ("fsdpspec validate dpo.yaml", "fsdpspec run dpo.yaml --set train.max_steps=2",
       "fsdpspec run dpo.yaml")


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC, flags=re.S)


def _spec(tmp_path: Path) -> None:
    (spec,) = _blocks("yaml")[1:]  # the first block shows the settings alone
    (tmp_path / "dpo.yaml").write_text(spec)


def test_plan_shows_the_references_and_offers_no_lever_dpo_refuses(tmp_path: Path) -> None:
    _spec(tmp_path)
    done = run_cli("plan", "dpo.yaml", "--set", "data.path=/dev/null", cwd=tmp_path)
    assert ("DPO: each pair runs as 2 sequences (chosen, rejected); by reference, peak "
            "allocated / device total per rank (MiB): model ") in done.stdout
    assert "precomputed (this job) " in done.stdout
    assert "--set data.micro_batch_size=1" in done.stdout  # the suggestions are there
    assert "train.loss_chunks" not in done.stdout  # FS563 refuses it under DPO


@pytest.mark.slow
def test_the_docs_dpo_run_as_typed(tmp_path: Path) -> None:
    _spec(tmp_path)
    text_record = json.loads(_blocks("json")[0].splitlines()[0])
    (tmp_path / "pairs.jsonl").write_text(json.dumps(text_record) + "\n")
    assert tuple(_blocks("console")[0].splitlines()) == RUN
    outputs = []
    for line in RUN:
        argv = shlex.split(line)
        assert argv[0] == "fsdpspec"
        done = run_cli(*argv[1:], cwd=tmp_path, timeout=300,
                       env={"HF_HOME": str(tmp_path / "hf-home"), "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, line + "\n" + done.stdout + done.stderr
        outputs.append(done.stdout)
    assert "written to" in outputs[1] and "reference log-probs: read from" in outputs[2]
    run_dir = tmp_path / "runs" / "dpo-tiny"
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all("rewards/accuracies" in r for r in records)
    assert (run_dir / "final" / "model.safetensors").is_file()
