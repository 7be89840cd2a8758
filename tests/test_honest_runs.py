"""A run tells the truth (fast part, no Ray): statuses failed / diverged with their reasons in summary.json,
one console line per failed client and its traceback in clients.log, one run per results folder, and the
pre-run checks (malformed -c, repeated keys, unwritable folders, corrupt dataset files, flwr off PATH).
The real `flwr run` cases (signals, a killed driver, a dead Ray worker …) are in tests/test_run_control.py."""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedsuite.config.run_config import ConfigError
from fedsuite.data.datasets import DEBIAN_FASHION_MNIST, DatasetCorrupt, read_idx
from fedsuite.node.client import RuleClient, client_for
from fedsuite.results.folder import ResultsFolderTaken, RunRecorder, claim_folder, mark_stopped
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.guard import RunAborted
from simulation.launcher import flower, overrides
from simulation.launcher.console import ConsoleFilter
from tests.helpers import LSQ
from tests.observing import Watch

PROJECT = Path(__file__).resolve().parent.parent


def recorded(tmp_path, **overrides) -> dict:
    return {**LSQ, "eval-every": 1, "out-dir": str(tmp_path), "run-name": "r", **overrides}


def summary(tmp_path) -> dict:
    return json.loads((tmp_path / "r" / "summary.json").read_text())


def rows(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "r" / "rounds.jsonl").read_text().splitlines()]


# ---- statuses ----------------------------------------------------------------------------------------------
def test_clients_that_diverge_stop_the_run_as_diverged_with_one_line_each(tmp_path, caplog):
    """lr=1e6: every client's uplink overflows; each is rejected with one console line (no traceback), its
    traceback goes to clients.log, and the round below min-replies ends the run as diverged."""
    with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"), pytest.raises(RunAborted) as exc:
        run_inprocess(recorded(tmp_path, lr=1e6, **{"local-steps": 20}), record=True)
    assert exc.value.status == "diverged"
    s = summary(tmp_path)
    assert s["status"] == "diverged" and "training diverged" in s["reason"] and s["rounds_completed"] == 1
    lines = [r.message for r in caplog.records if " rejected: " in r.message]
    assert len(lines) == 5 and all("\n" not in m and "FloatingPointError" in m for m in lines)
    log = (tmp_path / "r" / "clients.log").read_text()
    assert log.count("=== round 1 │ client") == 5 and "Traceback (most recent call last)" in log
    assert rows(tmp_path)[-1]["round"] == 1 and rows(tmp_path)[-1]["rejected"] == 5


def test_an_exploding_but_finite_loss_stops_the_run_as_diverged(tmp_path):
    """lr=1 on the least-squares federation: finite updates, test loss 12.7 → 3436 by round 4 (> 100×)."""
    with pytest.raises(RunAborted, match="divergence-factor=100"):
        run_inprocess(recorded(tmp_path, lr=1.0), record=True)
    s = summary(tmp_path)
    assert s["status"] == "diverged" and s["rounds_completed"] == 4 and "lower lr" in s["reason"]
    assert rows(tmp_path)[-1]["loss"] > 100 * rows(tmp_path)[0]["loss"]
    # the same run with the check switched off goes on to the end, as a completed run
    run_inprocess(recorded(tmp_path, lr=1.0, overwrite=True, **{"divergence-factor": 0.0}), record=True)
    assert summary(tmp_path)["status"] == "completed"


def crash_partitions(monkeypatch, partitions: set[int], server_round: int):
    original = RuleClient._train

    def fit(self, parameters, config):
        if self.node.partition_id in partitions and int(config["round"]) == server_round:
            raise OSError(30, "Read-only file system")
        return original(self, parameters, config)

    monkeypatch.setattr(RuleClient, "_train", fit)


def test_too_few_valid_replies_stop_the_run_as_failed(tmp_path, monkeypatch):
    """3 of 5 clients fail in round 2: 2 valid replies < min-replies 0.5 × 5 → failed, not a quiet round of 2."""
    crash_partitions(monkeypatch, {0, 1, 2}, server_round=2)
    with pytest.raises(RunAborted) as exc:
        run_inprocess(recorded(tmp_path), record=True)
    assert exc.value.status == "failed"
    s = summary(tmp_path)
    assert s["status"] == "failed" and s["rounds_completed"] == 2
    assert "2 valid replies from a cohort of 5, min-replies=0.5 needs 3" in s["reason"]
    assert "OSError: [Errno 30] Read-only file system" in (tmp_path / "r" / "clients.log").read_text()


