"""LoRA fine-tunes end to end on 2 CPU processes: a tiny Llama saved with save_pretrained,
its chat tokenizer and a parquet chat dataset, under FSDP2 (bf16, the frozen base stored
in bf16, sharded checkpoints) and FSDP1 (fp32, use_orig_params, dropout, a full state
dict). Per FSDP version one straight run answers the eval, checkpoint, adapter, merge and
export questions, and a resumed run the resume question (FSDP2's stopped at step 4 and
resumed, FSDP1's from the straight run's step-4 checkpoint): five process pairs. QLoRA
(FSDP2, torchao NF4 base weights) adds two more: a straight run and one resumed from its
step-4 checkpoint. FSDP2's stopped run is a launch of its own (its stop is the launch's
environment); every other run, its resume included, trains after it in one launch, one
after another (engine_jobs.torchrun_jobs: one import of torch, transformers and peft per
process for the six)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("datasets")

from chat_assets import chat_parquet, chat_tokenizer, conversation  # noqa: E402
from chat_assets import tiny_llama as save_tiny_llama  # noqa: E402
from engine_jobs import chat_job, metrics, ok, torchrun, torchrun_jobs, write_spec  # noqa: E402
from resolved_edits import relabel  # noqa: E402

from conftest import run_cli  # noqa: E402

pytestmark = pytest.mark.slow

STEPS, MIDDLE = 8, 4
VERSIONS = {
    2: {"fsdp": {"version": 2, "mixed_precision": "bf16"},
        "peft": {"r": 4, "alpha": 8, "merged": True}},
    1: {"fsdp": {"version": 1, "use_orig_params": True, "state_dict_type": "FULL_STATE_DICT"},
        "peft": {"r": 4, "alpha": 8, "dropout": 0.1, "merged": True,
                 "target_modules": ["q_proj", "v_proj", "down_proj"]}},
}


def _job(inputs: Path, version: int) -> dict[str, Any]:
    return {**chat_job(inputs, STEPS, MIDDLE), **VERSIONS[version]}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lora-inputs")
    tokenizer = chat_tokenizer(root / "tokenizer")
    from transformers import AutoTokenizer

    save_tiny_llama(root / "model", len(AutoTokenizer.from_pretrained(tokenizer)),
                    hidden_size=64, num_hidden_layers=2)
    chat_parquet(root / "chats", train=32, test=8)
    return root


def _env(root: Path, **extra: str) -> dict[str, str]:
    # datasets' cache stays in the test
    return {"HF_DATASETS_CACHE": str(root / "datasets-cache"), **extra}


def _resumed(job: dict[str, Any], straight: Path) -> dict[str, Any]:
    """``job`` resumed from the step-MIDDLE checkpoint of its run in ``straight``."""
    checkpoint = straight / "checkpoints" / f"step-{MIDDLE:08d}"
    return {**job, "checkpoint": {**job["checkpoint"], "resume": str(checkpoint)}}


@pytest.fixture(scope="module")
def trained(inputs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The runs by name, their run directories and results: "lora2" and "lora1"
    straight; "lora2-resumed" stopped by SIGTERM at step MIDDLE and resumed in place;
    "lora1-resumed" from lora1's step-MIDDLE full-state-dict checkpoint in a run
    directory of its own (a process pair less); QLoRA under FSDP2 on a Llama wide enough
    for NF4's blocks to shard over 2 ranks (FS315), "qlora" straight and "qlora-resumed"
    from its step-MIDDLE checkpoint (the stop-and-resume path is the LoRA runs')."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("lora")
    stopped = write_spec(root / "lora2-resumed", _job(inputs, 2))
    first = ok(torchrun(stopped, env=_env(inputs, FSDPSPEC_TEST_SIGNAL_AT_STEP=str(MIDDLE))))
    assert f"stopped by SIGTERM at step {MIDDLE}" in first.stdout
    model = save_tiny_llama(inputs / "model-256", len(AutoTokenizer.from_pretrained(
        inputs / "tokenizer")), hidden_size=256, num_hidden_layers=2)
    qlora = {**_job(inputs, 2), "peft": {"method": "qlora", "r": 4, "alpha": 8},
             "model": {"preset": None, "hf_config": str(model), "weights": str(model)}}
    jobs = {"lora2": _job(inputs, 2), "lora1": _job(inputs, 1),
            "lora1-resumed": _resumed(_job(inputs, 1), root / "lora1"),
            "qlora": qlora, "qlora-resumed": _resumed(qlora, root / "qlora")}
    specs = [*(write_spec(root / name, job) for name, job in jobs.items()), stopped]
    results = torchrun_jobs(specs, env=_env(inputs))
    return {name: (root / name, ok(result))
            for name, result in zip([*jobs, "lora2-resumed"], results, strict=True)}


@pytest.fixture(scope="module", params=[2, 1], ids=["fsdp2", "fsdp1"])
def runs(request: pytest.FixtureRequest, trained: dict[str, Any]) -> tuple[int, Path, Path]:
    """(FSDP version, a straight run, a resumed run) of ``trained``."""
    version = request.param
    straight, _ = trained[f"lora{version}"]
    resumed, again = trained[f"lora{version}-resumed"]
    assert f"(step {MIDDLE})" in again.stdout
    return version, straight, resumed


@pytest.fixture(scope="module")
def qlora_runs(trained: dict[str, Any]) -> tuple[Path, Path, str]:
    """QLoRA's (straight, resumed, the straight run's stdout)."""
    (straight, first), (resumed, again) = trained["qlora"], trained["qlora-resumed"]
    assert f"(step {MIDDLE})" in again.stdout
    return straight, resumed, first.stdout


def test_qlora_trains_a_4bit_base_and_resumes_bit_identically(
        qlora_runs: tuple[Path, Path, str]) -> None:
    from safetensors.torch import load_file

    straight, resumed, stdout = qlora_runs
    assert "QLoRA: 14 base weights in 4-bit NF4" in stdout  # 7 projections × 2 layers
    evals = _evals(straight)
    print(f"fsdp2 QLoRA eval loss {evals[MIDDLE]:.4f} -> {evals[STEPS]:.4f}")
    assert evals[STEPS] < evals[MIDDLE]
    after = {s: v for s, v in _train(straight).items() if s > MIDDLE}
    assert _train(resumed) == after and _evals(resumed)[STEPS] == evals[STEPS]
    a = load_file(straight / "final" / "adapter" / "adapter_model.safetensors")
    b = load_file(resumed / "final" / "adapter" / "adapter_model.safetensors")
    assert len(a) == 2 * 7 * 2 and all(torch.equal(a[k], b[k]) for k in a)


def test_qlora_exports_an_adapter_for_the_original_base(qlora_runs: tuple[Path, Path, str],
                                                        inputs: Path) -> None:
    """final/ holds the adapter only; peft loads it on the original (unquantised) base."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    straight, _, _ = qlora_runs
    adapter = straight / "final" / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(inputs / "model-256")
    assert not (straight / "final" / "model.safetensors").exists()  # not merged
    base = AutoModelForCausalLM.from_pretrained(inputs / "model-256", dtype=torch.float32)
    adapted = PeftModel.from_pretrained(base, adapter).eval()
    ids = _prompt(inputs / "tokenizer")
    with torch.no_grad():  # four tokens whatever the adapter's greedy choice (EOS too)
        generated = adapted.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert generated.shape == (1, ids.shape[1] + 4)


