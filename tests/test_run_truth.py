"""A run tells the truth about itself: it owns its client state, a blown-up run is named as such, its files are
strict JSON, its schema bounds are those Flower can carry, empty evaluation data is refused before training, and
it ends with one closing line (docs/reliability.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.evaluation.data_checks import check_evaluation_data
from fedsuite.results.folder import RunRecorder, closing_line, read_closing_line
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.guard import RunGuard
from fedsuite.state import store as state

LSQ = {"dataset": "synthetic-lsq", "num-clients": 6, "clients-per-round": 3, "num-server-rounds": 2,
       "local-steps": 3, "lr": 0.02}  # fmt: skip


def strict(text: str):
    """json.loads that refuses NaN and Infinity, as every strict JSON parser does."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))


# ---- a run owns its client state


def scaffold(folder: Path, out: Path, name: str, **more) -> dict:
    return {**LSQ, "algorithm": "scaffold", "client-state": "disk", "client-state-dir": str(folder),
            "out-dir": str(out), "run-name": name, **more}  # fmt: skip


def final_model(run_config: dict) -> np.ndarray:
    return np.array(run_inprocess(run_config, record=True).rule.x)


def test_a_new_run_refuses_a_client_state_folder_holding_another_runs_state(tmp_path):
    """The second run on the same client-state-dir would start from the first run's c_i (its numbers differed
    from round 1 on): it is refused before training, naming the folder, the owner and the ways out."""
    folder = tmp_path / "state"
    first = final_model(scaffold(folder, tmp_path, "a"))
    assert state.owner(folder)["results"] == str(tmp_path / "a")
    refusal = (r"client-state-dir='.*state' holds the client state of another run .*choose another "
               r"client-state-dir, or empty this one.*resume-from=")  # fmt: skip
    with pytest.raises(ConfigError, match=refusal):
        run_inprocess(scaffold(folder, tmp_path, "b"), record=True)
    assert not (tmp_path / "b").exists()  # refused before the results folder was made
    # an emptied folder serves again, and the run is the same as the first
    for path in folder.iterdir():
        path.unlink()
    np.testing.assert_array_equal(final_model(scaffold(folder, tmp_path, "c")), first)


@pytest.mark.parametrize("kind", [".state", ".npz"])  # this version's files, and earlier versions'
def test_files_of_no_known_run_are_refused_too(tmp_path, kind):
    folder = tmp_path / "state"
    folder.mkdir()
    if kind == ".npz":
        np.savez(folder / "partition-000000.npz", c=np.ones(3))
    else:
        store = state.DiskStore(folder, 0)
        store["c"] = np.ones(3)
        store.flush()
    with pytest.raises(ConfigError, match="client-state files of an unknown run"):
        run_inprocess(scaffold(folder, tmp_path, "a"), record=True)


def test_the_launcher_refuses_before_flower_starts(tmp_path):
    """simulation.run's preflight: exit code 2 path, before any Ray start."""
    from simulation.launcher.preflight import preflight

    folder = tmp_path / "state"
    state.claim(folder, 12345, "elsewhere")
    cfg = resolve({**scaffold(folder, tmp_path, "a")})
    with pytest.raises(ConfigError, match=r"state key 12345, results elsewhere"):
        preflight(cfg, quiet=True)


def test_a_resume_checks_that_the_state_it_finds_is_its_own(tmp_path):
    """Resuming run a finds its own folder (the checkpoint's state key); a folder another run took over is
    refused before the checkpoint's vectors would replace that run's files."""
    folder = tmp_path / "state"
    run_inprocess(scaffold(folder, tmp_path, "a", **{"checkpoint-every": 1}), record=True)
    resume = scaffold(folder, tmp_path, "a", **{"resume-from": str(tmp_path / "a"), "num-server-rounds": 3})
    run_inprocess(resume, record=True)  # its own state: accepted
    assert strict((tmp_path / "a" / "summary.json").read_text())["rounds_completed"] == 3

    for path in folder.iterdir():
        path.unlink()
    state.claim(folder, 999, str(tmp_path / "other"))
    np.savez(folder / "partition-000000.npz", c=np.ones(3))
    again = {**resume, "num-server-rounds": 4}
    with pytest.raises(ConfigError, match="state key 999"):
        run_inprocess(again, record=True)
    assert np.load(folder / "partition-000000.npz")["c"].tolist() == [1.0, 1.0, 1.0]  # the other run's file kept