def test_min_replies_is_the_threshold(tmp_path, monkeypatch):
    """2 of 5 failing leaves 3 ≥ 0.5 × 5: the run completes with the failures counted; min-replies=1 (Flower's
    accept_failures=False) stops it."""
    crash_partitions(monkeypatch, {0, 1}, server_round=2)
    run_inprocess(recorded(tmp_path), record=True)
    assert summary(tmp_path)["status"] == "completed" and rows(tmp_path)[2]["rejected"] == 2
    with pytest.raises(RunAborted):
        run_inprocess(recorded(tmp_path, overwrite=True, **{"min-replies": 1.0}), record=True)
    assert summary(tmp_path)["status"] == "failed"


def test_an_exception_in_the_server_is_written_as_failed(tmp_path, monkeypatch):

    def broken(server_round, replies):  # raised inside the server's aggregation step of round 3
        if server_round == 3:
            raise RuntimeError("strategy bug")

    with pytest.raises(RuntimeError, match="strategy bug"):
        run_inprocess(recorded(tmp_path), record=True, observers=[Watch(replied=broken)])
    s = summary(tmp_path)
    assert s["status"] == "failed" and s["reason"] == "RuntimeError: strategy bug" and s["rounds_completed"] == 2


# ---- one run, one folder -----------------------------------------------------------------------------------
def test_a_results_folder_holds_one_run(tmp_path):
    folder = tmp_path / "run"
    RunRecorder(folder, {}, {}, [], 3).record({"round": 0})
    with pytest.raises(ResultsFolderTaken, match="overwrite=true"):
        RunRecorder(folder, {}, {}, [], 3)
    (folder / "checkpoints" / "round-000002").mkdir(parents=True)  # the replaced run's checkpoint
    RunRecorder(folder, {"again": 1}, {}, [], 3, overwrite=True)
    assert not (folder / "rounds.jsonl").exists() and json.loads((folder / "config.json").read_text())["run_config"]
    assert not (folder / "checkpoints").exists()  # nothing offers to resume the replaced run
    with pytest.raises(ResultsFolderTaken):  # a folder without the marker file is no run's: kept, even with overwrite
        (folder / ".fedsuite-run").unlink()
        claim_folder(folder, overwrite=True)
    # the driver's claim (token) is the ServerApp's to use, nobody else's
    claim_folder(tmp_path / "launch", overwrite=False, token="abc")
    claim_folder(tmp_path / "launch", overwrite=False, token="abc")
    with pytest.raises(ResultsFolderTaken):
        claim_folder(tmp_path / "launch", overwrite=False, token="other")


def test_mark_stopped_only_touches_a_running_summary(tmp_path):
    recorder = RunRecorder(tmp_path / "a", {}, {}, [], 2)
    assert mark_stopped(tmp_path / "a", "interrupted", "SIGINT")
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["status"] == "interrupted"
    recorder.record({"round": 2})  # a completed run is never rewritten
    recorder2 = RunRecorder(tmp_path / "b", {}, {}, [], 1)
    recorder2.record({"round": 1})
    assert not mark_stopped(tmp_path / "b", "interrupted", "late signal")


def test_a_failure_reported_after_the_stop_began_is_an_interruption(tmp_path):
    """The stop signals every process of a launch at once; when a simulation worker dies before the ServerApp sees
    its own signal, the run records `failed`. A failure written after the stop began is the stop's doing; one
    written before it stays a failure, and neither completed nor diverged is ever rewritten."""
    import time

    before = time.time() - 5
    recorder = RunRecorder(tmp_path / "late", {}, {}, [], 3)
    recorder.finish("failed", "round 9: a simulation worker (Ray actor) died")
    assert not mark_stopped(tmp_path / "late", "interrupted", "SIGKILL")  # no stop time: a failure stays
    assert mark_stopped(tmp_path / "late", "interrupted", "the driver ended", stopped_at=before)
    s = json.loads((tmp_path / "late" / "summary.json").read_text())
    assert s["status"] == "interrupted" and s["reason"].startswith("the driver ended") and "Ray actor" in s["reason"]
    recorder = RunRecorder(tmp_path / "early", {}, {}, [], 3)
    recorder.finish("failed", "clients failed")
    assert not mark_stopped(tmp_path / "early", "interrupted", "the driver ended", stopped_at=time.time() + 5)
    assert json.loads((tmp_path / "early" / "summary.json").read_text())["status"] == "failed"
    recorder = RunRecorder(tmp_path / "div", {}, {}, [], 3)
    recorder.finish("diverged", "loss is nan")
    assert not mark_stopped(tmp_path / "div", "interrupted", "the driver ended", stopped_at=before)


