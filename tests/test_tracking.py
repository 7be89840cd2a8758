"""Experiment tracking (fedsuite.results.tracking): TensorBoard event files and offline W&B runs of a real in-process
federation, read back with TensorBoard's own event reader and wandb's own transaction-log reader; the missing
package error before any run; a sweep's runs grouped. No network: W&B runs offline only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.results.tracking import (
    GROUP_ENV,
    TensorBoardTracker,
    group_environment,
    launch_group,
    scalars,
    tracking_errors,
    tracking_observers,
)
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.app import results_folder
from fedsuite.server.guard import RunAborted
from fedsuite.server.observers import RoundObserver
from simulation import sweep
from simulation.experiment.engines import run_in_process
from simulation.experiment.jobs import Job, validate
from simulation.launcher.launch import run as run_simulation
from simulation.launcher.outcome import RunFailed

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer  # noqa: E402
from tensorboard.plugins.hparams import api_pb2, metadata  # noqa: E402

SETTING = {"dataset": "synthetic-logistic", "num-clients": 6, "clients-per-round": 3, "num-server-rounds": 3}


@pytest.fixture(autouse=True)
def wandb_offline_here(tmp_path, monkeypatch):
    """wandb writes nothing outside the test's folder and never goes online."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv(GROUP_ENV, raising=False)


@pytest.fixture
def tracked_run(tmp_path):
    """A 3-round federation with both trackers on; (folder, its rows as recorded in rounds.jsonl, the run config,
    the trackers)."""
    run_config = {**SETTING, "out-dir": str(tmp_path), "run-name": "tracked", "tensorboard": True,
                  "wandb-mode": "offline", "wandb-project": "fedsuite-test"}  # fmt: skip
    cfg = resolve(run_config)
    folder = results_folder(cfg)
    trackers = tracking_observers(cfg, folder, group="study")
    run_inprocess(run_config, record=True, observers=trackers)
    rows = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
    return folder, rows, dict(cfg), trackers


