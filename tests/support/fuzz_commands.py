"""Fuzz channels of the commands wave 3 added (issue 29), for benchmarks/fuzz.py and the
CI slice in tests/spec/test_fuzz_channels.py: `tune -o` onto every kind of target,
`tune --calibration` files, the `peft` section's values, the lever fields `tune`
varies, and `export slurm|kubernetes|accelerate` of a multi-node spec. Each runs the
command in this process (click's runner) as a user types it; a broken promise is an
AssertionError or the command's own exception."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from fuzz_files import NAMES, OUTPUT_KINDS, _make_target, snapshot
from fuzz_specs import ODD_VALUES, ROOT, check_text, dump
from hypothesis import strategies as st

from fsdpspec.cli.main import cli
from fsdpspec.spec.load import load_file

TINY = ROOT / "tests" / "tune" / "tiny-job.yaml"
LORA = ROOT / "examples" / "lora-llama3-8b-l40s.yaml"
LEVERS_SEED = ROOT / "examples" / "llama3-8b-h100.yaml"
MULTINODE = ROOT / "examples" / "llama3-70b-multinode.yaml"
HOSTILE = st.sampled_from(["$(touch pwned)", "`touch pwned`", "a\nb: c", "x; rm -rf ~",
                           "' \"", "node0:29500\n#SBATCH --x", "\x1b[2J", "\x00", "# c",
                           "{a: 1}", "a: b", "&a [*a]", "9" * 400, "-1", "1e999"])
VALUES = st.one_of(ODD_VALUES, HOSTILE)


def _invoke(args: list[str], cwd: Path) -> Result:
    """The CLI in ``cwd``; its exit is 0, 1 or 2 and nothing escapes but SystemExit."""
    here = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, args)
    finally:
        os.chdir(here)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code in (0, 1, 2), result.exit_code
    return result


def _one_line_error(result: Result) -> None:
    """A command's refusal (not a validation report): one `Error: …` line (after
    click's usage lines for a usage error, exit 2)."""
    lines = result.stderr.strip().splitlines()
    if result.exit_code == 2:
        lines = lines[-1:] if lines[0].startswith("Usage: ") else lines
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr


# --- tune -o -------------------------------------------------------------------------

@st.composite
def tune_targets(draw) -> tuple[str, bool, str]:
    """(what the -o target is, --force, its name)."""
    return draw(st.sampled_from(OUTPUT_KINDS)), draw(st.booleans()), draw(NAMES)


def check_tune_output(example: tuple[str, bool, str], directory: Path) -> None:
    """`tune JOB -o TARGET`: the winner written to a new or (with --force) a regular
    file, or one line and everything as it was; never through a link."""
    kind, force, name = example
    target = _make_target(kind, name, directory)
    job = directory / "job.yaml"
    shutil.copyfile(TINY, job)
    before = snapshot(directory)
    result = _invoke(["tune", str(job), "--top", "1", "-o", str(target),
                      *(["--force"] if force else [])], directory)
    after = snapshot(directory)
    for kept in ("outside/real.txt", "outside/real-dir/mine.txt"):
        assert after[kept] == before[kept], kept
    if result.exit_code != 0:
        _one_line_error(result)
        assert after == before, (kind, force)
        return
    assert kind == "missing" or (kind == "file" and force), (kind, force)
    assert load_file(target).diagnostics == []


# --- tune --calibration --------------------------------------------------------------

CALIBRATION_KEYS = st.one_of(st.sampled_from(
    ["accelerator", "performance", "memory_headroom", "memory_headroom=0.5 #", "nodes",
     "accelerator.name", "performance=1", " accelerator", "accelerator\n"]), st.text(max_size=8))
GOOD_CALIBRATION = ("resources:\n  accelerator: {name: cpu-calibrated-2x1, device: cpu, "
                    "memory_gib: 8, fp32_tflops: 0.05, bf16_tflops: 0.05, fp16_tflops: 0.05, "
                    "hbm_gbps: 5.0, intra_node_gbps: 1.0, inter_node_gbps: 1.0}\n")


@st.composite
def calibrations(draw) -> tuple[str, bytes]:
    """(the file's kind, its bytes): a calibration of odd keys and values, a damaged
    good one, raw bytes; or a FIFO, a directory, a link to /dev/zero."""
    kind = draw(st.sampled_from(["file"] * 6 + ["fifo", "directory", "/dev/zero"]))
    shape = draw(st.integers(0, 2))
    if shape == 0:
        resources = draw(st.dictionaries(CALIBRATION_KEYS, VALUES, max_size=3))
        raw = dump({"resources": resources}).encode()
    elif shape == 1:  # a span of a good one replaced
        start = draw(st.integers(0, len(GOOD_CALIBRATION)))
        end = draw(st.integers(start, min(len(GOOD_CALIBRATION), start + 12)))
        inserted = draw(st.one_of(HOSTILE, st.text(max_size=6)))
        raw = (GOOD_CALIBRATION[:start] + inserted + GOOD_CALIBRATION[end:]).encode(
            "utf-8", "surrogatepass")
    else:
        raw = draw(st.binary(max_size=256))
    return kind, raw


