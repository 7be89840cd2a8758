"""Real `flwr run` Ray simulations: a short one in every CI run, the default experiment when asked (-m slow).

Most tests here start a local SuperLink and Ray workers and train for real: from about half a minute to a few
minutes each on a small machine, during which pytest by itself prints nothing. So every test of this module writes
one line to the terminal when it starts (its name and what it runs, from its docstring) and one when it ends (its
time), with or without -q and -s (the `announce` fixture below).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from fedsuite.run.inprocess import InProcessProxy, remove_client_state, run_inprocess
from fedsuite.state.store import SHARED_MEMORY
from simulation.launcher import flower, launch
from simulation.launcher.processes import new_token, stop_tagged, tagged_processes
from simulation.launcher.project import PROJECT
from tests.conftest import SESSION

SHORT = {
    "dataset": "fashion-mnist",
    "model": "2nn",
    "num-clients": 4,
    "clients-per-round": 2,
    "num-server-rounds": 2,
    "local-epochs": 1,
    "batch-size": 50,
    "lr": 0.1,
    "run-name": "short",
}


def what_it_runs(function) -> str:
    """The first sentence of a test's docstring, on one line."""
    doc = " ".join((function.__doc__ or "").split())
    return doc.split(". ")[0].rstrip(".")[:150] or function.__name__


@pytest.fixture(autouse=True)
def announce(request):
    """A line on the terminal when a test starts and when it ends, written past pytest's output capture."""
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    capture = request.config.pluginmanager.getplugin("capturemanager")

    def write(line: str) -> None:
        terminal = getattr(reporter, "_tw", None)
        if terminal is not None and terminal.width_of_current_line:  # after a progress dot: start a line
            terminal.line()
        reporter.write_line(line)

    def say(line: str) -> None:
        if reporter is None:  # e.g. -p no:terminal
            return
        if capture is None:
            write(line)
            return
        with capture.global_and_fixture_disabled():
            write(line)

    start = time.monotonic()
    say(f"{request.node.name}: {what_it_runs(request.function)} …")
    yield
    say(f"{request.node.name}: done in {time.monotonic() - start:.0f} s")


@pytest.fixture
def flwr_home(tmp_path, monkeypatch):
    home = tmp_path / "flwr-home"
    monkeypatch.setenv("FLWR_HOME", str(home))
    yield home
    assert not tagged_processes(env=SESSION), "simulation.run left processes of its run running"


def test_flwr_run_writes_the_results_files(tmp_path, flwr_home):
    """A short Ray run (2NN on Fashion-MNIST, 4 clients, 2 per round, 2 rounds) writes every results file."""
    folder = launch.run({**SHORT, "out-dir": str(tmp_path / "results")}, quiet=True)
    rows = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in rows)
    assert rows[2]["cohort"] == 2 and rows[2]["replies"] == 2 and rows[2]["bytes_up_per_client"] > 0
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 2
    assert summary["final_accuracy"] == rows[2]["accuracy"] > 0.5  # a 2NN learns Fashion-MNIST in 2 rounds
    config = json.loads((folder / "config.json").read_text())
    assert config["run_config"]["num-clients"] == 4 and config["num_parameters"] == 199210
    assert (folder / "rounds.csv").read_text().splitlines()[0].startswith("round,accuracy")
    assert (folder / "accuracy.png").stat().st_size > 1000


def test_plain_flwr_run_uses_flowers_default_federation(tmp_path, flwr_home):
    """`flwr run .` as a new user types it: Flower simulates 2 SuperNodes, the default experiment (100 clients,
    10 per round; here 1 round of 1 epoch) runs on them with every sampled client trained."""
    token = new_token()
    cmd = [flower.flwr_executable(), "run", str(PROJECT), "--stream", "-c",
           f"num-server-rounds=1 local-epochs=1 out-dir='{tmp_path}' run-name='plain'"]  # fmt: skip
    try:
        proc = subprocess.run(cmd, env=flower.flower_env(token, flwr_home), cwd=PROJECT, capture_output=True,
                              text=True, timeout=500)  # fmt: skip
    finally:
        stop_tagged(token)  # the detached local SuperLink
    summary = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert summary["status"] == "completed", proc.stdout[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "plain" / "rounds.jsonl").read_text().splitlines()]
    assert rows[1]["cohort"] == 10 and rows[1]["replies"] == 10 and rows[1]["failures"] == 0
    assert json.loads((tmp_path / "plain" / "config.json").read_text())["run_config"]["num-clients"] == 100