def test_default_run_names_are_unique_within_a_second():
    from fedsuite.results.folder import default_run_name

    names = {default_run_name("fedavg", "fashion-mnist") for _ in range(50)}
    assert len(names) == 50 and all(re.fullmatch(r"fedavg-fashion-mnist-\d{8}-\d{6}-[0-9a-f]{6}", n) for n in names)


# ---- the pre-run check (python -m simulation.run, no Ray) ----------------------------------------------------
def cli(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulation.run", *args], capture_output=True, text=True,
                          cwd=PROJECT, env=env, timeout=timeout)  # fmt: skip


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("lr=abc", "lr=abc"),
        ("lr=0.1 lr=0.2", "key 'lr' is given twice"),
        ("num-clients=3 clients-per-round", "clients-per-round"),
    ],
)
def test_a_malformed_run_config_string_is_one_line_and_exit_2(config, message):
    proc = cli("--check", "-c", config)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_parse_overrides_keeps_valid_input():
    assert overrides.parse_overrides(["lr=0.1 algorithm='fedprox'", "seed=3"]) == {
        "lr": 0.1,
        "algorithm": "fedprox",
        "seed": 3,
    }
    with pytest.raises(ConfigError, match="given twice"):
        overrides.parse_overrides(["lr=0.1", "lr=0.2"])


@pytest.fixture
def readonly_dir(tmp_path):
    """A read-only tmpfs mount: root ignores file modes, so only a read-only file system really refuses."""
    target = tmp_path / "readonly"
    target.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(target)],
                                           capture_output=True).returncode != 0:  # fmt: skip
        pytest.skip("needs root and mount (CI has both)")
    yield target
    subprocess.run(["umount", str(target)], check=True)


def test_unwritable_out_dir_is_refused_before_the_run(readonly_dir):
    proc = cli("-c", f"dataset='synthetic-lsq' num-clients=4 clients-per-round=2 out-dir='{readonly_dir}/results'")
    assert proc.returncode == 2 and "out-dir=" in proc.stderr and "not writable" in proc.stderr
    assert "flwr run" not in proc.stdout


def test_unwritable_client_state_dir_is_refused_before_the_run(readonly_dir, tmp_path):
    config = (f"dataset='synthetic-lsq' algorithm='scaffold' num-clients=4 clients-per-round=2 client-state='disk' "
              f"client-state-dir='{readonly_dir}' out-dir='{tmp_path}'")  # fmt: skip
    proc = cli("-c", config)
    assert proc.returncode == 2 and "client-state-dir=" in proc.stderr and "Read-only file system" in proc.stderr
    # the same folder is irrelevant (not checked) when the state stays in memory
    assert cli("--check", "-c", config.replace("client-state='disk'", "client-state='memory'")).returncode == 0


