"""Nothing half-written: a full out-dir at any write leaves the previous complete files, a true status and no
temporary file; a checkpoint's files are checked against its manifest (fedsuite.results.checkpoint_files) and a corrupt
one is named before anything starts; resuming with a changed key is refused before anything starts; client state that
cannot fit where it would live is refused by the pre-run check.

The full-disk cases mount a small tmpfs (the tests run as root; skipped with the reason where mounting is not
permitted) and fill it at the point under test."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedsuite.results import checkpoint, checkpoint_files
from fedsuite.results.folder import RESERVE, OutDirFull, RunRecorder, mark_stopped
from fedsuite.state import sizing
from fedsuite.state import store as state
from fedsuite.state.files import read_arrays
from tests.conftest import SESSION

PROJECT = Path(__file__).resolve().parent.parent
LONG = ("dataset='synthetic-lsq' num-clients=4 clients-per-round=2 num-server-rounds=400 local-steps=300 "
        "batch-size=5 lr=0.002")  # fmt: skip


# ---- a small disk ------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def small_disk(path: Path, size: str = "256k"):
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                         text=True)  # fmt: skip
    if res.returncode:
        pytest.skip(f"a small tmpfs cannot be mounted here (needs root / CAP_SYS_ADMIN): {res.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(disk: Path) -> None:
    """Take every free byte of `disk` (a file per call, so later calls can fill what was freed)."""
    fd = os.open(disk / f"filler-{time.monotonic_ns()}", os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (65536, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
    finally:
        os.close(fd)


def snapshot(folder: Path) -> dict[str, str]:
    """Every file below `folder` with its SHA-256 (the reserve left out: it is released on purpose)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != RESERVE}  # fmt: skip


def temporaries(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.name.endswith((".tmp", ".stop")) or ".tmp" in p.name]


def recorder(folder: Path) -> RunRecorder:
    return RunRecorder(folder, {"lr": 0.1}, {"model": "linear"}, [0.5], num_rounds=5)


