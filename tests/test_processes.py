"""Finding and stopping every process of a launch without Flower or Ray (simulation.launcher.processes and
simulation.launcher.reaper):
a process that lost the token from its environment (as Ray's agents do) is still found through the process tree
recorded while its parent lived, or through the files it holds in the launch's private folder; the reaper stops
them all and removes the private folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from simulation.launcher.processes import Launch, new_token, process_table, stop_tagged, tagged_processes

PROJECT = Path(__file__).resolve().parent.parent


def alive(pid: int) -> bool:
    return pid in process_table()


def wait_for(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def untagged_orphan(token: str, tmp_path: Path, name: str) -> tuple[subprocess.Popen, int]:
    """A tagged shell that starts a child with an empty environment (no token, like a Ray agent) and exits, so the
    child is re-parented; returns the shell and the child's pid."""
    pidfile = tmp_path / f"{name}.pid"
    shell = subprocess.Popen(
        ["bash", "-c", f"env -i /bin/sleep 300 & echo $! > {pidfile}; sleep 1.5"],
        env={**os.environ, "FEDSUITE_RUN_TOKEN": token},
    )
    assert wait_for(lambda: pidfile.exists() and pidfile.read_text().strip())
    return shell, int(pidfile.read_text())


def test_a_child_that_lost_the_token_is_found_through_the_tree_recorded_while_its_parent_lived(tmp_path):
    token = new_token()
    shell, child = untagged_orphan(token, tmp_path, "a")
    try:
        launch = Launch(token)
        assert child in launch.scan() and shell.pid in launch.scan()
        assert child not in tagged_processes(token)  # what the token scan alone saw
        shell.wait()  # the parent has ended: the child is an orphan without the token
        assert child in launch.scan()
        assert launch.stop() == []
        assert wait_for(lambda: not alive(child), 5)
    finally:
        if alive(child):
            os.kill(child, 9)


def test_a_process_holding_a_file_in_the_private_folder_is_found_without_the_tree(tmp_path):
    """The agents' other mark: the launch's private Ray folder (their logs)."""
    private = tmp_path / "ray"
    private.mkdir()
    proc = subprocess.Popen(["bash", "-c", f"exec 3>{private}/agent.log; exec /bin/sleep 300"], env={})
    try:
        assert wait_for(lambda: any(os.readlink(f.path).startswith(str(private))
                                    for f in os.scandir(f"/proc/{proc.pid}/fd")))  # fmt: skip
        launch = Launch(new_token(), private)
        assert proc.pid not in launch.scan(thorough=False) and proc.pid in launch.scan()
        assert launch.stop() == [] and proc.wait(5) is not None
    finally:
        proc.kill()


def test_stop_tagged_also_stops_the_untagged_descendants(tmp_path):
    token = new_token()
    tagged = {**os.environ, "FEDSUITE_RUN_TOKEN": token}
    shell = subprocess.Popen(["bash", "-c", "env -i /bin/sleep 300 & wait"], env=tagged)
    try:
        assert wait_for(lambda: len(Launch(token).scan()) == 2)
        child = [p for p in Launch(token).scan() if p != shell.pid][0]
        assert stop_tagged(token) == []
        assert shell.wait(5) is not None and wait_for(lambda: not alive(child), 5)
    finally:
        shell.kill()


def test_a_recycled_pid_or_a_zombie_is_not_taken_for_a_launch_process():
    token = new_token()
    proc = subprocess.Popen(["true"], env={**os.environ, "FEDSUITE_RUN_TOKEN": token})
    launch = Launch(token)
    time.sleep(0.5)  # `true` has ended, not yet reaped: a zombie
    assert launch.scan() == []
    launch.known[proc.pid] = 1  # a pid recorded with another start time is another process
    assert proc.pid not in launch.alive()
    proc.wait()


def test_the_reaper_stops_orphans_removes_private_folders_and_temporaries(tmp_path):
    """The reaper records the tree while the driver lives; when its input closes it stops the orphan that lost the
    token, removes FLWR_HOME and the Ray folder, marks the summary and removes the temporary files a cut-short
    write left (a full disk: tests/test_crash_safety.py)."""
    token = new_token()
    folder, home, ray = tmp_path / "r", tmp_path / "home", tmp_path / "ray"
    for path in (folder, home, ray):
        path.mkdir()
    (home / "config.toml").write_text("x")
    (folder / "summary.json").write_text(json.dumps({"status": "running"}))
    (folder / "summary.json.tmp").write_text("")  # what an older version left on a full disk
    (folder / ".fedsuite-reserve").write_bytes(b"\0" * 10)
    reaper = subprocess.Popen([sys.executable, "-m", "simulation.launcher.reaper", token, str(folder), str(home),
                               str(ray)], stdin=subprocess.PIPE, cwd=PROJECT, start_new_session=True)  # fmt: skip
    time.sleep(2)  # the reaper has started (a launch's Ray agents come 20 s after it)
    shell, child = untagged_orphan(token, tmp_path, "b")
    try:
        shell.wait()
        time.sleep(1.5)  # the reaper has recorded the tree meanwhile
        reaper.stdin.close()
        assert reaper.wait(30) == 0
        assert not alive(child)
        assert not home.exists() and not ray.exists()
        assert json.loads((folder / "summary.json").read_text())["status"] == "interrupted"
        assert sorted(p.name for p in folder.iterdir()) == ["summary.json"]
    finally:
        if alive(child):
            os.kill(child, 9)