def test_a_truncated_dataset_file_is_named_with_exit_2(tmp_path):
    if not (DEBIAN_FASHION_MNIST / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip("needs Debian's dataset-fashion-mnist")
    for name in os.listdir(DEBIAN_FASHION_MNIST):
        shutil.copy(DEBIAN_FASHION_MNIST / name, tmp_path / name)
    bad = tmp_path / "train-images-idx3-ubyte.gz"
    bad.write_bytes(bad.read_bytes()[:1_000_000])
    with pytest.raises(DatasetCorrupt, match="truncated or corrupt"):
        read_idx(bad)
    proc = cli("--check", "-c", f"data-dir='{tmp_path}'")
    assert proc.returncode == 2 and str(bad) in proc.stderr and "Traceback" not in proc.stderr


def test_an_idx_file_shorter_than_its_header_says_is_corrupt(tmp_path):
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    with gzip.open(path, "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + (100).to_bytes(4, "big") + bytes(60))
    with pytest.raises(DatasetCorrupt, match="= 100 bytes, the file holds 60"):
        read_idx(path)
    with gzip.open(path, "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + (3).to_bytes(4, "big") + bytes([1, 2, 3]))
    np.testing.assert_array_equal(read_idx(path), [1, 2, 3])


def test_flwr_is_found_next_to_the_interpreter_without_an_activated_venv(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert flower.flwr_executable() == str(Path(sys.executable).parent / "flwr")
    env = flower.flower_env("t", Path("/tmp/h"))
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)  # flower-superlink is found too
    assert env["FLWR_HOME"] == "/tmp/h" and env["FEDSUITE_RUN_TOKEN"] == "t"
    assert env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] != env["FLWR_LOCAL_CONTROL_API_PORT"]


def test_readme_install_command_works_as_root_and_as_a_user(tmp_path):
    """The install line's first word picks sudo only for a non-root user (containers have no sudo)."""
    readme = (PROJECT / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if "dataset-fashion-mnist" in ln and "venv" in ln)
    prefix = line.split("$SUDO apt-get")[0]
    fake = tmp_path / "bin"
    fake.mkdir()
    for uid in ("0", "1000"):
        (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n")
        (fake / "id").chmod(0o755)
        out = subprocess.run(["bash", "-c", prefix + 'printf "[%s]" "$SUDO"'], capture_output=True, text=True,
                             env={"PATH": f"{fake}:/usr/bin:/bin"}).stdout  # fmt: skip
        assert out.endswith("[]" if uid == "0" else "[sudo]"), (uid, out)


def test_a_dead_worker_stops_the_run_at_once(tmp_path):
    """One ActorDiedError is enough: Flower never replaces the worker, so the cohort cannot be whole again."""
    from tests.test_replies import one_round_replies

    strategy, results = one_round_replies({**LSQ, "num-clients": 4, "clients-per-round": 4})
    died = ValueError("Message contains an Error (reason: <class 'ray.exceptions.ActorDiedError'>: died)")
    with pytest.raises(RunAborted, match=r"simulation worker \(Ray actor\) died .* Start it again"):
        strategy.aggregate_fit(1, results[:3], [died])


def test_the_console_filter_cuts_long_lines_and_hides_only_our_own_abort_traceback():
    console = ConsoleFilter()
    assert console("x" * 1000).endswith("(cut here; the whole line is in flwr.log)\n")
    abort = ["Traceback (most recent call last):\n", '  File "a.py", line 1\n', "    raise\n",
             "fedsuite.server.guard.RunAborted: round 3: …\n"]  # fmt: skip
    assert "".join(console(line) for line in abort).startswith("(the ServerApp stopped the run")
    other = ["Traceback (most recent call last):\n", '  File "a.py", line 1\n', "KeyError: 'x'\n"]
    assert "".join(console(line) for line in other) == "".join(other)
    console("Traceback (most recent call last):\n")
    assert console.flush() == "Traceback (most recent call last):\n"


def test_the_inprocess_runner_never_passes_on_a_silently_smaller_cohort(monkeypatch):
    """A message that fails outside the client's fit (in Flower's machinery) stops the in-process run."""
    from fedsuite.codec.payload import PARTITION_KEY
    from fedsuite.run.inprocess import InProcessProxy, LostClient

    fit = InProcessProxy.fit

    def flaky(self, ins, timeout, group_id):
        if int(ins.config[PARTITION_KEY]) == 1 and int(ins.config["round"]) == 2:
            raise SystemError("error return without exception set")  # the numpy-header failure seen under threads
        return fit(self, ins, timeout, group_id)

    monkeypatch.setattr(InProcessProxy, "fit", flaky)
    with pytest.raises(LostClient, match="round 2: 1 client message"):
        run_inprocess(LSQ)


@pytest.mark.parametrize("algorithm", ["fedmim", "fedspeed-ing"])
def test_a_round_without_valid_replies_is_a_zero_move_in_the_histories(algorithm):
    """Round 2 loses every reply (min-replies=0): x stays, and round 3's downlink is built as if x had not moved
    (FedMIM: δ = 0 enters the history; FedSpeed-Ing: x̃ = x^t), not by re-applying round 1's move."""

    cfg = {**LSQ, "algorithm": algorithm, "min-replies": 0.0, "num-server-rounds": 3}
    downlinks = {}

    def recording(server_round, x, downlink):
        downlinks[server_round] = {k: np.array(v, np.float64) for k, v in downlink.items()}
        downlinks[server_round]["x"] = x.astype(np.float64)

    def dropping(server_round, reply):
        return "lost by the test" if server_round == 2 else None

    run_inprocess(cfg, observers=[Watch(sent=recording, screen=dropping)])
    np.testing.assert_array_equal(downlinks[3]["x"], downlinks[2]["x"])  # round 2 kept x
    if algorithm == "fedmim":  # a_3 = α_0·0 + α_1·δ_1, where a_2 = α_0·δ_1
        alphas = (0.6, 0.3)
        np.testing.assert_allclose(downlinks[3]["a"], downlinks[2]["a"] * alphas[1] / alphas[0], atol=1e-12)
    else:
        np.testing.assert_allclose(downlinks[3]["x_tilde"], downlinks[3]["x"], atol=1e-6)
        assert not np.allclose(downlinks[2]["x_tilde"], downlinks[2]["x"], atol=1e-6)  # round 1 did move


def test_a_server_client_config_mismatch_is_a_clear_rejection():
    """A client built for another algorithm or another model size refuses to train, saying why (not a shape error
    deep in torch); the server rejects the reply with that line."""
    from fedsuite.codec.payload import ALGORITHM_KEY, ARRAYS_KEY
    from fedsuite.config.run_config import resolve
    from fedsuite.node.holdings import ClientNode
    from tests.test_replies import one_round_replies

    _, results = one_round_replies(LSQ)
    assert all("error" not in r.metrics for _, r in results)  # matching configs train
    cfg = resolve({**LSQ, "synthetic-dim": 5})
    client = client_for(cfg, ClientNode(cfg, 0, 5))
    params, config = [np.zeros(8, np.float32)], {"round": 1, "lr": 0.1, ARRAYS_KEY: "model"}
    _, _, metrics = client.fit(params, {**config, ALGORITHM_KEY: "fedavg"})
    assert metrics["error"].startswith("ValueError: configuration mismatch: the server's model has 8 parameters")
    _, _, metrics = client.fit(params, {**config, ALGORITHM_KEY: "scaffold"})
    assert "the server runs algorithm='scaffold', this client algorithm='fedavg'" in metrics["error"]


def test_peak_memory_counts_every_process_of_a_launch(capsys):
    """simulation.benchmarks.peak_memory sums the RSS of the command and of what it starts (here a child holding ~240 MB
    while the parent holds ~400 MB), and passes the command's exit code through."""
    from simulation.benchmarks import peak_memory

    child = "import numpy as np, time; b = np.ones(30_000_000); time.sleep(2)"
    parent = f"import numpy as np, subprocess, sys; a = np.ones(50_000_000); subprocess.run([sys.executable, '-c', {child!r}]); sys.exit(3)"  # noqa: E501
    assert peak_memory.main(["--", sys.executable, "-c", parent]) == 3
    line = capsys.readouterr().out
    total = float(line.split("launch: ")[1].split(" GiB")[0])
    assert 0.55 < total < 1.2 and "up to 2 processes" in line


def test_a_train_loss_far_above_its_first_value_stops_the_run_as_diverged(tmp_path):
    """The cohort's train loss is watched too: finite but 1e13 (learning destroyed, the test loss perhaps still
    bounded at chance level) stops the run as diverged, with the row and summary saying so."""
    from tests.test_replies import corrupt, one_round_replies

    strategy, results = one_round_replies({**LSQ, "num-clients": 4, "clients-per-round": 4})
    strategy.aggregate_fit(1, results, [])  # sets the first train loss
    first = strategy.guard.initial_train_loss
    assert first is not None and first > 0
    exploded = [(p, corrupt(r, metrics={"loss": 1e13})) for p, r in results]
    with pytest.raises(RunAborted, match=r"round 2: the cohort's train loss 1e\+13 exceeds divergence-factor=100"):
        strategy.aggregate_fit(2, exploded, [])
    assert strategy.guard.train_loss(3, 50 * first) is None  # below the factor: no verdict
    assert strategy.guard.train_loss(3, float("inf"))[0] == "diverged"