# ---- results files on a full disk ------------------------------------------------------------------------------
def test_a_row_on_a_full_disk_leaves_the_files_whole_and_the_run_failed(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        rec = recorder(disk / "r")
        rec.record({"round": 0, "loss": 1.0})
        before = snapshot(disk / "r")
        fill(disk)
        with pytest.raises(OutDirFull, match=r"out-dir '.*disk' is full: cannot write rounds\.jsonl"):
            rec.record({"round": 1, "loss": 0.5, "note": "x" * 20_000})  # more than the last page's slack
        assert snapshot(disk / "r") == before and not temporaries(disk)  # no half row in either file
        assert [r["round"] for r in rec.rows] == [0]
        rec.finish("failed", "OutDirFull: out-dir … is full: …")  # the reserve makes room for the final status
        s = json.loads((disk / "r" / "summary.json").read_text())
        assert s["status"] == "failed" and s["reason"] == "out-dir … is full: …" and s["rounds_completed"] == 0
        assert not (disk / "r" / RESERVE).exists() and not temporaries(disk)


def test_a_summary_on_a_full_disk_stays_the_previous_one(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        rec = recorder(disk / "r")
        rec.record({"round": 0, "loss": 1.0})
        fill(disk)
        before = snapshot(disk / "r")
        with pytest.raises(OutDirFull, match="cannot write summary.json"):
            rec.write_summary("running")
        assert snapshot(disk / "r") == before and not temporaries(disk)
        assert json.loads((disk / "r" / "summary.json").read_text())["status"] == "running"
        assert mark_stopped(disk / "r", "interrupted", "SIGTERM")  # with the reserve
        assert json.loads((disk / "r" / "summary.json").read_text())["status"] == "interrupted"
        assert not temporaries(disk)


def test_without_room_even_for_the_status_the_summary_stays_whole(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        rec = recorder(disk / "r")
        (disk / "r" / RESERVE).unlink()
        fill(disk)
        before = snapshot(disk / "r")
        assert not mark_stopped(disk / "r", "interrupted", "SIGTERM")  # the caller says it on the console
        with pytest.raises(OutDirFull):
            rec.finish("failed", "x")
        assert snapshot(disk / "r") == before and not temporaries(disk)


def test_a_plot_on_a_full_disk_is_left_out_whole_and_said(tmp_path, monkeypatch, caplog):
    with small_disk(tmp_path / "disk") as disk:
        rec = recorder(disk / "r")
        rec.record({"round": 0, "accuracy": 0.1, "loss": 1.0})
        original = RunRecorder.write_summary

        def then_fill(self, status, reason=None):
            original(self, status, reason)
            if status != "running":
                (disk / "r" / RESERVE).unlink(missing_ok=True)
                fill(disk)

        monkeypatch.setattr(RunRecorder, "write_summary", then_fill)
        with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"):
            rec.record({"round": 5, "accuracy": 0.5, "loss": 0.5})
        assert json.loads((disk / "r" / "summary.json").read_text())["status"] == "completed"
        assert not (disk / "r" / "accuracy.png").exists() and not temporaries(disk)
        assert any("accuracy.png not written: out-dir" in r.message and "is full" in r.message for r in caplog.records)


def test_client_state_on_a_full_disk_keeps_the_previous_file(tmp_path):
    with small_disk(tmp_path / "disk", "64k") as disk:
        store = state.DiskStore(disk, 3)
        store["c"] = np.ones(10, np.float32)
        store.flush()
        before = snapshot(disk)
        fill(disk)
        store["c"] = np.full(5000, 2.0, np.float32)
        with pytest.raises(OSError) as err:
            store.flush()
        assert err.value.errno == errno.ENOSPC
        assert snapshot(disk) == {k: v for k, v in before.items()} | {
            k: v for k, v in snapshot(disk).items() if k.startswith("filler")
        }
        assert not temporaries(disk)
        np.testing.assert_array_equal(read_arrays(disk / "partition-000003.state")["c"], np.ones(10, np.float32))


def test_the_reaper_removes_flwr_home_when_the_summary_cannot_be_written(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        rec = recorder(disk / "r")
        (disk / "r" / RESERVE).unlink()
        (disk / "r" / "summary.json.tmp").write_text("{")  # an older version's leftover
        fill(disk)
        home, ray = tmp_path / "home", tmp_path / "ray"
        home.mkdir(), ray.mkdir()
        (home / "big").write_bytes(b"x" * 100_000)
        res = subprocess.run([sys.executable, "-m", "simulation.launcher.reaper", "t" * 32, str(disk / "r"), str(home),
                              str(ray)], input=b"", cwd=PROJECT, capture_output=True, timeout=60)  # fmt: skip
        assert not home.exists() and not ray.exists(), res.stderr
        assert json.loads((disk / "r" / "summary.json").read_text())["status"] == "running"  # whole, if stale
        assert not temporaries(disk)
        del rec


# ---- checkpoint manifest -----------------------------------------------------------------------------------------
def sealed_checkpoint(tmp_path) -> Path:
    folder = tmp_path / "round-000002"
    (folder / "client-state").mkdir(parents=True)
    np.savez(folder / "server.npz", a0=np.arange(100.0))
    (folder / "server.json").write_text(json.dumps({"round": 2, "state": {}}))
    (folder / "rows.jsonl").write_text('{"round": 0}\n')
    for i in range(5):
        np.savez(folder / "client-state" / f"partition-{i:06d}.npz", c=np.full(50, float(i)))
    checkpoint_files.seal(folder)
    return folder


def test_a_sealed_checkpoint_verifies_and_lists_every_file(tmp_path):
    folder = sealed_checkpoint(tmp_path)
    checkpoint_files.verify(folder)
    listed = json.loads((folder / checkpoint_files.MANIFEST).read_text())["files"]
    assert sorted(listed) == [f"client-state/partition-00000{i}.npz" for i in range(5)] + [
        "rows.jsonl", "server.json", "server.npz"]  # fmt: skip
    assert listed["server.npz"]["size"] == (folder / "server.npz").stat().st_size
    assert not temporaries(folder)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: os.truncate(f / "server.npz", 100), r"server\.npz is corrupt: 100 bytes, the manifest says \d+ \("
                                                       r"truncated\)"),
        (lambda f: os.truncate(f / "client-state/partition-000003.npz", 10), r"partition-000003\.npz is corrupt"),
        (lambda f: (f / "rows.jsonl").write_text('{"round": 1}\n'), r"rows\.jsonl is corrupt: its SHA-256 differs"),
        (lambda f: (f / "server.json").unlink(), r"server\.json is missing"),
        (lambda f: np.savez(f / "client-state/partition-000009.npz", c=np.zeros(1)), "not in the manifest"),
        (lambda f: os.truncate(f / checkpoint_files.MANIFEST, 20), r"manifest\.json is corrupt"),
        (lambda f: (f / checkpoint_files.MANIFEST).unlink(), r"manifest\.json is missing: the checkpoint was not"),
    ],
)  # fmt: skip
def test_verify_names_the_first_bad_file_and_what_is_wrong(tmp_path, damage, message):
    folder = sealed_checkpoint(tmp_path)
    damage(folder)
    with pytest.raises(checkpoint.CheckpointError, match=message) as err:
        checkpoint_files.verify(folder)
    assert str(folder) in str(err.value) and "\n" not in str(err.value)


def test_seal_on_a_full_disk_leaves_no_manifest_and_no_temporary(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        folder = sealed_checkpoint(disk)
        (folder / checkpoint_files.MANIFEST).unlink()
        fill(disk)
        with pytest.raises(OSError):
            checkpoint_files.seal(folder)
        assert not (folder / checkpoint_files.MANIFEST).exists() and not temporaries(disk)


# ---- resume checked before anything starts -------------------------------------------------------------------
SCAFFOLD = {
    "algorithm": "scaffold", "dataset": "synthetic-lsq", "num-clients": 6, "clients-per-round": 3,
    "synthetic-dim": 5, "synthetic-samples": 12, "batch-size": 4, "local-steps": 3, "lr": 0.02,
    "num-server-rounds": 2, "eval-every": 1000, "checkpoint-every": 1,
}  # fmt: skip


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory) -> Path:
    """A completed SCAFFOLD run with its checkpoint (in-process, seconds), sealed as fedsuite.results.checkpoint
    does."""
    from fedsuite.run.inprocess import run_inprocess

    out = tmp_path_factory.mktemp("ckpt")
    run_inprocess({**SCAFFOLD, "out-dir": str(out), "run-name": "a"}, record=True)
    ckpt = checkpoint.load(out / "a")
    if not (
        ckpt.folder / checkpoint_files.MANIFEST
    ).exists():  # until fedsuite.results.checkpoint seals its checkpoints
        checkpoint_files.seal(ckpt.folder)
    (out / "a" / "flwr.log").write_text("the first run's log\n")
    return out / "a"


def simulation_run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulation.run", *args], capture_output=True, text=True,
                          cwd=PROJECT, timeout=timeout)  # fmt: skip


