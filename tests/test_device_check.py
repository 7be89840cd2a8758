"""simulation/benchmarks/device_check.sh, the one script for a lent GPU, run here with --smoke (tiny, on a CPU):
every part writes its file under $OUT and the summary gathers each part's status and figures."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "simulation" / "benchmarks" / "device_check.sh"
PARTS = ("env", "fedavg10", "stateful", "dpsgd_parts", "phases100", "cuda_tests", "fedavg40", "bf16", "dpsgd",
         "variants", "fedavg100", "compile")  # fmt: skip
JSON_PARTS = ("fedavg10", "stateful", "fedavg40", "bf16", "dpsgd", "fedavg100")


def device_check(out: Path, *flags: str) -> subprocess.CompletedProcess:
    """The script run with `flags`, its parts' files then taken out of $OUT/parts.tar.gz beside it (the archive
    stays: a call of the device brings back at most 8 files, so the script leaves two)."""
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "FLWR_TELEMETRY_ENABLED": "0",
           "FLWR_DISABLE_UPDATE_CHECK": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}  # fmt: skip
    done = subprocess.run(["bash", str(SCRIPT), *flags], env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    if (out / "parts.tar.gz").exists():
        with tarfile.open(out / "parts.tar.gz") as archive:
            archive.extractall(out, filter="data")
    return done


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
                   "dpsgd_parts.txt:private_over_plain ", "phases100.txt:training_s ",
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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fedavg10.json", "fedavg10.txt", "parts.tar.gz",
                                                          "summary.txt"]  # fmt: skip
    with tarfile.open(tmp_path / "parts.tar.gz") as archive:
        assert sorted(archive.getnames()) == ["fedavg10.json", "fedavg10.txt"]


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


def test_device_tree_sets_the_large_docs_folders_aside_and_puts_them_back(tmp_path):
    """device_tree.sh in a repository of its own: `aside` moves docs/ folders above 1 MiB out (and says what a call
    would carry), `back` restores them byte for byte; a bad verb is refused in one line."""
    repo = tmp_path / "repo"
    (repo / "simulation" / "benchmarks").mkdir(parents=True)
    (repo / "simulation" / "benchmarks" / "device_tree.sh").write_bytes(
        (ROOT / "simulation" / "benchmarks" / "device_tree.sh").read_bytes()
    )
    big, small = repo / "docs" / "study", repo / "docs" / "page"
    big.mkdir(parents=True), small.mkdir()
    payload = os.urandom(3 << 20)
    (big / "rows.csv").write_bytes(payload)
    (small / "index.md").write_text("# a page\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    env = {**os.environ, "ASIDE": str(tmp_path / "aside")}

    def tree(verb: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "simulation/benchmarks/device_tree.sh", verb], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    aside = tree("aside")
    assert aside.returncode == 0, aside.stderr
    assert "aside: docs/study" in aside.stdout and "docs/page" not in aside.stdout
    assert not big.exists() and small.exists() and "a call carries 0 MiB of working tree" in aside.stdout
    back = tree("back")
    assert back.returncode == 0 and (big / "rows.csv").read_bytes() == payload and not (tmp_path / "aside").exists()
    bad = tree("bogus")
    assert bad.returncode == 2 and bad.stderr.strip() == "device_tree.sh: 'bogus': allowed: size, aside, back"