def check_calibration(example: tuple[str, bytes], directory: Path) -> None:
    """`tune JOB --measure 1 --calibration FILE`: a refusal is one line before anything
    trains (a foreign candidate directory is planted, so that a calibration that is
    accepted stops there, not in a training run); an accepted one sets no field but
    resources.accelerator and resources.performance."""
    from fsdpspec.spec.overrides import OverrideError, apply_overrides
    from fsdpspec.tune.measure import (
        CALIBRATED_KEYS,
        MeasureError,
        calibration_overrides,
        read_calibration,
    )

    kind, raw = example
    job, path = directory / "job.yaml", directory / "cal.yaml"
    shutil.copyfile(TINY, job)
    if kind == "file":
        path.write_bytes(raw)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(kind)
    (directory / "runs" / "tune-tiny-tune" / "candidate-1").mkdir(parents=True)
    result = _invoke(["tune", "job.yaml", "--measure", "1", "--steps", "2", "--rounds",
                      "1", "--calibration", "cal.yaml"], directory)
    assert result.exit_code != 0, result.output  # nothing may have trained
    assert not (directory / "runs" / "tune-tiny-tune" / "calibration-run").exists()
    try:
        resources = read_calibration(path)
    except MeasureError as exc:
        assert "\n" not in str(exc)
        if result.exit_code == 1:  # 2: click refused the option first (a directory)
            said = str(exc).replace(str(path), "cal.yaml")  # it was given by that name
            assert result.stderr.strip() == f"Error: {said}", result.stderr
        return
    _one_line_error(result)  # the planted directory
    base, loaded = load_file(job), load_file(job)
    try:
        apply_overrides(loaded.data, calibration_overrides(resources), loaded.source_map)
    except OverrideError as exc:
        assert "\n" not in str(exc)
        return
    for data in (base.data, loaded.data):
        for key in CALIBRATED_KEYS:
            data["resources"].pop(key, None)
    assert loaded.data == base.data, resources  # no other field was set


# --- peft values and lever fields ----------------------------------------------------

PEFT_KEYS = ["method", "r", "alpha", "dropout", "target_modules", "modules_to_save",
             "quantization", "merged"]
LORA_DATA = load_file(LORA).data


@st.composite
def peft_sections(draw) -> Any:
    """The LoRA example with its `peft` section's values replaced (or it a value)."""
    data = copy.deepcopy(LORA_DATA)
    if draw(st.integers(0, 9)) == 0:
        data["peft"] = draw(VALUES)
        return data
    peft = data["peft"] if isinstance(data.get("peft"), dict) else {}
    for key in draw(st.lists(st.sampled_from(PEFT_KEYS), max_size=4)):
        peft[key] = draw(st.one_of(VALUES, st.lists(VALUES, max_size=3),
                                   st.dictionaries(st.sampled_from(
                                       ["method", "double_quant", "x"]), VALUES, max_size=2)))
    data["peft"] = peft
    return data


def check_peft(data: Any, directory: Path) -> None:
    """Validate and plan the spec: every diagnostic coded and positioned."""
    check_text(dump(data), directory / "lora.yaml")
    _invoke(["plan", "lora.yaml"], directory)


def _lever_keys() -> list[str]:
    from fsdpspec.tune.search_space import LEVER_KEYS

    return list(LEVER_KEYS)


LEVERS_DATA = load_file(LEVERS_SEED).data


@st.composite
def lever_fields(draw) -> Any:
    """The 8B example with lever fields (those `tune` varies) set to odd values or
    deleted, and a `--vary` of some."""
    data = copy.deepcopy(LEVERS_DATA)
    keys = _lever_keys()
    for key in draw(st.lists(st.sampled_from(keys), max_size=4)):
        section, _, field = key.rpartition(".")  # a whole section (float8) has no dot
        holder = data.setdefault(section, {}) if section else data
        value = draw(st.one_of(VALUES, st.integers(0, 64)))
        if draw(st.booleans()):
            holder.pop(field, None)
        elif isinstance(holder, dict):
            holder[field] = value
    return data, draw(st.lists(st.sampled_from(keys), max_size=2))


def check_levers(example: tuple[Any, list[str]], directory: Path) -> None:
    """validate, then `tune` it: diagnostics coded and positioned, tune total."""
    data, vary = example
    check_text(dump(data), directory / "job.yaml")
    _invoke(["tune", "job.yaml", "--top", "2", *(a for k in vary for a in ("--vary", k))],
            directory)