def stat_all(folder: Path) -> dict[str, tuple[int, int, str]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def test_resume_with_a_changed_key_is_refused_before_anything_starts(checkpointed, tmp_path):
    before = stat_all(checkpointed)
    start = time.monotonic()
    res = simulation_run("-c", f"resume-from='{checkpointed}' lr=0.5 local-steps=4 num-server-rounds=4")
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert time.monotonic() - start < 60
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: resume-from=")
    assert "lr=0.5 (checkpoint: 0.02)" in lines[0] and "local-steps=4 (checkpoint: 3)" in lines[0]
    assert "Traceback" not in res.stdout + res.stderr and "$ " not in res.stdout  # flwr run never started
    assert stat_all(checkpointed) == before  # the run folder, its marker and flwr.log untouched


def test_check_with_resume_from_says_ok_for_an_unchanged_config(checkpointed):
    res = simulation_run("--check", "-c", f"resume-from='{checkpointed}' num-server-rounds=4")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "checkpoint whole" in res.stdout


@pytest.mark.parametrize("name", ["server.npz", "client-state/partition-000003.state", "rows.jsonl"])
def test_a_corrupt_checkpoint_file_is_named_with_exit_2_before_anything_starts(checkpointed, tmp_path, name):
    import shutil

    copy = tmp_path / "a"
    shutil.copytree(checkpointed, copy)
    ckpt_folder = next((copy / "checkpoints").glob("round-*"))
    os.truncate(ckpt_folder / name, (ckpt_folder / name).stat().st_size // 2)
    before = stat_all(copy)
    for args in (["--check", "-c", f"resume-from='{copy}' num-server-rounds=4"],
                 ["-c", f"resume-from='{copy}' num-server-rounds=4"]):  # fmt: skip
        res = simulation_run(*args)
        assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and f"{ckpt_folder / name} is corrupt" in lines[0], lines
        assert "$ " not in res.stdout
    assert stat_all(copy) == before


# ---- client state that does not fit -------------------------------------------------------------------------------
def test_capacity_check_refuses_what_does_not_fit_and_warns_near_the_limit(monkeypatch):
    gib = 2**30
    monkeypatch.setattr(sizing, "free_bytes", lambda folder: 24 * gib)
    monkeypatch.setattr(sizing, "memory_available", lambda: 23 * gib)
    dim = 215_370  # the small CNN on Fashion-MNIST; SCAFFOLD keeps 1 vector per client
    per_client = state.state_bytes(1, dim, 1)
    level, text = state.capacity_check("memory", 30_000, dim, 1, 4096)
    assert level == "error" and "client state needs 49,294 MiB" in text and "RAM has 23,552 MiB available" in text
    assert "client-state='disk'" in text and f"num-clients ≤ {23 * gib // per_client:,} fit" in text
    n = int(0.87 * 23 * gib / per_client)
    level, text = state.capacity_check("memory", n, dim, 1, 4096)
    assert level == "warning" and "87% of the room" in text
    assert state.capacity_check("memory", 1_000, dim, 1, 4096) is None
    level, text = state.capacity_check("disk", 30_000, dim, 1, 4096, "/data/state")
    assert level == "error" and "on disk in /data/state" in text and "24,576 MiB free" in text
    assert "client-state-dir with room" in text
    assert state.capacity_check("auto", 30_000, dim, 1, 4096)[0] == "error"  # above the budget: disk, 24 GiB free


def test_check_refuses_a_federation_too_big_for_memory_with_exit_2():
    """The hostile probe: SCAFFOLD, CNN, 30 000 clients, client-state='memory' (49 294 MiB) used to say OK."""
    need = state.state_bytes(30_000, 215_370, 1)
    if need <= min(state.memory_available() or 0, state.free_bytes(state.state_folder("memory", ""))):
        pytest.skip("this machine has room for 49 GiB of client state in memory")
    res = simulation_run("--check", "-c", "algorithm='scaffold' model='cnn' num-clients=30000 client-state='memory'",
                         timeout=300)  # fmt: skip
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "client state needs 49,294 MiB" in lines[0] and "does not fit" in lines[0]
    assert "client-state='disk'" in lines[0] and "fewer clients" in lines[0]
    assert "OK" not in res.stdout


# ---- end to end: a launch on a disk that fills up -----------------------------------------------------------------
def launch_on(disk: Path, config: str) -> subprocess.Popen:
    out = open(disk.parent / "console.txt", "w")
    return subprocess.Popen([sys.executable, "-m", "simulation.run", "-c", f"{config} out-dir='{disk}' run-name='r'"],
                            stdout=out, stderr=subprocess.STDOUT, cwd=PROJECT, start_new_session=True)  # fmt: skip


def test_an_out_dir_that_fills_up_after_round_1_fails_the_run_in_one_line(tmp_path):
    from simulation.launcher.processes import tagged_processes
    from tests.test_run_control import reaper_folders

    with small_disk(tmp_path / "disk") as disk:
        proc = launch_on(disk, LONG)
        try:
            deadline = time.monotonic() + 240
            rows = disk / "r" / "rounds.jsonl"
            while not (rows.exists() and len(rows.read_text().splitlines()) >= 2) and time.monotonic() < deadline:
                assert proc.poll() is None, (tmp_path / "console.txt").read_text()[-3000:]
                time.sleep(0.3)
            private = reaper_folders(proc.pid)
            fill(disk)
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 2)
                proc.wait(60)
        text = (tmp_path / "console.txt").read_text()
        assert proc.returncode == 1, text[-3000:]
        full = [line for line in text.splitlines() if "is full" in line]
        assert len(full) == 1 and full[0].startswith("error: run ") and f"out-dir '{disk}' is full: " in full[0]
        assert "Traceback" not in text and "Errno 28" not in text
        s = json.loads((disk / "r" / "summary.json").read_text())
        assert s["status"] == "failed" and "is full" in s["reason"]
        deadline = time.monotonic() + 30
        while (temporaries(disk) or (disk / "r" / RESERVE).exists()) and time.monotonic() < deadline:
            time.sleep(0.3)  # the reaper's last step
        assert not temporaries(disk) and not (disk / "r" / RESERVE).exists()
        rows = [json.loads(line) for line in (disk / "r" / "rounds.jsonl").read_text().splitlines()]
        assert [r["round"] for r in rows] == list(range(len(rows)))  # whole rows only
        assert private and not any(Path(p).exists() for p in private)
        deadline = time.monotonic() + 30
        while tagged_processes(env=SESSION) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not tagged_processes(env=SESSION)


def run_to_end(disk: Path, config: str, timeout: float = 300) -> tuple[int, str]:
    proc = launch_on(disk, config)
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 2)
            proc.wait(60)
    return proc.returncode, (disk.parent / "console.txt").read_text()