def wandb_records(run_folder: Path) -> list[dict]:
    """The records of an offline W&B run, read by wandb's own reader of the .wandb transaction log."""
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_folder)],
                         capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def tensorboard_events(logdir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def session_start(acc: EventAccumulator):
    content = acc.PluginTagToContent(metadata.PLUGIN_NAME)[metadata.SESSION_START_INFO_TAG]
    return metadata.parse_session_start_info_plugin_data(content)


def test_tensorboard_events_hold_every_round_and_the_run_config(tracked_run):
    folder, rows, config, trackers = tracked_run
    assert all(t.closed for t in trackers)  # closed after the last round
    acc = tensorboard_events(folder / "tensorboard")
    columns = {k for row in rows for k in scalars(row)} - {"elapsed_seconds"}  # the recorder adds that one
    named = {"accuracy", "loss", "train_loss", "round_seconds", "bytes_down_per_client", "bytes_up_per_client"}
    assert named <= columns
    assert set(acc.Tags()["scalars"]) == columns
    for column in columns:
        expected = [(row["round"], row[column]) for row in rows if isinstance(row.get(column), (int, float))]
        got = [(e.step, e.value) for e in acc.Scalars(column)]
        assert [s for s, _ in got] == [s for s, _ in expected], column
        assert [v for _, v in got] == pytest.approx([v for _, v in expected], rel=1e-6), column  # float32 events
    assert [e.step for e in acc.Scalars("accuracy")] == [0, 1, 2, 3]
    hparams = session_start(acc).hparams
    assert set(hparams) == set(config)
    assert hparams["algorithm"].string_value == "fedavg" and hparams["dataset"].string_value == "synthetic-logistic"
    assert hparams["num-server-rounds"].number_value == 3 and hparams["tensorboard"].bool_value is True
    assert hparams["lr"].number_value == pytest.approx(config["lr"])
    end = metadata.parse_session_end_info_plugin_data(
        acc.PluginTagToContent(metadata.PLUGIN_NAME)[metadata.SESSION_END_INFO_TAG]
    )
    assert end.status == api_pb2.STATUS_SUCCESS


def test_wandb_offline_run_holds_the_rows_and_the_run_config(tracked_run):
    folder, rows, config, _ = tracked_run
    (run_folder,) = (folder / "wandb").glob("offline-run-*")
    assert len(list(run_folder.glob("run-*.wandb"))) == 1  # what `wandb sync` uploads
    records = wandb_records(run_folder)
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    assert run["display_name"] == "tracked" and run["project"] == "fedsuite-test" and run["run_group"] == "study"
    logged_config = run["config"]["update"]
    assert {k: logged_config[k] for k in config} == config
    history = [r["history"] for r in records if r["type"] == "history"]
    assert [h["step"].get("num", 0) for h in history] == [row["round"] for row in rows]
    for h, row in zip(history, rows, strict=True):
        expected = {k: v for k, v in scalars(row).items() if k != "elapsed_seconds"}
        assert {k: h["item"][k] for k in expected} == pytest.approx(expected, rel=1e-12)
    (end,) = [r["exit"] for r in records if r["type"] == "exit"]
    assert end.get("exit_code", 0) == 0


def test_off_means_no_trackers_and_no_files(tmp_path):
    cfg = resolve({**SETTING, "out-dir": str(tmp_path), "run-name": "plain"})
    assert tracking_observers(cfg, results_folder(cfg)) == [] and tracking_errors(cfg) == []
    run_inprocess(dict(cfg), record=True, observers=tracking_observers(cfg, results_folder(cfg)))
    assert not (tmp_path / "plain" / "tensorboard").exists() and not (tmp_path / "plain" / "wandb").exists()


@pytest.mark.parametrize(
    ("setting", "modules", "key"),
    [
        ({"tensorboard": True}, ("tensorboard", "torch.utils.tensorboard"), "tensorboard=true"),
        ({"wandb-mode": "offline"}, ("wandb",), "wandb-mode='offline'"),
    ],
)
def test_a_missing_package_is_one_line_naming_the_key_and_the_extra(monkeypatch, tmp_path, setting, modules, key):
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    (problem,) = tracking_errors(resolve({**SETTING, **setting}))
    assert problem.startswith(key) and "pip install 'fedsuite[tracking]'" in problem and "\n" not in problem
    with pytest.raises(ConfigError, match="fedsuite\\[tracking\\]"):
        validate([Job({**SETTING, **setting}, tmp_path / "run")])
    out = tmp_path / "sweep"
    args = ["--algorithms", "fedavg", "--seeds", "0", "--engine", "inprocess", "--out", str(out)]
    assert sweep.main([*args, "-c", " ".join(f"{k}={json.dumps(v)}" for k, v in setting.items())]) == 2
    assert not (out / "runs").exists()  # stopped before any run


def test_a_run_that_stops_early_closes_its_trackers_with_its_status(tmp_path):
    diverging = {"dataset": "synthetic-lsq", "num-clients": 5, "clients-per-round": 5, "synthetic-dim": 8,
                 "lr": 50.0, "num-server-rounds": 10, "tensorboard": True, "wandb-mode": "offline",
                 "out-dir": str(tmp_path), "run-name": "diverged"}  # fmt: skip
    with pytest.raises(RunFailed) as failed:
        run_in_process(diverging, group="g")
    assert failed.value.status == "diverged"
    acc = tensorboard_events(tmp_path / "diverged" / "tensorboard")
    # the round that diverged is in, as in rounds.jsonl: its training loss, 10^4 × the initial model's, stopped it
    # before any evaluation (the guard's reference is taken before training)
    assert [e.step for e in acc.Scalars("loss")] == [0] and [e.step for e in acc.Scalars("train_loss")] == [1]
    end = metadata.parse_session_end_info_plugin_data(
        acc.PluginTagToContent(metadata.PLUGIN_NAME)[metadata.SESSION_END_INFO_TAG]
    )
    assert end.status == api_pb2.STATUS_FAILURE
    (run_folder,) = (tmp_path / "diverged" / "wandb").glob("offline-run-*")
    (end,) = [r["exit"] for r in wandb_records(run_folder) if r["type"] == "exit"]
    assert end["exit_code"] == 1


def feed(tracker, rounds, value):
    for r in rounds:
        tracker.recorded({"round": r, "accuracy": value + r, "flag": True, "note": "x", "missing": None})


def test_a_fresh_run_replaces_old_events_and_a_resumed_run_purges_the_rounds_it_redoes(tmp_path):
    config = {"algorithm": "fedavg", "seed": 0}
    feed(TensorBoardTracker(tmp_path, config, 4), range(0, 4), 0.0)  # an earlier run, replaced by overwrite
    feed(TensorBoardTracker(tmp_path, config, 4), range(0, 4), 10.0)  # the fresh run
    acc = tensorboard_events(tmp_path / "tensorboard")
    assert acc.Tags()["scalars"] == ["accuracy"]  # flags, text and missing values are not scalars
    assert [(e.step, e.value) for e in acc.Scalars("accuracy")] == [(0, 10.0), (1, 11.0), (2, 12.0), (3, 13.0)]
    first = TensorBoardTracker(tmp_path, config, 4)
    feed(first, range(0, 3), 20.0)  # stopped after round 2 (no close: the process died) ...
    feed(TensorBoardTracker(tmp_path, config, 4), range(2, 4), 30.0)  # ... resumed from round 1's checkpoint
    acc = tensorboard_events(tmp_path / "tensorboard")
    assert [(e.step, e.value) for e in acc.Scalars("accuracy")] == [(0, 20.0), (1, 21.0), (2, 32.0), (3, 33.0)]
    first.close()


def test_a_tracker_that_cannot_write_warns_and_the_run_goes_on(tmp_path, caplog):
    (tmp_path / "tensorboard").write_text("a file where the event folder should be")
    tracker = TensorBoardTracker(tmp_path, {"seed": 0}, 3)
    feed(tracker, range(0, 2), 0.0)  # no exception
    assert tracker.closed and "TensorBoard tracking stopped" in caplog.text


def test_the_group_travels_to_a_launch_through_its_environment(monkeypatch):
    assert launch_group() is None
    with group_environment("sweep-a"):
        assert launch_group() == "sweep-a"
        with group_environment(None):
            assert launch_group() is None
        assert launch_group() == "sweep-a"
    assert launch_group() is None


def test_a_sweep_tracks_its_runs_as_one_group(tmp_path):
    out = tmp_path / "lr-study"
    argv = ["--algorithms", "fedavg", "--seeds", "0,1", "--engine", "inprocess", "--out", str(out), "-c",
            "dataset='synthetic-logistic' num-clients=6 clients-per-round=3 num-server-rounds=2 tensorboard=true "
            "wandb-mode='offline'"]  # fmt: skip
    assert sweep.main(argv) == 0
    board = EventMultiplexer().AddRunsFromDirectory(str(out))  # what `tensorboard --logdir <sweep>` shows
    board.Reload()
    runs = sorted(board.Runs())
    assert runs == [f"runs/fedavg/default/seed-{s}/tensorboard" for s in (0, 1)]
    for name in runs:
        assert [e.step for e in board.Scalars(name, "accuracy")] == [0, 1, 2]
    for seed in (0, 1):
        (run_folder,) = (out / f"runs/fedavg/default/seed-{seed}/wandb").glob("offline-run-*")
        (run,) = [r["run"] for r in wandb_records(run_folder) if r["type"] == "run"]
        assert run["run_group"] == "lr-study" and run["display_name"] == f"fedavg/default/seed-{seed}"
        assert run["config"]["update"]["seed"] == seed


@pytest.mark.slow
def test_a_parallel_sweep_passes_the_group_to_its_child_processes(tmp_path):
    out = tmp_path / "par-study"
    argv = ["--algorithms", "fedavg", "--seeds", "0,1", "--engine", "inprocess", "--parallel", "2", "--out",
            str(out), "-c", "dataset='synthetic-logistic' num-clients=6 clients-per-round=3 num-server-rounds=2 "
            "wandb-mode='offline'"]  # fmt: skip
    assert sweep.main(argv) == 0
    for seed in (0, 1):
        (run_folder,) = (out / f"runs/fedavg/default/seed-{seed}/wandb").glob("offline-run-*")
        (run,) = [r["run"] for r in wandb_records(run_folder) if r["type"] == "run"]
        assert run["run_group"] == "par-study"


class Endings(RoundObserver):
    def __init__(self):
        self.calls = []

    def ended(self, status, reason=None):
        self.calls.append(status)


def test_the_round_loop_tells_observers_how_the_run_ended():
    completed = Endings()
    run_inprocess(SETTING, observers=[completed])
    assert completed.calls == ["completed"]
    diverged = Endings()
    blowing_up = {"dataset": "synthetic-lsq", "num-clients": 5, "clients-per-round": 5, "synthetic-dim": 8,
                  "lr": 50.0, "num-server-rounds": 10}  # fmt: skip
    with pytest.raises(RunAborted):
        run_inprocess(blowing_up, observers=[diverged])
    assert diverged.calls == ["diverged"]


@pytest.mark.slow
def test_a_flwr_run_writes_tensorboard_events_for_every_round(tmp_path):
    """The ServerApp itself builds the trackers (server_fn), under a real `flwr run`."""
    folder = run_simulation({**SETTING, "tensorboard": True, "out-dir": str(tmp_path), "run-name": "flwr"},
                            quiet=True)  # fmt: skip
    acc = tensorboard_events(folder / "tensorboard")
    assert [e.step for e in acc.Scalars("loss")] == [0, 1, 2, 3]


def test_runs_of_an_experiment_get_distinct_names():
    from fedsuite.results.tracking import run_label

    assert run_label(Path("/r/sweep/runs/fedcm/lr=0.05/seed-0")) == "fedcm/lr=0.05/seed-0"
    assert run_label(Path("/r/tune/search/runs/fedcm/lr=0.05/seed-1")) == "fedcm/lr=0.05/seed-1"
    assert run_label(Path("/r/results/fedavg-fashion-mnist-20261124")) == "fedavg-fashion-mnist-20261124"