def test_preflight_stops_missing_data_before_flower_starts(tmp_path, flwr_home):
    """simulation.run with no CIFAR-10 files stops with exit code 2 before Flower starts (seconds, no Ray)."""
    args = f"dataset='cifar10' data-dir='{tmp_path}' num-clients=2 clients-per-round=1"
    proc = subprocess.run(
        [sys.executable, "-m", "simulation.run", "-c", args],
        capture_output=True,
        text=True,
        cwd=PROJECT,
        timeout=120,
    )
    assert proc.returncode == 2 and "cifar-10-batches-py" in proc.stderr and "data-dir" in proc.stderr
    assert "flwr run" not in proc.stdout


def test_failed_run_exits_nonzero(tmp_path, flwr_home):
    """The ServerApp fails (no CIFAR files, preflight skipped); `flwr run --stream` itself would exit 0 here."""
    empty = tmp_path / "no-data"
    empty.mkdir()
    args = f"dataset='cifar10' data-dir='{empty}' num-clients=2 clients-per-round=1 out-dir='{tmp_path}'"
    proc = subprocess.run(
        [sys.executable, "-m", "simulation.run", "--no-preflight", "-c", args],
        capture_output=True,
        text=True,
        cwd=PROJECT,
        env=os.environ,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "finished:failed" in proc.stderr
    assert "cifar-10-batches-py" in proc.stdout  # the ServerApp's error reached the log


@pytest.mark.slow  # the main suite's Ray run of a stateful algorithm: test_many_partitions_…[feddyn-disk]
def test_stateful_algorithm_under_ray_equals_the_inprocess_run(tmp_path, flwr_home, monkeypatch):
    """SCAFFOLD keeps c_i in per-partition files; had they been lost between rounds, c_i would restart at 0 and
    the trajectory would differ from the in-process run (clients train 3 of 4 per round, so they repeat)."""
    cfg = {"dataset": "synthetic-lsq", "algorithm": "scaffold", "num-clients": 4, "clients-per-round": 3,
           "num-server-rounds": 4, "local-steps": 5, "batch-size": 10, "lr": 0.02, "run-name": "scaffold"}  # fmt: skip
    folder = launch.run({**cfg, "out-dir": str(tmp_path)}, quiet=True)
    ray_error = json.loads((folder / "rounds.jsonl").read_text().splitlines()[-1])["relative_error"]
    strategy = run_inprocess(cfg)
    assert ray_error == pytest.approx(strategy.plan.evaluate(strategy.x)["relative_error"], rel=1e-6)
    fit = InProcessProxy.fit

    def forgetful_fit(self, ins, timeout, group_id):  # what lost client state would look like
        root = Path(tempfile.gettempdir())  # the per-run folders of both modes are below one of these two
        for folder in (SHARED_MEMORY, root):
            for path in folder.glob(f"fedsuite-client-state*/run-{self.context.run_id}/*.state"):
                path.unlink()
        return fit(self, ins, timeout, group_id)

    monkeypatch.setattr(InProcessProxy, "fit", forgetful_fit)
    forgetful = run_inprocess(cfg, keep_client_state=True)  # state in files (not the process's memory tier)
    remove_client_state(forgetful)
    assert forgetful.plan.evaluate(forgetful.x)["relative_error"] != pytest.approx(ray_error, rel=1e-4)


@pytest.mark.slow
def test_default_experiment_learns(tmp_path, flwr_home):
    """The default experiment (docs/getting-started.md): 100 clients, 10 per round, Dirichlet 0.3, small CNN, 20
    rounds."""
    folder = launch.run({"out-dir": str(tmp_path), "run-name": "default"}, quiet=True)
    summary = json.loads((folder / "summary.json").read_text())
    # what happened, not how long it took (a loaded machine is slower; docs/performance.md measures speed)
    assert summary["status"] == "completed" and summary["rounds_completed"] == 20
    assert summary["final_accuracy"] > 0.7


def test_benchmark_short_run_prints_the_ratio_last(tmp_path, flwr_home, capsys):
    """simulation.benchmarks.overhead: 3 rounds under Ray and the same work in-process; the batched ratio (in process,
    batched ÷ one at a time) comes just before the overhead ratio, which is printed last."""
    from simulation.benchmarks import overhead as benchmark

    benchmark.main(["--rounds", "3", "--num-clients", "4", "--clients-per-round", "2", "--local-steps", "3",
                    "--model", "2nn", "--out-dir", str(tmp_path)])  # fmt: skip
    *_, before_last, last = capsys.readouterr().out.strip().splitlines()
    name, value = last.split()
    assert name == "overhead_ratio" and float(value) > 0
    name, value = before_last.split()
    assert name == "batched_ratio" and float(value) > 0  # the same run in process, batched ÷ one at a time
    report = json.loads((tmp_path / "benchmark.json").read_text())
    assert report["train_loss_max_abs_diff"] < 1e-3  # both paths did the same local work
    assert report["batched_fell_back"] == []  # the batched run trained its clients stacked
    assert len(report["rounds"]["batched_seconds"]) == len(report["rounds"]["inprocess_seconds"]) == 3


@pytest.mark.parametrize("engine", [pytest.param("flwr", marks=pytest.mark.slow), "inprocess"])
def test_compare_short_run_writes_table_and_plot(engine, tmp_path, flwr_home, capsys):
    """simulation.compare: FedAvg and SCAFFOLD, 2 runs of 2 rounds, then the same command again reuses both. The
    Ray runs (engine flwr, the default) are in the slow set; every other Ray test covers the launch they share."""
    from simulation import compare

    rc = compare.main(["--algorithms", "fedavg,scaffold", "--engine", engine, "-c",
                       "dataset='synthetic-lsq' num-clients=4 clients-per-round=2 num-server-rounds=2 lr=0.02",
                       "--out", str(tmp_path)])  # fmt: skip
    assert rc == 0
    table = (tmp_path / "comparison.md").read_text()
    assert "| fedavg |" in table and "| scaffold |" in table and "| 4.0 |" in table  # SCAFFOLD: 2 down + 2 up
    assert (tmp_path / "comparison.png").stat().st_size > 1000
    table_before = (tmp_path / "comparison.md").read_text()
    rc = compare.main(["--algorithms", "fedavg,scaffold", "--engine", engine, "--skip-finished", "-c",
                       "dataset='synthetic-lsq' num-clients=4 clients-per-round=2 num-server-rounds=2 lr=0.02",
                       "--out", str(tmp_path)])  # fmt: skip
    assert rc == 0 and capsys.readouterr().out.count("reused") == 2  # resumable: finished runs are not redone
    assert (tmp_path / "comparison.md").read_text() == table_before


def test_compare_in_process_engine_records_the_same_results_folder(tmp_path):
    """--engine inprocess: the same strategy and clients without Ray; the runs' numbers equal run_inprocess's and a
    diverging run is reported as such, not as completed."""
    from simulation import compare

    setting = "dataset='synthetic-lsq' num-clients=4 clients-per-round=2 num-server-rounds=3"
    rc = compare.main(["--engine", "inprocess", "--algorithms", "losac,fedsaga", "-c", setting + " lr=0.02",
                       "--out", str(tmp_path)])  # fmt: skip
    assert rc == 0
    summary = json.loads((tmp_path / "runs" / "losac" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 3
    direct = run_inprocess({"dataset": "synthetic-lsq", "num-clients": 4, "clients-per-round": 2,
                            "num-server-rounds": 3, "lr": 0.02, "algorithm": "losac"})  # fmt: skip
    assert summary["final_relative_error"] == pytest.approx(direct.plan.evaluate(direct.x)["relative_error"], rel=1e-6)
    assert "--engine inprocess" in (tmp_path / "comparison.md").read_text()
    rc = compare.main(["--engine", "inprocess", "--algorithms", "fedavg", "-c", setting + " lr=50.0",
                       "--out", str(tmp_path / "diverged")])  # fmt: skip
    assert rc == 1
    assert json.loads((tmp_path / "diverged" / "runs" / "fedavg" / "summary.json").read_text())["status"] == "diverged"


def _invariant_gap(algorithm: str, ckpt, num_clients: int) -> float:
    """The algorithm's server/client consistency from a checkpoint: SCAFFOLD c = mean_N c_i, FedDyn
    Σh_i/N = mean_N(−∇L_i/α), FedADMM x = mean_N x̂_i (docs/algorithms/: scaffold.md, feddyn.md, fedadmm.md), each
    client's state as it would train next (fedsuite.state.store.effective)."""
    from fedsuite.config.run_config import resolve
    from fedsuite.data import load_dataset
    from fedsuite.server.app import initial_model
    from fedsuite.state.store import DiskStore, effective

    accepted, s = ckpt.state["accepted"], ckpt.state["rule"]
    views = [effective(DiskStore(ckpt.client_state, pid), accepted.get(pid, 0)) for pid in range(num_clients)]
    dim = s["x"].size
    if algorithm == "scaffold":
        client_mean = np.mean([v.get("c_i", np.zeros(dim)) for v in views], axis=0)
        return float(np.abs(s["c"] - client_mean).max())
    if algorithm == "feddyn":
        alpha = float(ckpt.run_config["feddyn-alpha"])
        client_mean = np.mean([-v.get("dual", np.zeros(dim)) / alpha for v in views], axis=0)
        return float(np.abs(s["h_sum"] / num_clients - client_mean).max())
    cfg = resolve(ckpt.run_config)
    x_init = initial_model(cfg, load_dataset(cfg)).astype(np.float64)
    client_mean = np.mean([v.get("xhat", x_init) for v in views], axis=0)
    return float(np.abs(s["x"] - client_mean).max())


# The main suite runs FedDyn on disk; SCAFFOLD in memory under Ray is test_stateful_algorithm_under_ray_… above.
MANY_ON_TWO = [("feddyn", "disk"),
               pytest.param("scaffold", "memory", marks=pytest.mark.slow),
               pytest.param("fedadmm", "memory", marks=pytest.mark.slow),
               pytest.param("scaffold", "disk", marks=pytest.mark.slow),
               pytest.param("feddyn", "memory", marks=pytest.mark.slow),
               pytest.param("fedadmm", "disk", marks=pytest.mark.slow)]  # fmt: skip


@pytest.mark.parametrize("algorithm,mode", MANY_ON_TWO)
def test_many_partitions_on_two_supernodes_equal_the_inprocess_run(algorithm, mode, tmp_path, flwr_home):
    """40 partitions, 20 per round, on 2 SuperNodes (10 messages per node per round, run by 2 workers at once):
    the stateful runs equal the in-process run to 1e-6 and keep their invariants (no client state may
    live in a shared node's Context, which Flower writes back last-write-wins). The main suite's case also draws
    each client's K_i per round, which the fit config carries through Ray, drops clients and samples only the
    available ones (docs/running/systems.md): the same events as in process; and its clients start from relaxed
    points (docs/running/relaxed-init.md), their last local models kept on the nodes beside their duals."""
    from fedsuite.results import checkpoint

    cfg = {"dataset": "synthetic-lsq", "algorithm": algorithm, "num-clients": 40, "clients-per-round": 20,
           "num-server-rounds": 3, "local-steps": 3, "batch-size": 10, "lr": 0.02, "synthetic-samples": 20,
           "client-state": mode, "eval-every": 1000}  # fmt: skip
    if (algorithm, mode) == MANY_ON_TWO[0]:  # and the other system models: drop-outs, Markov availability
        cfg.update({"local-work": "per-round", "local-steps-min": 1, "dropout-rate": 0.2, "availability": "markov",
                    "availability-p-off": 0.3, "availability-p-on": 0.5, "min-replies": 0.25,
                    "relaxed-init": 0.1})  # fmt: skip
    if mode == "disk":
        cfg["client-state-dir"] = str(tmp_path / "state")
    folder = launch.run({**cfg, "out-dir": str(tmp_path), "run-name": "r", "checkpoint-every": 3}, quiet=True,
                     supernodes=2)  # fmt: skip
    ckpt = checkpoint.load(folder)
    assert ckpt.server_round == 3 and len(list(ckpt.client_state.glob("*.state"))) > 20
    if mode == "disk":
        shutil.rmtree(tmp_path / "state")
    inprocess = run_inprocess(cfg)
    np.testing.assert_allclose(ckpt.state["rule"]["x"], inprocess.x, atol=1e-6, rtol=0)
    assert _invariant_gap(algorithm, ckpt, 40) < 1e-6
    if "local-work" in cfg:  # the clients took different K_i, and the rows say so
        rows = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
        assert all(1 <= r["steps_min"] < r["steps_max"] <= 3 for r in rows[1:])
        assert sum(r["dropped"] for r in rows[1:]) > 0 and all(r["unavailable"] > 0 for r in rows[1:])


def test_batched_shares_under_ray_equal_the_one_at_a_time_run(tmp_path, flwr_home):
    """12 partitions, 6 per round, on 2 SuperNodes with batch-clients=true and batch-messages=2: each node gets its
    share of 3 clients in one message and trains them as one batched computation (docs/running/batched.md); the
    SCAFFOLD run equals the in-process run with clients one at a time to 1e-6 and keeps its invariant."""
    from fedsuite.results import checkpoint

    cfg = {"dataset": "synthetic-lsq", "algorithm": "scaffold", "num-clients": 12, "clients-per-round": 6,
           "num-server-rounds": 3, "local-steps": 3, "batch-size": 10, "lr": 0.02, "synthetic-samples": 20,
           "eval-every": 1000}  # fmt: skip
    folder = launch.run({**cfg, "batch-clients": True, "batch-messages": 2, "out-dir": str(tmp_path), "run-name": "r",
                         "checkpoint-every": 3}, quiet=True, supernodes=2)  # fmt: skip
    log = (folder / "flwr.log").read_text()
    assert "round 1's 6 clients in 2 message(s)" in log
    assert "this node's first share, 3 clients, trained as stacked groups of [3]" in log  # from a node's worker
    assert "one client at a time" not in log and "trains alone" not in log
    ckpt = checkpoint.load(folder)
    inprocess = run_inprocess(cfg)
    np.testing.assert_allclose(ckpt.state["rule"]["x"], inprocess.x, atol=1e-6, rtol=0)
    assert _invariant_gap("scaffold", ckpt, 12) < 1e-6


def test_compressed_broadcasts_and_uploads_under_ray_equal_the_inprocess_run(tmp_path, flwr_home):
    """12 partitions, 4 per round, on 2 SuperNodes, a top-k downlink with its catch-up messages and a top-k uplink
    with error feedback (docs/running/compression.md): the bytes travel in Flower's messages and the nodes keep
    each client's copy and error; the model and every row's bytes equal the in-process run's."""
    from fedsuite.results import checkpoint
    from tests.observing import Rows

    cfg = {"dataset": "synthetic-lsq", "algorithm": "scaffold", "num-clients": 12, "clients-per-round": 4,
           "num-server-rounds": 5, "local-steps": 3, "batch-size": 10, "lr": 0.02, "synthetic-samples": 20,
           "synthetic-dim": 30, "eval-every": 1000, "compress-down": "topk", "compress-down-k": 3,
           "compress-up": "topk", "compress-up-k": 4, "compress-feedback": "ef"}  # fmt: skip
    folder = launch.run({**cfg, "out-dir": str(tmp_path), "run-name": "r", "checkpoint-every": 5}, quiet=True,
                        supernodes=2)  # fmt: skip
    rows = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["round"] > 0]
    seen = Rows()
    inprocess = run_inprocess(cfg, observers=[seen])
    expected = [r for r in seen.rows if r["round"] > 0]
    for key in ("bytes_down_per_client", "bytes_up_per_client", "replies", "rejected"):
        assert [r[key] for r in rows] == [r[key] for r in expected], key
    assert min(r["bytes_down_per_client"] for r in rows[1:]) < 2 * 4 * 30  # some client caught up on messages
    np.testing.assert_allclose(checkpoint.load(folder).state["rule"]["x"], inprocess.x, atol=1e-6, rtol=0)