@pytest.mark.slow
def test_a_checkpoint_larger_than_the_disk_fails_the_run_and_leaves_no_partial_checkpoint(tmp_path):
    """SCAFFOLD with 20 clients of d=1 000 and checkpoint-every=1 on a 128 kB out-dir: the first checkpoint (20
    client-state files of 8 kB, copied from RAM) does not fit."""
    with small_disk(tmp_path / "disk", "128k") as disk:
        config = ("algorithm='scaffold' dataset='synthetic-lsq' synthetic-dim=1000 num-clients=20 clients-per-round=20 "
                  "num-server-rounds=3 checkpoint-every=1 lr=0.001")  # fmt: skip
        code, text = run_to_end(disk, config)
        assert code == 1, text[-3000:]
        full = [line for line in text.splitlines() if "is full" in line]
        assert len(full) == 1 and f"out-dir '{disk}' is full: " in full[0] and "Traceback" not in text
        s = json.loads((disk / "r" / "summary.json").read_text())
        assert s["status"] == "failed" and "is full" in s["reason"]
        deadline = time.monotonic() + 30
        while temporaries(disk) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not temporaries(disk) and not (disk / "r" / RESERVE).exists()
        assert not list((disk / "r" / "checkpoints").glob("round-*"))  # no checkpoint rather than half a one