def test_a_client_refuses_a_folder_another_run_owns():
    """The nodes check too (a deployment's folder may exist on the nodes only): an error reply, not training."""
    import tempfile

    from fedsuite.node.app import _checked
    from fedsuite.node.trust import NodeConfigError

    with tempfile.TemporaryDirectory() as tmp:
        state.claim(Path(tmp), "1")
        _checked(Path(tmp), "1", "client-state-dir")  # its own
        with pytest.raises(NodeConfigError, match="another run"):
            _checked(Path(tmp), "2", "client-state-dir")


# ---- a blown-up run


BLOWN = {"num-clients": 10, "clients-per-round": 4, "num-server-rounds": 3, "local-steps": 2, "lr": 3.0}


def test_the_train_loss_guard_takes_its_reference_before_any_training():
    """The old reference was round 1's train loss, already exploded; the reference is now the cohort's loss at
    the received initial model (first-loss)."""
    guard = RunGuard(min_replies=0.5, divergence_factor=10)
    assert guard.train_loss(1, 57.96, start_loss=2.31) is not None  # 57.96 > 10 × 2.31
    old = RunGuard(min_replies=0.5, divergence_factor=10)
    assert old.train_loss(1, 57.96) is None  # without a start loss: the first value, as before
    assert old.initial_train_loss == pytest.approx(57.96)


def test_a_run_that_blows_up_in_round_one_is_diverged_with_the_initial_reference(tmp_path):
    """lr=3 on Fashion-MNIST: train loss ~58 in round 1, 25× the initial model's ~2.3. With divergence-factor=10
    the run is diverged at round 1 (before: round 1's value was the reference and the run 'completed')."""
    run_config = {**BLOWN, "divergence-factor": 10.0, "out-dir": str(tmp_path), "run-name": "blown"}
    from fedsuite.server.guard import RunAborted

    with pytest.raises(RunAborted, match="initial model's train loss"):
        run_inprocess(run_config, record=True)
    summary = strict((tmp_path / "blown" / "summary.json").read_text())
    assert summary["status"] == "diverged" and "initial model's train loss" in summary["reason"]


