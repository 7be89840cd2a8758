"""simulation/benchmarks/device_check.sh, the one script for a lent GPU, run here with --smoke (tiny, on a CPU):
every part writes its file under $OUT and the summary gathers each part's status and figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "simulation" / "benchmarks" / "device_check.sh"
PARTS = ("env", "fedavg10", "cuda_tests", "stateful", "fedavg40", "bf16", "dpsgd", "variants", "fedavg100", "compile")
JSON_PARTS = ("fedavg10", "stateful", "fedavg40", "bf16", "dpsgd", "fedavg100")


def device_check(out: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "FLWR_TELEMETRY_ENABLED": "0",
           "FLWR_DISABLE_UPDATE_CHECK": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}  # fmt: skip
    return subprocess.run(["bash", str(SCRIPT), *flags], env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=900)  # fmt: skip


def statuses(out: Path) -> dict[str, str]:
    """summary.txt's `<part>: exit <rc>, <s> s` lines → {part: rc}."""
    lines = (out / "summary.txt").read_text().splitlines()
    return {line.split(":")[0]: line.split("exit ")[1].split(",")[0] for line in lines if ": exit " in line}


@pytest.mark.slow
def test_every_part_of_the_device_check_runs_in_smoke_mode_and_writes_its_files(tmp_path):
    done = device_check(tmp_path, "--smoke")
    assert done.returncode == 0, done.stderr[-2000:]
    assert statuses(tmp_path) == dict.fromkeys(PARTS, "0")
    for part in PARTS:
        assert (tmp_path / f"{part}.txt").stat().st_size > 0, part
    for part in JSON_PARTS:
        assert (tmp_path / f"{part}.json").is_file(), part
    summary = (tmp_path / "summary.txt").read_text()
    for figure in ("fedavg10.txt:bound_s ", "fedavg10.txt:dense_s ", "fedavg10.txt:fedavg    bound_ratio ",
                   "fedavg40.txt:bound_s ", "bf16.txt:bound_s ", "dpsgd.txt:fedavg    variant_over_batched ",
                   "stateful.txt:round_over_training_max ", "variants.txt:variant streams: ",
                   "variants.txt:variant channels-last ", "compile.txt:variant compile ",
                   "cuda_tests.txt:"):  # fmt: skip
        assert figure in summary, figure
    assert "commit " in (tmp_path / "env.txt").read_text()


def test_one_part_of_the_device_check_writes_its_output_figures_and_status(tmp_path):
    done = device_check(tmp_path, "--smoke", "--only", "fedavg10")
    assert done.returncode == 0, done.stderr[-2000:]
    assert statuses(tmp_path) == {"fedavg10": "0"}
    text = (tmp_path / "fedavg10.txt").read_text()
    assert text.startswith("# ") and "--paths batched" in text.splitlines()[0]
    assert "run eagerly: no CUDA graphs on a CPU" in text and text.rstrip().endswith("gpu_suite_ratio n/a")
    assert (tmp_path / "fedavg10.json").is_file()
    assert "fedavg10.txt:fedavg    bound_ratio " in (tmp_path / "summary.txt").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fedavg10.json", "fedavg10.txt", "summary.txt"]


def test_a_part_that_would_not_fit_the_budget_is_not_started_and_says_so(tmp_path):
    done = device_check(tmp_path, "--smoke", "--only", "fedavg10,bf16", "--budget", "0")
    assert done.returncode == 1 and "did not complete: fedavg10 bf16" in done.stderr, done.stderr  # not done: not 0
    for part in ("fedavg10", "bf16"):
        assert (tmp_path / f"{part}.txt").read_text() == f"{part}: not run: 0 s of the 0 s budget left\n"
    assert not (tmp_path / "fedavg10.json").exists()


@pytest.mark.parametrize("flags", [["--only", "fedavg1"], ["--budget", "8m"], ["--fast"]])
def test_the_device_check_refuses_a_bad_argument_in_one_line(tmp_path, flags):
    done = device_check(tmp_path, "--smoke", *flags)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("device_check.sh: ") and flags[0] in done.stderr
    assert not (tmp_path / "summary.txt").exists()
