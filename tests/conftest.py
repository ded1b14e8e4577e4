"""Shared test helpers."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"
# Shared helper modules (and the factory models the engine imports) live in support/.
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "tests" / "support" / "warm_ranks"))
import warm_ranks as warm_ranks_server  # noqa: E402  (found through the line above)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the real `fsdpspec` CLI in a subprocess (as a user would)."""
    return subprocess.run(
        [sys.executable, "-m", "fsdpspec", *args], cwd=cwd or ROOT, capture_output=True,
        text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )


def shown_argv(command: str) -> list[str]:
    """The arguments of an `fsdpspec …` command as the docs show it, each one that names a
    file of the repository made absolute: the command runs in a scratch directory, where
    its run directory goes (tests/test_doc_commands.py holds the docs to these commands)."""
    program, *args = shlex.split(command)
    assert program == "fsdpspec", command
    return [str(ROOT / arg) if (ROOT / arg).is_file() else arg for arg in args]


@pytest.fixture
def cli():
    return run_cli


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`.ci/run` runs the suite on pytest-xdist workers (`--dist loadgroup`). A fixture
    of ours wider than a test (a trained run, a Slurm cluster) must be built once, so the
    tests that share one, directly or through another test's fixtures, form one group and
    run on one worker; every other test goes wherever a worker is free."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    shared = {item: _shared_fixtures(item) for item in items}
    for names in shared.values():
        for name in names[1:]:
            parent[root(name)] = root(names[0])
    for item, names in shared.items():
        if names:
            item.add_marker(pytest.mark.xdist_group(root(names[0])))
    # xdist hands out the groups first (most tests first), then single tests in this
    # order: the slow ones go first so that the last minute is short tests on every
    # worker, not one long test on one while the other core idles. Only ungrouped tests
    # move (none shares a fixture wider than a test), so no shared fixture is rebuilt.
    items[:] = sorted(items, key=lambda item: not (
        not shared[item] and item.get_closest_marker("slow") is not None))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Never silently ungrouped: if xdist stops honouring the groups above (as under
    pytest 9.2, pytest-xdist#1386), every shared fixture would be built on each worker."""
    if not getattr(session.config.option, "loadgroup", False):  # set on xdist's workers
        return
    lost = [item.nodeid for item in session.items
            if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        message = (f"--dist loadgroup is not grouping {lost[0]} (and {len(lost) - 1} more): "
                   "install the pytest that pyproject.toml names")
        print(message, file=sys.__stderr__)  # xdist shows a worker's UsageError as a bare assert
        raise pytest.UsageError(message)


# Session fixtures that each worker builds for itself (every test uses them): no group.
_PER_WORKER = ("warm_ranks",)


def _shared_fixtures(item: pytest.Item) -> list[str]:
    """The fixtures defined under tests/ that ``item`` uses and that outlive one test; a
    parametrized one by parameter too (each value is built once, wherever its tests go:
    "name=value", as xdist reads no group from a node id that ends in "]")."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    params = getattr(getattr(item, "callspec", None), "params", {})
    return sorted(
        f"{Path(defs[-1].func.__code__.co_filename).relative_to(ROOT)}::{name}"
        + (f"={params[name]}" if name in params else "")
        for name, defs in info.name2fixturedefs.items()
        if defs and defs[-1].scope != "function" and name not in _PER_WORKER
        and Path(defs[-1].func.__code__.co_filename).is_relative_to(ROOT / "tests")
    )


@pytest.fixture(scope="session", autouse=True)
def warm_ranks(tmp_path_factory) -> Iterator[Path | None]:
    """Engine ranks fork from one preloaded interpreter per test worker
    (support/warm_ranks/warm_ranks.py), which saves each rank ~4 CPU-s of imports; a rank
    that would import differently starts cold, as every rank does with
    FSDPSPEC_TEST_COLD_RANKS=1. Every Python the tests start finds the sitecustomize that
    hands a rank over; HF_HOME is the session's own (empty) cache, which also keeps the
    per-test XDG_CACHE_HOME out of what a rank imports. Yields the server's log: a line
    for each rank it forks or starts cold, and why."""
    os.environ["HF_HOME"] = str(tmp_path_factory.mktemp("hf-home"))
    if os.environ.get("FSDPSPEC_TEST_COLD_RANKS"):
        yield None
        return
    # AF_UNIX paths hold 107 bytes: a short directory of its own
    socket_dir = Path(tempfile.mkdtemp(prefix="fsdpspec-warm-"))
    log_path = tmp_path_factory.mktemp("warm-ranks") / "server.log"
    log = log_path.open("w")
    server = warm_ranks_server.start(str(socket_dir / "s"), log)
    yield log_path
    server.stdin.close()  # the server kills what is left of its ranks and ends
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()
    shutil.rmtree(socket_dir, ignore_errors=True)


@pytest.fixture(autouse=True)
def model_cache(tmp_path_factory, monkeypatch) -> Path:
    """Each test's own (empty) cache of introspected model geometries, never the user's;
    subprocesses inherit it."""
    cache = tmp_path_factory.mktemp("xdg-cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache / "fsdpspec" / "models"


def stub_slurm_bin(tmp_path: Path, srun_body: str = "") -> Path:
    """`srun` and `scontrol` that append their argv (NUL-separated, one call a line) to
    tmp_path/<name>.argv; scontrol prints four host names, srun then runs ``srun_body``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = 'printf "%s\\0" "$@" >> {out}; printf "\\n" >> {out}\n'
    (bin_dir / "srun").write_text(
        "#!/bin/bash\n" + record.format(out=tmp_path / "srun.argv") + srun_body)
    (bin_dir / "scontrol").write_text(
        "#!/bin/bash\n" + record.format(out=tmp_path / "scontrol.argv")
        + 'printf "gpu-node-07\\ngpu-node-08\\ngpu-node-09\\ngpu-node-10\\n"\n')
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    return bin_dir


def sbatch_env(tmp_path: Path, srun_body: str = "") -> dict[str, str]:
    """The environment of an sbatch script run as job 4242 with stub Slurm commands."""
    return {**os.environ, "PATH": f"{stub_slurm_bin(tmp_path, srun_body)}:{os.environ['PATH']}",
            "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu-node-[07-10]"}


def run_sbatch(script_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run an sbatch script with bash in tmp_path (the run root) against the stubs."""
    script = tmp_path / "job.sbatch"
    script.write_text(script_text)
    return subprocess.run(["bash", str(script)], capture_output=True, text=True,
                          env=sbatch_env(tmp_path), cwd=tmp_path, timeout=30)


def recorded(path: Path) -> list[str]:
    """The argv of the last call a stub recorded."""
    return recorded_calls(path)[-1]


def recorded_calls(path: Path) -> list[list[str]]:
    """Every call's argv a stub recorded, in order."""
    return [call.split("\0") for call in path.read_text().split("\0\n")[:-1]]


# Debian's Chromium, installed by .ci/run with apt; playwright only drives it.
CHROMIUM = Path("/usr/lib/chromium/chromium")
# No traffic of the browser's own (updates, safe browsing, metrics) beside the page's.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-default-apps", "--disable-sync",
    "--disable-domain-reliability", "--disable-client-side-phishing-detection",
    "--no-first-run", "--metrics-recording-only",
]
# Per chart: how many data groups it drew and how many points they hold (coordinate
# pairs of their paths plus placed markers).
_CHART_DATA_JS = """() => [...document.querySelectorAll('figure.chart')].map(f => {
  const groups = [...f.querySelectorAll('g[id^="data-"]')];
  let points = 0;
  for (const g of groups) {
    for (const p of g.querySelectorAll('path')) {
      points += ((p.getAttribute('d') || '').match(/-?\\d+(\\.\\d+)?/g) || []).length / 2;
    }
    points += g.querySelectorAll('use').length;
  }
  const box = f.querySelector('svg').getBoundingClientRect();
  return {name: f.dataset.chart, groups: groups.length, points, width: box.width,
          height: box.height, ids: groups.map(g => g.id)};
})"""


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium (the system's, through playwright)."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def view_page(browser):
    """Open an HTML file, screenshot it, and return (charts' data, requests that tried to
    leave the page, the page's text). Every request other than the file itself is
    recorded and refused."""

    def view(html: Path, screenshot: Path) -> tuple[list[dict], list[str], str]:
        url = html.resolve().as_uri()
        outside: list[str] = []
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("request", lambda r: None if r.url == url else outside.append(r.url))

        def guard(route):
            if route.request.url == url:
                route.continue_()
            else:
                route.abort()

        page.route("**/*", guard)
        try:
            page.goto(url, wait_until="load")
            page.screenshot(path=str(screenshot), full_page=True)
            return page.evaluate(_CHART_DATA_JS), outside, page.inner_text("body")
        finally:
            page.close()

    return view


def run_in_terminal(argv: list[str], cwd: Path, timeout: float,
                    env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``argv`` on a pseudo-terminal of 160 columns, as a user at a terminal would;
    returns (exit code, everything it wrote)."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    process = subprocess.Popen(argv, cwd=cwd, stdin=slave, stdout=slave, stderr=slave,
                               env={**os.environ, **(env or {}), "TERM": "xterm-256color"})
    os.close(slave)
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 1.0)[0]:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every holder of the terminal has closed it
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    return process.wait(timeout=30), output.decode("utf-8", "replace")


# The quickstart, shortened: logged every 4 steps (so the last step, 6 then 12, is
# logged only because it is the last), checkpointed every 3.
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
SHORT_RUN = ("--set", "logging.interval_steps=4", "--set", "checkpoint.interval_steps=3")
TRACKERS = ("--set", "logging.wandb.project=fsdpspec-test", "--set", "logging.wandb.mode=offline",
            "--set", "logging.mlflow.experiment=fsdpspec-test")


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> dict:
    """A real 2-process CPU run of the quickstart in two launches: 6 steps on a terminal
    with the W&B (offline) and MLflow (file store) trackers, then resumed without a
    terminal to 12 steps. Returns the run directory and both launches' output."""
    cwd = tmp_path_factory.mktemp("trained")
    # wandb keeps its settings and cache out of $HOME
    wandb_env = {"WANDB_CONFIG_DIR": str(cwd / ".wandb-config"),
                 "WANDB_CACHE_DIR": str(cwd / ".wandb-cache"), "WANDB_SILENT": "true"}
    first = [sys.executable, "-m", "fsdpspec", "run", str(QUICKSTART), *SHORT_RUN, *TRACKERS,
             "--set", "train.max_steps=6"]
    code, terminal = run_in_terminal(first, cwd, timeout=300, env=wandb_env)
    assert code == 0, terminal
    second = subprocess.run(
        [sys.executable, "-m", "fsdpspec", "run", str(QUICKSTART), *SHORT_RUN,
         "--set", "train.max_steps=12"],
        cwd=cwd, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    return {"run_dir": cwd / "runs" / "quickstart", "terminal": terminal,
            "plain": second.stdout + second.stderr}


# One 10-step FULL_SHARD fp32 run of engine_jobs.BASE (constant lr, checkpoint every 5
# steps) answers the equivalence, resume and export questions of tests/engine, and is the
# FSDP-alone reference of the tensor-parallel runs.
STRAIGHT = {"train": {"max_steps": 10}, "checkpoint": {"interval_steps": 5, "keep_last": 2}}
# NO_SHARD in full precision (it runs as DDP), checkpointed at step 2 for its resume.
NO_SHARD = {"fsdp": {"sharding_strategy": "NO_SHARD"}, "train": {"max_steps": 4},
            "checkpoint": {"interval_steps": 2, "keep_last": 0}}

# test_engine's configurations: each run covers one sharding strategy and folds in the
# orthogonal choices (precision, offload, activation checkpointing); FULL_SHARD fp32 is
# STRAIGHT.
CONFIGS = {
    "fsdp2-SHARD_GRAD_OP-bf16": {
        "fsdp": {"sharding_strategy": "SHARD_GRAD_OP", "mixed_precision": "bf16"}
    },
    # Eager attention under full checkpointing: the recomputed forward must see the same
    # shapes (a key/value cache would grow in the recomputation and break them).
    "fsdp2-NO_SHARD-cpu_offload-full_ac-eager-jsonl_local_tokenizer": {
        "model": {"preset": "tiny-llama", "attention": "eager"},
        "fsdp": {
            "sharding_strategy": "NO_SHARD",
            "cpu_offload": True,
            "activation_checkpointing": "full",
        }
    },
    "fsdp2-HYBRID_SHARD-selective_ac-factory_model": {
        "model": {
            "preset": None,
            "factory": "engine_factory:build",
            "geometry": {
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 1,
                "vocab_size": 320,
            },
        },
        "fsdp": {
            "transformer_layer_cls": ["Block"],
            "sharding_strategy": "HYBRID_SHARD",
            "shard_group_size": 1,
            "activation_checkpointing": "selective",
            "ac_every": 2,
        },
    },
    "fsdp1-transformer-tiny_qwen2": {
        "model": {"preset": "tiny-qwen2"},
        "fsdp": {"version": 1, "auto_wrap_policy": "transformer", "forward_prefetch": True},
    },
    "fsdp1-size-full_state_dict": {
        "fsdp": {
            "version": 1,
            "auto_wrap_policy": "size",
            "min_num_params": 20000,
            "state_dict_type": "FULL_STATE_DICT",
        },
        "checkpoint": {"interval_steps": 2, "keep_last": 0},
    },
}


@pytest.fixture(scope="session")
def plain_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    """The engine runs of tests/engine that nothing signals, kills or compares on peak
    memory, by name, their run directories and results, trained one after another in one
    launch (engine_jobs.torchrun_jobs): "straight" (STRAIGHT) first, "resumed" from its
    step-5 checkpoint in a run directory of its own, "no-shard" (NO_SHARD) and
    "no-shard-resumed" from its step-2 checkpoint, then each of CONFIGS; and, in the
    same launch once all succeeded, "straight-logits": the straight run's directory and
    its logits probe (engine_jobs.train_then_probe). A failed job fails the tests that read
    it and those of the jobs after it (not run)."""
    from engine_jobs import merged, train_then_probe, write_spec

    root = tmp_path_factory.mktemp("plain")

    def resumed(job: dict[str, Any], name: str, step: int) -> dict[str, Any]:
        checkpoint = root / name / "checkpoints" / f"step-{step:08d}"
        return merged(job, {"checkpoint": {"resume": str(checkpoint)}})

    jsonl = {"data": local_jsonl_and_tokenizer(root / "inputs")}
    jobs = {"straight": STRAIGHT, "resumed": resumed(STRAIGHT, "straight", 5),
            "no-shard": NO_SHARD, "no-shard-resumed": resumed(NO_SHARD, "no-shard", 2),
            **{name: merged(config, jsonl) if "jsonl_local_tokenizer" in name else config
               for name, config in CONFIGS.items()}}
    results, logits = train_then_probe(
        [write_spec(root / name, job) for name, job in jobs.items()], [(root / "straight", {})])
    return {**{name: (root / name, result) for name, result in zip(jobs, results, strict=True)},
            "straight-logits": (root / "straight", logits[0] if logits else None)}


def local_jsonl_and_tokenizer(directory: Path) -> dict[str, Any]:
    """A jsonl file and a BPE tokenizer trained here and saved as a local directory."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = [f"record {i}: the quick brown fox jumps over the lazy dog " * 4 for i in range(60)]
    directory.mkdir(parents=True)
    (directory / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    bpe.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "</s>"])
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(directory / "tokenizer")
    return {
        "source": "jsonl",
        "path": str(directory / "docs.jsonl"),
        "tokenizer": str(directory / "tokenizer"),
    }



@pytest.fixture(scope="session")
def straight_run(plain_runs: dict[str, tuple[Path, Any]]) -> Path:
    from engine_jobs import ok

    run_dir, result = plain_runs["straight"]
    assert "fsdp2 FULL_SHARD" in ok(result).stdout
    return run_dir


@pytest.fixture(scope="session")
def slurm():
    """The one real Slurm cluster of a test session, two nodes (tests/support/
    slurm_cluster.py), shared by the single-node and the two-node tests so that no two
    sets of daemons fight over ports or state; always torn down (daemons by pid, the
    nodes' namespaces deleted)."""
    from slurm_cluster import missing_tools, start_cluster, stop_cluster

    missing = missing_tools()
    if missing or os.geteuid() != 0:
        pytest.skip(f"a real Slurm needs root and {', '.join(missing) or 'its daemons'} "
                    "(.ci/run installs slurm-wlm and munge)")
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        stop_cluster(cluster)