def test_a_completed_run_no_better_than_its_initial_model_says_so(tmp_path, caplog):
    """The issue's command with the default divergence-factor: it completes, but the summary and the console say
    that the final model is no better than the initial one."""
    run_config = {**BLOWN, "out-dir": str(tmp_path), "run-name": "flat"}
    with caplog.at_level("INFO", logger="flwr.fedsuite"):
        run_inprocess(run_config, record=True)
    summary = strict((tmp_path / "flat" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["no_better_than_initial"] is True
    assert summary["initial_loss"] is not None and "no better than the initial model" in summary["warnings"][0]
    assert "no better than the initial model" in caplog.text
    line = read_closing_line(tmp_path / "flat")
    assert line.startswith("run completed │ final accuracy") and line.endswith(f"results: {tmp_path / 'flat'}")
    assert "no better than the initial model" in line


def test_a_run_that_learns_has_no_warning(tmp_path):
    run_inprocess({**LSQ, "num-server-rounds": 3, "out-dir": str(tmp_path), "run-name": "ok"}, record=True)
    summary = strict((tmp_path / "ok" / "summary.json").read_text())
    assert summary["no_better_than_initial"] is False and "warnings" not in summary


# ---- strict JSON


def test_a_diverged_runs_files_are_strict_json(tmp_path):
    """summary.json and rounds.jsonl hold null where a value is NaN or infinite."""
    recorder = RunRecorder(tmp_path / "r", {}, {}, [0.5], 3)
    recorder.record({"round": 0, "loss": 2.0, "accuracy": 0.1})
    recorder.record({"round": 1, "loss": float("nan"), "accuracy": 0.1, "train_loss": float("inf")},
                    status="diverged", reason="round 1: the test loss is nan")  # fmt: skip
    summary = strict((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["final_loss"] is None
    rows = [strict(line) for line in (tmp_path / "r" / "rounds.jsonl").read_text().splitlines()]
    assert rows[1]["loss"] is None and rows[1]["train_loss"] is None
    assert math.isnan(recorder.rows[1]["loss"])  # in memory the value stays what it was


# ---- lost participation


def test_lost_replies_are_in_the_summary_and_the_closing_line(tmp_path):
    recorder = RunRecorder(tmp_path / "r", {}, {}, [0.5], 3)
    recorder.record({"round": 0, "loss": 2.0, "accuracy": 0.1})
    for r, replies in ((1, 4), (2, 2), (3, 3)):
        recorder.record({"round": r, "loss": 1.0, "accuracy": 0.5, "cohort": 4, "replies": replies,
                         "failures": 4 - replies, "rejected": 0})  # fmt: skip
    summary = strict((tmp_path / "r" / "summary.json").read_text())
    assert summary["participation"] == {
        "expected_replies": 12, "valid_replies": 9, "rejected": 0, "failed": 3, "rounds_with_lost_replies": 2,
        "first_rounds_with_lost_replies": [2, 3],
    }  # fmt: skip
    assert "3 of 12 client replies lost in 2 round(s)" in closing_line(summary, tmp_path / "r")


# ---- the schema's bounds


@pytest.mark.parametrize("key, value", [("num-server-rounds", 10**30), ("num-server-rounds", 10**6),
                                        ("seed", 2**63), ("num-clients", -(2**64))])  # fmt: skip
def test_integers_beyond_what_flower_and_the_run_hold_are_refused(key, value):
    with pytest.raises(ConfigError, match=rf"{key}={value}: (out of range|must be in \[1, 100000\])"):
        resolve({key: value})


def test_the_largest_allowed_values_pass_flowers_own_parser():
    """What the schema accepts, Flower's run-config parser takes (num-server-rounds=10**30 passed the check and
    then Flower refused it)."""
    from flwr.common.config import parse_config_args

    resolve({"num-server-rounds": 100_000, "seed": 2**63 - 1})
    parsed = parse_config_args([f"num-server-rounds=100000 seed={2**63 - 1}"])
    assert parsed["seed"] == 2**63 - 1


def test_an_unknown_key_written_with_underscores_gets_its_dashed_name():
    with pytest.raises(ConfigError, match=r"prox_mu: unknown key \(did you mean prox-mu\?\)"):
        resolve({"prox_mu": 0.1})


# ---- evaluation data that no client holds


def test_an_empty_validation_split_is_refused_before_training(tmp_path):
    run_config = {**LSQ, "synthetic-samples": 20, "validation-fraction": 0.01}
    with pytest.raises(ConfigError, match=r"validation-fraction=0.01: every client's validation share is empty .*"
                                          r"validation-fraction >= 0.05"):  # fmt: skip
        check_evaluation_data(resolve(run_config))
    with pytest.raises(ConfigError, match="validation share is empty"):
        run_inprocess({**run_config, "out-dir": str(tmp_path), "run-name": "x"}, record=True)
    assert not (tmp_path / "x").exists()
    check_evaluation_data(resolve({**run_config, "validation-fraction": 0.05}))


def test_an_empty_federated_test_is_refused_before_training():
    run_config = {**LSQ, "synthetic-samples": 20, "evaluation": "federated", "local-test-fraction": 0.01}
    with pytest.raises(ConfigError, match=r"evaluation='federated': every client's test data is empty"):
        check_evaluation_data(resolve(run_config))
    check_evaluation_data(resolve({**run_config, "local-test-fraction": 0.1}))


# ---- the console


def test_the_console_drops_flowers_misleading_lines_and_the_servers_closing_line():
    """Flower's default-size notice and resize hint (simulation.run sizes the federation itself), the Ray actors'
    shutdown lines, and the ServerApp's closing line (simulation.run prints its own, last) stay in flwr.log."""
    from simulation.launcher.console import ConsoleFilter

    console = ConsoleFilter()
    noise = [
        "WARNING :   Since flwr 1.32, default simulated SuperNodes changed from 10 to 2.\n",
        "INFO :      To change federation size, use the following command:\n",
        "INFO :      \tflwr federation simulation-config default <superlink> --num-supernodes <N>\n",
        "WARNING :   Manually terminating ClientAppActor\n",
        "INFO :      fedsuite │ run completed │ final accuracy 0.7 │ 3/3 rounds │ results: /x\n",
    ]
    assert [console(line) for line in noise] == [""] * len(noise)
    kept = "INFO :      Federation `default` (2 simulated SuperNodes)\n"
    assert console(kept) == kept


def test_a_lost_message_names_the_client_and_node_it_was_for(caplog):
    """Flower keeps only the exception of a lost message; the line names the sampled client that sent nothing
    (before: 'a client')."""
    from tests.test_replies import one_round_replies

    strategy, results = one_round_replies({**LSQ, "num-clients": 4, "clients-per-round": 3, "min-replies": 0.5})
    lost = results[2][1].metrics["partition-id"]
    with caplog.at_level("WARNING", logger="flwr.fedsuite"):
        strategy.aggregate_fit(1, results[:2], [TimeoutError("the node did not answer")])
    assert f"round 1: client {lost} (node " in caplog.text and "failed: TimeoutError" in caplog.text


def test_a_last_checkpoint_that_cannot_be_written_fails_the_run(tmp_path, monkeypatch):
    """The checkpoint after the last round is written before the run is called completed (before, summary.json
    said `completed` while the run ended in the checkpoint's error)."""
    from fedsuite.results import checkpoint
    from fedsuite.results.checkpoint_files import CheckpointError

    write = checkpoint.write

    def fail_last(results, server_round, *args, **kwargs):
        if server_round == 2:
            raise CheckpointError("checkpoint file server.npz cannot be written (I/O error)")
        return write(results, server_round, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "write", fail_last)
    with pytest.raises(CheckpointError):
        run_inprocess({**LSQ, "checkpoint-every": 1, "out-dir": str(tmp_path), "run-name": "r"}, record=True)
    summary = strict((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "failed" and "server.npz cannot be written" in summary["reason"]
    assert summary["rounds_completed"] == 2


def test_a_last_checkpoint_that_is_written_completes_the_run(tmp_path):
    run_inprocess({**LSQ, "checkpoint-every": 1, "out-dir": str(tmp_path), "run-name": "r"}, record=True)
    summary = strict((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "completed" and "resume_command" in summary
    assert (tmp_path / "r" / "accuracy.png").is_file()


def test_plots_of_a_short_run_have_whole_round_ticks(tmp_path, monkeypatch):
    """A 2-round run's accuracy.png (and a study's round plot) had ticks at 0.25, 0.5 …"""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from simulation.experiment import report

    closed = []
    monkeypatch.setattr(plt, "close", lambda fig=None: closed.append(fig))
    recorder = RunRecorder(tmp_path / "r", {}, {}, [0.5], 2)
    for r in range(3):
        recorder.record({"round": r, "loss": 1.0, "accuracy": 0.1 * r})
    curve = [(0, 0.1), (1, 0.2), (2, 0.3)]
    report.plot(tmp_path / "p.png", [report.Panel([report.Line("a", [curve])])])
    assert len(closed) == 2
    for fig in closed:
        fig.canvas.draw()
        ticks = fig.axes[0].get_xticks()
        assert len(ticks) and all(float(t).is_integer() for t in ticks), ticks
