"""A run stops when told and says how it ended: real `python -m simulation.run` launches (Ray simulations).

Each test checks the exit code, summary.json's status, that no process of the launch is left (every one
carries the launch's token in its environment; simulation.launcher.processes finds them through /proc) and what the
user reads. Ctrl-C to the process group, a killed driver and a diverging run run in CI; the other cases of
the honest-runs issue are marked slow."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulation.launcher.processes import tagged_processes
from tests.conftest import SESSION

PROJECT = Path(__file__).resolve().parent.parent
LONG = ("dataset='synthetic-lsq' num-clients=4 clients-per-round=2 num-server-rounds=400 local-steps=300 "
        "batch-size=5 lr=0.002")  # fmt: skip  # ≈0.3 s per round: never finishes within a test
STOP_WAIT = 120  # seconds a stopped launch may take on a busy machine before a test gives up waiting (not a bound)


@pytest.fixture(autouse=True)
def nothing_left_behind():
    assert not tagged_processes(env=SESSION), "processes of an earlier launch are still running"
    yield
    deadline = time.monotonic() + STOP_WAIT
    while tagged_processes(env=SESSION) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not tagged_processes(env=SESSION), "a launch left processes running"


def launch(tmp_path, config: str, *prefix: str, env: dict | None = None) -> subprocess.Popen:
    out = open(tmp_path / "console.txt", "w")
    return subprocess.Popen([*prefix, sys.executable, "-m", "simulation.run", "-c",
                             f"{config} out-dir='{tmp_path}' run-name='r'"],
                            stdout=out, stderr=subprocess.STDOUT, cwd=PROJECT, start_new_session=True,
                            env=env)  # fmt: skip


def wait_for_rows(tmp_path, count: int, proc: subprocess.Popen, timeout: float = 240) -> int:
    path = tmp_path / "r" / "rounds.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = len(path.read_text().splitlines()) if path.exists() else 0
        if rows >= count:
            return rows
        assert proc.poll() is None, (tmp_path / "console.txt").read_text()[-3000:]
        time.sleep(0.3)
    raise AssertionError("the run did not reach its rounds in time")


def summary(tmp_path) -> dict:
    return json.loads((tmp_path / "r" / "summary.json").read_text())


def console(tmp_path) -> str:
    return (tmp_path / "console.txt").read_text()


def test_ctrl_c_stops_the_whole_run(tmp_path):
    proc = launch(tmp_path, LONG)
    rows = wait_for_rows(tmp_path, 4, proc)
    assert len(tagged_processes(env=SESSION)) >= 4  # SuperLink, SuperExec, flwr-simulation, Ray …
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    assert proc.wait(timeout=STOP_WAIT) == 130
    assert not tagged_processes(env=SESSION)
    s = summary(tmp_path)
    assert s["status"] == "interrupted" and "SIGINT" in s["reason"] and s["rounds_completed"] >= rows - 1
    assert "Traceback" not in console(tmp_path) and "interrupted (stopped by SIGINT)" in console(tmp_path)
    n = len((tmp_path / "r" / "rounds.jsonl").read_text().splitlines())
    time.sleep(2)
    assert len((tmp_path / "r" / "rounds.jsonl").read_text().splitlines()) == n  # nothing trains any more


@pytest.mark.slow
def test_a_killed_driver_leaves_nothing_running(tmp_path):
    """(The resume test below kills its driver the same way and checks the same, in CI.) SIGKILL to the driver
    alone cannot be caught: the reaper (its pipe from the driver closes) stops the launch's
    processes, Ray's agents included, removes its private folders and marks the run interrupted."""
    stop_and_check(tmp_path, KILL_DRIVER)