@pytest.mark.slow
def test_a_client_state_dir_that_fills_up_fails_the_run_with_whole_state_files(tmp_path):
    """SCAFFOLD's clients cannot replace their state files on a full client-state-dir: they are rejected with the
    reason in clients.log, the run fails, and every state file is the last whole one (no temporary file)."""
    with small_disk(tmp_path / "state", "128k") as states:
        out = tmp_path / "out"
        out.mkdir()
        proc = launch_on(out, LONG.replace("num-clients=4", "num-clients=4 algorithm='scaffold' client-state='disk' "
                                           f"client-state-dir='{states}'"))  # fmt: skip
        try:
            deadline = time.monotonic() + 240
            while len(list(states.glob("partition-*.state"))) < 4 and time.monotonic() < deadline:
                assert proc.poll() is None, (tmp_path / "console.txt").read_text()[-3000:]
                time.sleep(0.3)
            fill(states)
            proc.wait(timeout=180)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 2)
                proc.wait(60)
        text = (tmp_path / "console.txt").read_text()
        assert proc.returncode == 1, text[-3000:]
        assert json.loads((out / "r" / "summary.json").read_text())["status"] == "failed"
        assert "No space left on device" in (out / "r" / "clients.log").read_text()
        assert not temporaries(states)
        files = list(states.glob("partition-*.state"))
        assert files and all(np.isfinite(a).all() for path in files for a in read_arrays(path).values())