def _evals(run_dir: Path) -> dict[int, float]:
    return {m["step"]: m["eval_loss"] for m in metrics(run_dir) if "eval_loss" in m}


def _train(run_dir: Path) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in metrics(run_dir) if "loss" in m}


def _base_and_adapted(inputs: Path, adapter: Path) -> tuple[Any, Any]:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(inputs / "model", dtype=torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(inputs / "model", dtype=torch.float32)
    return reference, PeftModel.from_pretrained(base, adapter).eval()


def _prompt(tokenizer_dir: Path) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    import random

    return tokenizer.apply_chat_template(conversation(random.Random(7))[:2],
                                         add_generation_prompt=True, return_tensors="pt",
                                         return_dict=True)["input_ids"]


def test_eval_loss_falls(runs: tuple[int, Path, Path]) -> None:
    version, straight, _ = runs
    evals = _evals(straight)
    print(f"fsdp{version} LoRA eval loss {evals[MIDDLE]:.4f} -> {evals[STEPS]:.4f}")
    assert sorted(evals) == [MIDDLE, STEPS]
    assert evals[STEPS] < evals[MIDDLE]


def test_checkpoints_hold_the_trainable_state_only(runs: tuple[int, Path, Path]) -> None:
    """Adapters and their AdamW state, gathered from both ranks; no frozen base weight."""
    version, straight, _ = runs
    checkpoint = straight / "checkpoints" / f"step-{STEPS:08d}"
    if version == 1:
        payload = torch.load(checkpoint / "full_state_dict.pt", weights_only=True)
        model_keys = set(payload["model"])
        shapes = {k: tuple(v.shape) for k, v in payload["model"].items()}
    else:
        import torch.distributed.checkpoint as dcp

        saved = dcp.FileSystemReader(str(checkpoint)).read_metadata().state_dict_metadata
        model_keys = {k[len("model."):] for k in saved if k.startswith("model.")}
        shapes = {k[len("model."):]: tuple(v.size) for k, v in saved.items()
                  if k.startswith("model.")}
    targets = VERSIONS[version]["peft"].get("target_modules",
                                            ["q_proj", "k_proj", "v_proj", "o_proj",
                                             "gate_proj", "up_proj", "down_proj"])
    assert len(model_keys) == 2 * 2 * len(targets)  # A and B, per target, per layer
    assert all(".lora_A." in k or ".lora_B." in k for k in model_keys)
    # Full shapes (not one rank's shard): A is r × in.
    assert shapes["model.layers.1.self_attn.q_proj.lora_A.default.weight"] == (4, 64)


def test_resume_is_bit_identical(runs: tuple[int, Path, Path]) -> None:
    from safetensors.torch import load_file

    version, straight, resumed = runs
    # A run resumed in its own directory logs from step MIDDLE + 1.
    first = 1 if version == 2 else MIDDLE + 1
    assert _train(resumed) == {s: v for s, v in _train(straight).items() if s >= first}
    assert _evals(resumed)[STEPS] == _evals(straight)[STEPS]  # the stop came before step 4's
    a = load_file(straight / "final" / "adapter" / "adapter_model.safetensors")
    b = load_file(resumed / "final" / "adapter" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_adapter_loads_with_peft_and_generates(runs: tuple[int, Path, Path],
                                               inputs: Path) -> None:
    _, straight, _ = runs
    reference, adapted = _base_and_adapted(inputs, straight / "final" / "adapter")
    ids = _prompt(straight / "final")
    with torch.no_grad():
        assert not torch.allclose(adapted(ids).logits, reference(ids).logits)  # trained
        generated = adapted.generate(ids, max_new_tokens=4, do_sample=False)
    assert generated.shape == (1, ids.shape[1] + 4)


def test_merged_logits_equal_base_plus_adapter(runs: tuple[int, Path, Path],
                                               inputs: Path) -> None:
    from transformers import AutoModelForCausalLM

    _, straight, _ = runs
    _, adapted = _base_and_adapted(inputs, straight / "final" / "adapter")
    merged = AutoModelForCausalLM.from_pretrained(straight / "final").eval()
    assert merged.dtype == torch.float32  # checkpoint.final.dtype
    ids = _prompt(straight / "final")
    with torch.no_grad():
        difference = (merged(ids).logits - adapted(ids).logits).abs().max().item()
    print(f"merged vs base + adapter: max |logit difference| {difference:.2e}")
    assert difference <= 1e-5


def test_export_hf_writes_a_mid_run_adapter(runs: tuple[int, Path, Path], tmp_path: Path,
                                            inputs: Path) -> None:
    from safetensors.torch import load_file

    _, straight, _ = runs
    out = tmp_path / "step-4"
    result = run_cli("export", "hf", str(straight), "--step", str(MIDDLE), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert {p.name for p in (out / "adapter").iterdir()} == {
        "adapter_config.json", "adapter_model.safetensors"}
    _base_and_adapted(inputs, out / "adapter")  # peft loads it
    middle = load_file(out / "adapter" / "adapter_model.safetensors")
    final = load_file(straight / "final" / "adapter" / "adapter_model.safetensors")
    assert any(not torch.equal(middle[k], final[k]) for k in final)
    assert (out / "model.safetensors").is_file()  # merged, as peft.merged asks


def _export_hf(*args: str) -> tuple[int, str]:
    """`fsdpspec export hf ARGS` in this process (torch is loaded already): exit code and
    stderr."""
    from click.testing import CliRunner

    from fsdpspec.cli.main import cli

    result = CliRunner().invoke(cli, ["export", "hf", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.exit_code, result.stderr


def _relabelled(run: Path, tmp_path: Path, peft: dict[str, Any] | None) -> Path:
    """A copy of ``run`` whose resolved-spec.json says ``peft`` (its checkpoints as
    trained)."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy, symlinks=True, ignore=shutil.ignore_patterns("final"))
    relabel(copy, peft)
    return copy


@pytest.mark.parametrize(("peft", "says"), [
    (None, "a full model"),
    ({"r": 64, "alpha": 8, "merged": True}, "a lora adapter of r 64, alpha 8.0 on "),
], ids=["relabelled-full", "r-64"])
def test_export_hf_follows_the_checkpoint_not_an_edited_resolved_spec(
        runs: tuple[int, Path, Path], tmp_path: Path, peft: dict[str, Any] | None,
        says: str) -> None:
    """The adapters as a full model.safetensors, or a config of r 64 over rank-4
    tensors, would be silently wrong: the manifest says what the checkpoint holds."""
    version, straight, _ = runs
    if peft is not None:
        peft = {**VERSIONS[version]["peft"], **peft}
    run = _relabelled(straight, tmp_path, peft)
    checkpoint = run / "checkpoints" / f"step-{STEPS:08d}"
    code, stderr = _export_hf(str(run), "-o", str(tmp_path / "out"))
    assert code == 1 and len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith(f"Error: FS042 {checkpoint} holds a lora adapter of r 4, "
                             "alpha 8.0 on "), stderr
    assert f"but {run}/resolved-spec.json describes {says}" in stderr
    assert stderr.rstrip().endswith("; nothing was written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_export_hf_force_refreshes_its_own_adapter_export(
        qlora_runs: tuple[Path, Path, str], tmp_path: Path) -> None:
    """An adapter-only export (no config.json beside adapter/) is an export, not a
    user's folder: --force replaces it."""
    straight, _, _ = qlora_runs
    out = tmp_path / "adapter-export"
    assert _export_hf(str(straight), "-o", str(out)) == (0, "")
    (out / "adapter" / "adapter_config.json").write_text("{}\n")  # stale
    code, stderr = _export_hf(str(straight), "-o", str(out), "--force")
    assert code == 0, stderr
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["r"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter-export"]
