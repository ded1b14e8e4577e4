"""A multi-node spec without launch.rdzv_endpoint: the exports derive the endpoint (the
allocation's first node), so it validates and exports; `fsdpspec run` by hand needs it
and says so with FS025 at the node count, in the file or on the flag that set it."""

from __future__ import annotations

from pathlib import Path

from conftest import CASES, QUICKSTART, run_cli

TWO_NODES = CASES / "valid" / "multinode-no-rdzv.yaml"


def test_both_exports_of_two_nodes_without_an_endpoint_exit_0(tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    slurm = run_cli("export", "slurm", str(TWO_NODES), "-o", str(script))
    assert slurm.returncode == 0, slurm.stderr
    assert "#SBATCH --nodes=2" in script.read_text()
    kubernetes = run_cli("export", "kubernetes", str(TWO_NODES),
                         "--set", "launch.kubernetes.image=registry.example/train:1",
                         "--set", "launch.kubernetes.volume=runs")
    assert kubernetes.returncode == 0, kubernetes.stderr
    assert "replicas: 1" in kubernetes.stdout and "--rdzv-endpoint" in kubernetes.stdout


def test_run_by_hand_refuses_it_at_the_node_count(tmp_path: Path) -> None:
    result = run_cli("run", str(TWO_NODES), cwd=tmp_path)
    assert result.returncode == 1
    assert (f"{TWO_NODES}:10:10: FS025 error nodes: 2 run by hand needs "
            "launch.rdzv_endpoint") in result.stderr.splitlines()
    assert "Traceback" not in result.stderr and not (tmp_path / "runs").exists()


def test_a_flag_that_sets_the_node_count_is_named_alone(tmp_path: Path) -> None:
    result = run_cli("run", str(QUICKSTART), "--set", "resources.nodes=2",
                     "--set", "resources.gpus_per_node=1", cwd=tmp_path)
    assert result.returncode == 1
    assert ("--set resources.nodes=2: FS025 error nodes: 2 run by hand needs "
            "launch.rdzv_endpoint") in result.stderr.splitlines()
