"""`fsdpspec tune --measure 6` on 2 CPU processes: does the predicted order of the six
candidates it measures agree with the order they measure in? Prints the calibration,
each candidate's predicted and measured step time, and Spearman's rank correlation.

    nice -n 19 python benchmarks/tune_measure.py [--steps 4] [--rounds 2] [--keep DIR]

Target: Spearman ≥ 0.8. The job (benchmarks/tune_job/) is a 4-layer, hidden-512 Llama,
seq 256, 4 sequences per rank; the search varies activation checkpointing (none,
selective every 2nd layer, op-level, full) and the micro-batch (accumulation keeps the
global batch): 12 candidates, of which tune measures 6 predicted at least 5 % apart,
each in 2 rounds. About 10 minutes on 2 shared cores.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fsdpspec.tune.measure import spearman

JOB = Path(__file__).resolve().with_name("tune_job")
VARY = ("fsdp.activation_checkpointing", "data.micro_batch_size")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None,
                        help="work here (and keep the runs) instead of a temp dir")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="tune-measure-"))
    shutil.copytree(JOB, work, dirs_exist_ok=True)
    argv = [sys.executable, "-m", "fsdpspec", "tune", "job.yaml", "--measure", "6",
            "--steps", str(args.steps), "--rounds", str(args.rounds), "--format", "json"]
    for key in VARY:
        argv += ["--vary", key]
    done = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=False)
    print(done.stderr, end="")
    if done.returncode != 0:
        print(f"tune failed (exit {done.returncode})")
        return 1
    data = json.loads(done.stdout)
    print(f"{'rank':>4}  {'predicted s':>11}  {'CPU s':>7}  {'wall s':>7}  "
          f"{'rounds apart':>12}  --set")
    for row in data["measured"]:
        print(f"{row['rank']:>4}  {row['predicted_seconds']:>11.3f}  "
              f"{row['cpu_seconds']:>7.3f}  {row['wall_seconds']:>7.3f}  "
              f"{100 * row['round_spread']:>11.1f}%  {' '.join(row['overrides'])}")
    wall = spearman([r["predicted_seconds"] for r in data["measured"]],
                    [r["wall_seconds"] for r in data["measured"]])
    print(f"Spearman on the fastest wall-time step instead: {wall:.2f}")
    rho = data["spearman"]
    print(f"Spearman {rho:.2f} (rank 0's CPU time per step) over {len(data['measured'])} "
          "candidates (target ≥ 0.8)")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if rho >= 0.8 else 1


if __name__ == "__main__":
    sys.exit(main())