def test_a_run_killed_mid_round_resumes_from_its_last_checkpoint(tmp_path):
    """SIGKILL to the driver in round ≈8 of a SCAFFOLD run that checkpoints every 3 rounds: the reaper stops every
    process of the launch (Ray's agents included) and removes its private folders; the summary says
    interrupted and names the resume command; resuming (to 2 rounds past the checkpoint) redoes the lost rounds
    and ends where the uninterrupted run ends."""
    from fedsuite.results import checkpoint
    from fedsuite.run.inprocess import run_inprocess

    config = LONG + " algorithm='scaffold' checkpoint-every=3"
    recorder = Recorder()  # SIGKILL cannot be caught: the reaper stops the launch, Ray's agents included
    try:
        proc = launch(tmp_path, config)
        wait_for_rows(tmp_path, 9, proc)  # round 0 + 8 rounds: checkpoint 6 written, round 9 under way
        private = reaper_folders(proc.pid)
        assert len(private) == 2 and all(Path(p).is_dir() for p in private)  # FLWR_HOME, Ray's folder
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + STOP_WAIT
        while (recorder.left() or summary(tmp_path)["status"] == "running") and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not recorder.left(), f"left running: {recorder.left()}"
    finally:
        recorder.close()
    s = summary(tmp_path)
    assert s["status"] == "interrupted" and s["resume_command"] == checkpoint.resume_command(tmp_path / "r"), s
    deadline = time.monotonic() + STOP_WAIT
    while any(Path(p).exists() for p in private) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not any(Path(p).exists() for p in private), private
    done = checkpoint.load(tmp_path / "r").server_round
    assert done >= 6 and done % 3 == 0
    target = done + 2
    resumed = subprocess.run([sys.executable, "-m", "simulation.run", "-c",
                              f"resume-from='{tmp_path / 'r'}' num-server-rounds={target}"],
                             capture_output=True, text=True, cwd=PROJECT, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "r" / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == list(range(target + 1))  # rounds after the checkpoint ran once more
    assert summary(tmp_path)["status"] == "completed"
    values = dict(pair.split("=") for pair in config.split())
    cfg = {k: (v.strip("'") if v.startswith("'") else float(v) if "." in v or "e" in v else int(v))
           for k, v in values.items()}  # fmt: skip
    uninterrupted = run_inprocess({**cfg, "num-server-rounds": target})
    expected = uninterrupted.plan.evaluate(uninterrupted.x)["relative_error"]
    assert rows[-1]["relative_error"] == pytest.approx(expected, rel=1e-6)


def test_a_diverging_run_exits_3_with_one_line_per_client(tmp_path):
    """lr=1e6: every client overflows in round 1. Also: a new launch starts cleanly after the two stopped ones
    above, and the venv's python works with the venv not activated (its bin folder is not on PATH)."""
    bare = {**os.environ, "PATH": "/usr/local/bin:/usr/bin:/bin"}
    bare.pop("VIRTUAL_ENV", None)
    proc = launch(tmp_path, "dataset='synthetic-lsq' num-clients=4 clients-per-round=3 local-steps=20 lr=1e6", env=bare)
    proc.wait(timeout=300)
    text = console(tmp_path)
    assert proc.returncode == 3, text[-3000:]
    s = summary(tmp_path)
    assert s["status"] == "diverged" and "training diverged" in s["reason"]
    rejected = [line for line in text.splitlines() if " rejected: FloatingPointError" in line]
    assert len(rejected) == 3 and "Traceback" not in text
    assert (tmp_path / "r" / "clients.log").read_text().count("Traceback") == 3
    assert "error: run" in text and "diverged" in text.splitlines()[-2]


@pytest.mark.slow
def test_sigint_to_the_driver_only_and_sigterm_from_timeout(tmp_path):
    proc = launch(tmp_path, LONG)
    wait_for_rows(tmp_path, 3, proc)
    os.kill(proc.pid, signal.SIGINT)  # not the group: the driver alone must stop the rest
    assert proc.wait(timeout=STOP_WAIT) == 130
    assert not tagged_processes(env=SESSION)
    second = tmp_path / "second"
    second.mkdir()
    proc = launch(second, LONG, "timeout", "40")  # `timeout` sends SIGTERM to the driver
    proc.wait(timeout=120)
    assert proc.returncode == 124  # timeout's own code when it had to stop the command
    assert summary(second)["status"] == "interrupted" and "SIGTERM" in summary(second)["reason"]


@pytest.mark.slow
def test_a_dead_ray_worker_fails_the_run_with_a_message(tmp_path):
    proc = launch(tmp_path, LONG.replace("clients-per-round=2", "clients-per-round=4"))
    wait_for_rows(tmp_path, 2, proc)
    actors = [p for p in tagged_processes(env=SESSION) if b"ClientAppActor" in Path(f"/proc/{p}/cmdline").read_bytes()]
    os.kill(actors[0], signal.SIGKILL)
    proc.wait(timeout=300)
    assert proc.returncode == 1
    s = summary(tmp_path)
    assert s["status"] == "failed" and "simulation worker (Ray actor) died" in s["reason"]
    assert "Start it again" in console(tmp_path)


@pytest.mark.slow
def test_a_client_state_dir_that_fails_at_run_time_fails_the_run(tmp_path):
    """Skipping the pre-run check, SCAFFOLD's clients cannot write their state: every fit is rejected, the run
    fails in round 1 with the OSError in clients.log (it used to 'complete' without any client training)."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the state folder should be")
    proc = subprocess.Popen([sys.executable, "-m", "simulation.run", "--no-preflight", "-c",
                             f"dataset='synthetic-lsq' algorithm='scaffold' num-clients=4 clients-per-round=2 "
                             f"client-state='disk' client-state-dir='{blocker}/state' out-dir='{tmp_path}' "
                             "run-name='r'"],
                            stdout=open(tmp_path / "console.txt", "w"), stderr=subprocess.STDOUT, cwd=PROJECT,
                            start_new_session=True)  # fmt: skip
    proc.wait(timeout=300)
    assert proc.returncode == 1 and summary(tmp_path)["status"] == "failed"
    assert "NotADirectoryError" in (tmp_path / "r" / "clients.log").read_text()


@pytest.mark.slow
def test_two_launches_with_one_run_name(tmp_path):
    config = "dataset='synthetic-lsq' num-clients=4 clients-per-round=2 num-server-rounds=2"
    first = launch(tmp_path, config)
    wait_for_rows(tmp_path, 1, first)
    second = subprocess.run([sys.executable, "-m", "simulation.run", "-c",
                             f"{config} out-dir='{tmp_path}' run-name='r'"],
                            capture_output=True, text=True, cwd=PROJECT, timeout=120)  # fmt: skip
    assert second.returncode == 2 and "already holds a run" in second.stderr
    first.wait(timeout=300)
    assert first.returncode == 0 and summary(tmp_path)["status"] == "completed"


@pytest.mark.slow
def test_plain_flwr_run_that_the_server_app_rejects_is_marked_failed(tmp_path):
    """Flower's default federation has 2 SuperNodes; with client-mapping='fixed' 4 clients cannot be mapped, the
    ServerApp raises, and the summary says failed (it used to stay `running` forever)."""
    from simulation.launcher.flower import flower_env, flwr_executable
    from simulation.launcher.processes import new_token

    token = new_token()
    env = flower_env(token, tmp_path / "flwr-home")
    config = (f"dataset='synthetic-lsq' num-clients=4 clients-per-round=2 client-mapping='fixed' out-dir='{tmp_path}' "
              "run-name='r'")  # fmt: skip
    try:
        subprocess.run([flwr_executable(), "run", str(PROJECT), "--stream", "-c", config], env=env, cwd=PROJECT,
                       capture_output=True, timeout=300)  # fmt: skip
        s = summary(tmp_path)
        assert s["status"] == "failed" and "FederationError" in s["reason"]
    finally:
        from simulation.launcher.processes import stop_tagged

        stop_tagged(token)


# ---- every process of a launch, Ray's agents included, on every kind of stop ------------------------------------
STOPS = [  # (signal, to the process group?, the driver's exit code; None: killed)
    (signal.SIGINT, True, 130),
    (signal.SIGTERM, False, 143),
    (signal.SIGHUP, False, 129),
    (signal.SIGKILL, True, None),
]
KILL_DRIVER = (signal.SIGKILL, False, None)


class Recorder:
    """Records, every 0.3 s in a thread, every process of this test session's launches and all their descendants
    by (pid, start time), with its title: Ray's agents rewrite theirs over their environment, so the session
    marker alone would not see them."""

    def __init__(self):
        import threading

        from simulation.launcher.processes import Launch

        self.launch = Launch(None, env=SESSION)
        self.titles: dict[tuple[int, int], str] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            for pid in self.launch.scan(thorough=False):
                try:  # the latest title: a Ray agent sets its own after it started
                    title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                except OSError:
                    continue
                if title:
                    self.titles[(pid, self.launch.known.get(pid))] = title
            time.sleep(0.3)

    def left(self) -> list[str]:
        from simulation.launcher.processes import process_table

        table = process_table()
        return [title for (pid, start), title in self.titles.items() if table.get(pid, (0, None))[1] == start]

    def close(self):
        """Stop recording; kill what is left of the recorded processes (only after a failed check)."""
        self.done.set()
        self.thread.join()
        from simulation.launcher.processes import process_table

        table = process_table()
        for pid, start in list(self.titles):
            if table.get(pid, (0, None))[1] == start:
                os.kill(pid, signal.SIGKILL)


def stop_and_check(tmp_path, stop) -> float:
    """Launch a long run, wait until Ray's agents run, stop it with `stop`; check that no process of the launch is
    left once it has stopped (however long that takes on a busy machine) and that the run says interrupted; returns
    the seconds from the signal until no process of the launch was left (printed, never asserted)."""
    sig, group, code = stop
    recorder = Recorder()
    proc = launch(tmp_path, LONG)
    try:
        wait_for_rows(tmp_path, 2, proc)
        deadline = time.monotonic() + 60
        while not any("DashboardAgent" in t for t in recorder.titles.values()) and time.monotonic() < deadline:
            time.sleep(0.3)
        titles = " ".join(recorder.titles.values())
        assert "DashboardAgent" in titles and "RuntimeEnvAgent" in titles and "raylet" in titles
        private = reaper_folders(proc.pid)
        assert len(private) == 2 and all(Path(p).is_dir() for p in private)  # FLWR_HOME, Ray's folder
        start = time.monotonic()
        os.killpg(proc.pid, sig) if group else os.kill(proc.pid, sig)
        proc.wait(timeout=STOP_WAIT)
        assert proc.returncode == (code if code is not None else -signal.SIGKILL), console(tmp_path)[-2000:]
        while recorder.left() and time.monotonic() - start < STOP_WAIT:
            time.sleep(0.2)
        seconds = time.monotonic() - start
        assert not recorder.left(), f"{signal.Signals(sig).name}: left running: {recorder.left()}"
        deadline = time.monotonic() + STOP_WAIT  # the reaper marks a killed driver's run once the processes are gone
        while summary(tmp_path)["status"] == "running" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert summary(tmp_path)["status"] == "interrupted"
        assert not [p for p in (tmp_path / "r").iterdir() if p.name.endswith(".tmp") or p.name == ".fedsuite-reserve"]
        deadline = time.monotonic() + STOP_WAIT
        while any(Path(p).exists() for p in private) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not any(Path(p).exists() for p in private), private
        return seconds
    finally:
        if proc.poll() is None:  # a check failed before the stop
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
        recorder.close()


def reaper_folders(driver: int) -> list[str]:
    """The private FLWR_HOME and Ray folder of the launch `driver` started (its reaper's arguments)."""
    from simulation.launcher.processes import process_table

    for pid, (ppid, _) in process_table().items():
        if ppid == driver:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            if "simulation.launcher.reaper" in argv:
                return [p for p in argv[argv.index("simulation.launcher.reaper") + 3 :] if p]
    return []


def stop_repeatedly(tmp_path, times: int) -> list[float]:
    seconds = []
    for i in range(times):
        folder = tmp_path / f"try-{i}"
        folder.mkdir()
        seconds.append(stop_and_check(folder, STOPS[i % len(STOPS)]))
    print("seconds from each stop until no process of the launch was left:", [round(s, 1) for s in seconds])
    return seconds


def test_ray_agents_are_stopped_with_the_launch(tmp_path):
    """SIGTERM to the driver: Ray's DashboardAgent and RuntimeEnvAgent (which lose the token from their environment)
    are gone within seconds, as is every other process of the launch (SIGINT to the group: the Ctrl-C test above;
    every kind of stop, ten launches: the slow test below)."""
    stop_and_check(tmp_path, STOPS[1])


@pytest.mark.slow
def test_ten_stops_in_a_row_leave_no_process_of_any_launch(tmp_path):
    """SIGINT (group), SIGTERM, SIGHUP, SIGKILL (group), in turn, 10 launches: after each, no process of the launch
    (Ray's agents included) is left once it has stopped."""
    stop_repeatedly(tmp_path, 10)


# ---- a stop is recorded as the stop, never as the failure it causes -----------------------------------------------
FAKE_SERVER_APP = """
import os, signal, sys, time
from fedsuite.config.run_config import resolve
from fedsuite.server.app import build_plan
plan = build_plan(resolve({"dataset": "synthetic-lsq", "num-clients": 4, "clients-per-round": 2,
                           "out-dir": sys.argv[1], "run-name": "r"}), run_id=1)
def workers_lost(signum, frame):  # the Ray workers died of the stop before this process handled its signal
    plan.recorder.finish("failed", "round 1: a simulation worker (Ray actor) died")
    time.sleep(1.0)  # a process that takes its time to end
    os._exit(0)
signal.signal(signal.SIGTERM, workers_lost)
print("ready", flush=True)
while True:
    time.sleep(0.1)
"""


def test_a_failure_that_the_stop_causes_is_recorded_as_the_stop(tmp_path):
    """The reaper stops a launch whose ServerApp, once signalled, records a failure: what it does when the stop kills
    the Ray workers before the ServerApp's process has handled its own signal (seen on a loaded machine). summary.json
    goes from running straight to interrupted, with the failure kept in the reason: it never says failed (a test, or
    a user, reading it while the reaper was still removing folders saw failed)."""
    from fedsuite.results.folder import RUN_TOKEN_ENV
    from simulation.launcher.processes import new_token

    token, home, ray_dir = new_token(), tmp_path / "flwr-home", tmp_path / "ray"
    home.mkdir()
    ray_dir.mkdir()
    server_app = subprocess.Popen([sys.executable, "-c", FAKE_SERVER_APP, str(tmp_path)], stdout=subprocess.PIPE,
                                  text=True, cwd=PROJECT, start_new_session=True,
                                  env={**os.environ, RUN_TOKEN_ENV: token, "FLWR_HOME": str(home)})  # fmt: skip
    reaper = subprocess.Popen([sys.executable, "-m", "simulation.launcher.reaper", token, str(tmp_path / "r"),
                               str(home), str(ray_dir)], stdin=subprocess.PIPE, cwd=PROJECT,
                              start_new_session=True)  # fmt: skip
    try:
        assert server_app.stdout.readline() == "ready\n" and summary(tmp_path)["status"] == "running"
        reaper.stdin.close()  # the driver ended
        seen = []
        while reaper.poll() is None:
            status = summary(tmp_path)["status"]
            if not seen or seen[-1] != status:
                seen.append(status)
            time.sleep(0.01)
        assert reaper.returncode == 0 and server_app.wait(timeout=STOP_WAIT) is not None
        assert summary(tmp_path)["status"] == "interrupted" and "failed" not in seen, seen
        reason = summary(tmp_path)["reason"]
        assert reason.startswith("the command that started the run ended") and "simulation worker" in reason
        assert not home.exists() and not ray_dir.exists()
    finally:
        for proc in (server_app, reaper):
            if proc.poll() is None:
                proc.kill()


# ---- plain `flwr run` on a SuperLink of its own -------------------------------------------------------------------
class FakeSuperLink:
    """A listener on 127.0.0.1:port that answers every request 200, as a SuperLink's /health does, and records the
    paths asked: a SuperLink that is not yours."""

    def __init__(self, port: int):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        asked = self.asked = []

        class Answer(BaseHTTPRequestHandler):
            def do_GET(self):
                asked.append(self.path)
                self.send_response(200)
                self.end_headers()

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Answer)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def own_superlink(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulation.launcher.own_superlink", *args], env=env, cwd=PROJECT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def exported(lines: str) -> dict[str, str]:
    import shlex

    return dict(word.split("=", 1) for line in lines.splitlines() for word in shlex.split(line)[1:])


def recipe_env(home: Path) -> dict[str, str]:
    """This session's environment with FLWR_HOME=home and no ports: a shell before the recipe's line."""
    from simulation.launcher.own_superlink import PORT_VARIABLES

    env = {k: v for k, v in os.environ.items() if k not in PORT_VARIABLES}
    env["FLWR_HOME"] = str(home)
    return env


def test_plain_flwr_never_joins_the_listener_on_its_recorded_ports(tmp_path, monkeypatch):
    """The README's recipe for plain `flwr` on a shared machine: the ports recorded for this FLWR_HOME are taken by a
    listener that is not its SuperLink (as a SuperLink of another user would answer Flower's probe), so the recipe
    says which process holds them and moves to fresh ports; a plain `flwr` command then starts a SuperLink of its own
    there and never asks the listener anything; the recipe refuses a SuperLink of its FLWR_HOME on Flower's fixed
    ports; --stop stops that SuperLink by its PID."""
    from simulation.launcher import own_superlink as recipe

    home = tmp_path / "flwr-home"
    env = recipe_env(home)
    taken = int(exported(own_superlink(env).stdout)["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"])
    decoy = FakeSuperLink(taken)
    try:
        again = own_superlink(env)
        assert again.returncode == 0 and f"port {taken}" in again.stderr and f"pid {os.getpid()}" in again.stderr
        env.update(exported(again.stdout))
        ports = (int(env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"]), int(env["FLWR_LOCAL_CONTROL_API_PORT"]))
        assert taken not in ports and env["FLWR_HOME"] == str(home.resolve()) and env["FLWR_TELEMETRY_ENABLED"] == "0"
        listed = subprocess.run([str(Path(sys.executable).parent / "flwr"), "ls"], env=env, cwd=tmp_path,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        assert listed.returncode == 0 and f"127.0.0.1:{ports[0]}" in listed.stdout, listed.stdout + listed.stderr
        assert [link.ports for link in recipe.own_superlinks(home.resolve())] == [ports] and decoy.asked == []
        assert own_superlink(env).stdout == again.stdout  # a new shell: the same SuperLink
        monkeypatch.setattr(recipe, "FLOWER_DEFAULT_PORTS", ports)  # were they Flower's fixed ports: refused
        with pytest.raises(recipe.Refused, match="default ports"):
            recipe.ports_for(home.resolve())
        assert "stopped (pid" in own_superlink(env, "--stop").stderr
        assert recipe.own_superlinks(home.resolve()) == []
    finally:
        decoy.close()
        recipe.stop(home.resolve())


def test_flowers_exit_records_how_the_run_ended(tmp_path):
    """Flower ends its simulation process from the main thread while the ServerApp's thread is cut off without an
    exception: Flower's exit handler records the stop. `flwr stop` (SIGINT): interrupted, and a round the ServerApp
    still finishes is not recorded; Flower's error exit: failed; a run that had ended stays as it was."""
    import threading

    from fedsuite.config.run_config import resolve
    from fedsuite.server.loop import StopAwareRecorder, record_flower_exit

    def recorder(name: str) -> StopAwareRecorder:
        return StopAwareRecorder(tmp_path / name, dict(resolve({"dataset": "synthetic-lsq"})), {}, [0.5], 10)

    def flower_exits(rec: StopAwareRecorder, code: int) -> dict:
        thread = threading.Thread(target=record_flower_exit, args=(rec, code))  # Flower's main thread
        thread.start()
        thread.join()
        return json.loads((rec.folder / "summary.json").read_text())

    stopped = recorder("stopped")
    stopped.record({"round": 0, "loss": 1.0})
    s = flower_exits(stopped, 1)
    assert s["status"] == "interrupted" and "flwr stop" in s["reason"], s
    stopped.record({"round": 1, "loss": 0.5})  # the ServerApp's thread, until Flower's forced exit
    assert stopped.rows == [stopped.rows[0]] and len((stopped.folder / "rounds.jsonl").read_text().splitlines()) == 1
    assert flower_exits(stopped, 3)["status"] == "interrupted"
    s = flower_exits(recorder("crashed"), 700)
    assert s["status"] == "failed" and "exit code 700" in s["reason"]
    done = recorder("done")
    done.finish("completed")
    assert flower_exits(done, 1)["status"] == "completed"


@pytest.mark.slow
def test_flwr_stop_ends_a_plain_flwr_run_interrupted(tmp_path):
    """A plain `flwr run --stream` on the recipe's own SuperLink, stopped with `flwr stop <run-id>`: summary.json
    says interrupted and why, with no row after the stop, `flwr run --stream` exits 0 all the same (Flower's CLI),
    and the recipe's --stop stops the SuperLink. (The exit handler that records it: the test above.)"""
    from simulation.launcher import own_superlink as recipe

    home = tmp_path / "flwr-home"
    env = recipe_env(home)
    env.update(exported(own_superlink(env).stdout))
    flwr = str(Path(sys.executable).parent / "flwr")
    proc = subprocess.Popen([flwr, "run", str(PROJECT), "--stream", "-c", f"{LONG} out-dir='{tmp_path}' run-name='r'"],
                            stdout=open(tmp_path / "console.txt", "w"), stderr=subprocess.STDOUT, env=env,
                            cwd=PROJECT)  # fmt: skip
    try:
        wait_for_rows(tmp_path, 3, proc)
        run_id = re.search(r"Successfully started run (\d+)", console(tmp_path)).group(1)
        stopped = subprocess.run([flwr, "stop", run_id], env=env, cwd=PROJECT, capture_output=True, text=True,
                                 timeout=120)  # fmt: skip
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert proc.wait(timeout=STOP_WAIT) == 0  # Flower's `flwr run --stream`: 0 whatever became of the run
        s = summary(tmp_path)
        assert s["status"] == "interrupted" and "flwr stop" in s["reason"], s
        assert len((tmp_path / "r" / "rounds.jsonl").read_text().splitlines()) == s["rounds_completed"] + 1
        assert "stopped (pid" in own_superlink(env, "--stop").stderr
    finally:
        if proc.poll() is None:
            proc.kill()
        recipe.stop(home.resolve())