# --- export of a multi-node spec -----------------------------------------------------

MULTINODE_DATA = load_file(MULTINODE).data
LAUNCH_FIELDS = [("resources", "nodes"), ("resources", "gpus_per_node"),
                 ("launch", "rdzv_endpoint"), ("launch", "max_restarts"),
                 ("launch", "env"), ("launch", "backend"), ("launch", "timeout_minutes"),
                 ("slurm", "partition"), ("slurm", "account"), ("slurm", "time"),
                 ("slurm", "setup"), ("slurm", "container"), ("kubernetes", "namespace"),
                 ("kubernetes", "image"), ("kubernetes", "volume"), ("metadata", "name")]


@st.composite
def multinode_exports(draw) -> tuple[str, Any]:
    """(slurm | kubernetes | accelerate, the 70B multi-node example with odd values in
    its topology and launch fields)."""
    data = copy.deepcopy(MULTINODE_DATA)
    for section, field in draw(st.lists(st.sampled_from(LAUNCH_FIELDS), max_size=4)):
        holder = data["launch"][section] if section in ("slurm", "kubernetes") \
            else data[section]
        holder[field] = draw(st.one_of(VALUES, st.dictionaries(HOSTILE, HOSTILE, max_size=2),
                                       st.lists(HOSTILE, max_size=2)))
    return draw(st.sampled_from(["slurm", "kubernetes", "accelerate"])), data


DIAGNOSTIC = re.compile(r"^job\.yaml:\d+:\d+: FS\d{3} (error|warning) \S")
NOTE = re.compile(r"^job\.yaml: (warning|note): \S")


def check_multinode_export(example: tuple[str, Any], directory: Path) -> None:
    """`export KIND job.yaml -o OUT`: written, or refused with coded lines and nothing
    written; an sbatch script is valid shell (`bash -n`) and plants no file."""
    kind, data = example
    (directory / "job.yaml").write_text(dump(data))
    result = _invoke(["export", kind, "job.yaml", "-o", "out"], directory)
    out = directory / "out"
    if result.exit_code != 0:
        assert not out.exists()
        # Coded diagnostics, or the export's warnings and then one `Error: …` line.
        lines = result.stderr.strip().splitlines()
        errors = [line for line in lines if line.startswith("Error: ")]
        assert all(DIAGNOSTIC.match(line) or NOTE.match(line) for line in lines
                   if not line.startswith("Error: ")), result.stderr
        assert errors == [] and lines or errors == lines[-1:], result.stderr
        return
    if kind == "slurm" and shutil.which("bash"):
        check = subprocess.run(["bash", "-n", str(out)], capture_output=True, text=True,
                               check=False)
        assert check.returncode == 0, check.stderr
    assert sorted(p.name for p in directory.iterdir()) == ["job.yaml", "out"]


# --- the budget flags (issue 42) -------------------------------------------------------

NUMBER_TEXT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10**30, 10**30).map(str),
    st.sampled_from(["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e308", "1e400",
                     "-1e400", "1e-400", "-0", "0", "1", "0.5", "1e18", "1e19", "1000000",
                     "1000000.0001", "0x10", "1_000", " 7", "", "9" * 400, "1e", "½"]))
_NON_FINITE = re.compile(r"\b(nan|inf|infinity)\b", re.IGNORECASE)


@st.composite
def budget_flags(draw) -> list[str]:
    """`plan` or `tune` of a tiny job with --tokens and --price-per-gpu-hour as typed."""
    command = draw(st.sampled_from(["plan", "plan", "plan", "tune"]))
    flags = ["--tokens", draw(NUMBER_TEXT)] if draw(st.booleans()) else []
    if command == "plan" and (not flags or draw(st.booleans())):
        flags += ["--price-per-gpu-hour", draw(NUMBER_TEXT)]
    if command == "tune" and draw(st.booleans()):
        flags += ["--max-gpus", "16"]
    return [command, str(TINY), *flags, "--format", draw(st.sampled_from(["text", "json"]))]


def check_budget_flags(argv: list[str], directory: Path) -> None:
    """Refused as a usage error naming the flag, or answered with finite numbers: strict
    JSON (no NaN, no Infinity), text without a `nan` or an `inf`."""
    result = _invoke(argv, directory)
    if result.exit_code == 2:
        _one_line_error(result)
        assert any(f"'{flag}'" in result.stderr for flag in argv if flag.startswith("--")), (
            result.stderr)
        return

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the JSON of {argv}")

    if argv[-1] == "json":
        json.loads(result.stdout, parse_constant=refuse)
    else:
        assert not _NON_FINITE.search(result.stdout), result.stdout
