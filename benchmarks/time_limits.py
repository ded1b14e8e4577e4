"""Every time limit fsdpspec promises, measured here rather than asserted in tests (a
loaded CI machine must not fail a correct build):

- hostile spec inputs (a 1 MiB flat list, 80k keys, 1,000-deep flow nesting, a
  billion-laughs file): each refused within 2 s by `fsdpspec validate`, a fresh process;
- model configs with 2**31-1 layers: `fsdpspec plan` answers within 2 s;
- `plan` of llama3.1-405b on 128 GPUs: at most 0.3 s of CPU, imports included;
- `fsdpspec run examples/quickstart.yaml`: within 180 s (the README's promise; --quickstart).

    python benchmarks/time_limits.py [--quickstart]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAD = "apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: big}\n"


def hostile_specs(directory: Path) -> dict[str, Path]:
    """The inputs issue 11 names, written as files."""
    texts = {
        "flat list, 1 MiB": HEAD + "x:\n" + "- 1\n" * (((1 << 20) - 200) // 4),
        "80k keys": HEAD + "".join(f"k{i}: 1\n" for i in range(80_000)),
        "flow nesting 1000 deep": HEAD + "x: " + "[" * 1000 + "]" * 1000 + "\n",
        "billion laughs": (ROOT / "tests/cases/invalid/billion-laughs.yaml").read_text(),
    }
    paths = {}
    for index, (name, text) in enumerate(texts.items()):
        paths[name] = directory / f"hostile-{index}.yaml"
        paths[name].write_text(text)
    return paths


def huge_config(directory: Path) -> Path:
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
              "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
              "num_key_value_heads": 8, "num_hidden_layers": 2**31 - 1, "vocab_size": 128256}
    (directory / "config.json").write_text(json.dumps(config))
    spec = directory / "huge-layers.yaml"
    spec.write_text(HEAD + "model: {hf_config: config.json}\n")
    return spec


def wall(argv: list[str], cwd: Path) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, check=False)
    return time.perf_counter() - start, done.returncode


def plan_cpu_seconds() -> float:
    """CPU time of plan 405B/128 GPUs in a fresh interpreter, best of three."""
    script = (
        "import time; t = time.process_time()\n"
        "from fsdpspec.cli.main import cli\n"
        "try:\n"
        "    cli(['plan', 'examples/quickstart.yaml', '--set', 'model.preset=llama3.1-405b',"
        " '--gpus', '128', '--format', 'json'], standalone_mode=False)\n"
        "except SystemExit:\n    pass\n"
        "print(time.process_time() - t)\n"
    )
    runs = [subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                           text=True, check=False).stdout.split()[-1] for _ in range(3)]
    return min(float(r) for r in runs)


def report(label: str, seconds: float, limit: float, code: int | None = None) -> bool:
    met = seconds <= limit
    exit_code = "" if code is None else f"  exit {code}"
    print(f"{label:<40} {seconds:7.3f} s  (limit {limit:g} s){exit_code}  "
          f"{'met' if met else 'NOT met'}")
    return met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quickstart", action="store_true", help="also time a real run")
    args = parser.parse_args()
    fsdpspec = [sys.executable, "-m", "fsdpspec"]
    met = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, path in hostile_specs(work).items():
            seconds, code = wall([*fsdpspec, "validate", str(path)], work)
            met.append(report(f"validate: {name}", seconds, 2.0, code) and code == 1)
        seconds, code = wall([*fsdpspec, "plan", str(huge_config(work))], work)
        met.append(report("plan: 2**31-1 layers", seconds, 2.0, code) and code in (0, 1))
        met.append(report("plan 405B/128 GPUs (CPU time)", plan_cpu_seconds(), 0.3))
        if args.quickstart:
            seconds, code = wall([*fsdpspec, "run", str(ROOT / "examples/quickstart.yaml")],
                                 work)
            met.append(report("run examples/quickstart.yaml", seconds, 180, code) and not code)
    print(f"limits met: {sum(met)}/{len(met)}")


if __name__ == "__main__":
    main()
