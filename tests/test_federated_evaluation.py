"""Federated evaluation, held-out splits, central validation, target metrics and a server without data."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from flwr.common import Code, EvaluateRes, Status

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.data import server_dataset
from fedsuite.data.holdout import local_splits
from fedsuite.node.holdings import ClientNode
from fedsuite.results.folder import RunRecorder
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.federated_evaluation import EvalReply, check_eval_reply, eval_cohort, federated_metrics
from fedsuite.server.replies import RejectedReply
from tests.observing import Rows

PROJECT = Path(__file__).resolve().parents[1]
SYNTHETIC = {
    "algorithm": "fedavg",
    "dataset": "synthetic-logistic",
    "num-clients": 6,
    "clients-per-round": 3,
    "num-server-rounds": 2,
    "local-steps": 3,
}


def run_rows(config: dict, **kwargs) -> tuple[object, list[dict]]:
    rows = Rows()
    strategy = run_inprocess(config, observers=[rows], **kwargs)
    return strategy, rows.rows


def direct_metrics(cfg, x: np.ndarray, parts, which: str, data_dirs=None) -> tuple[float, float, int]:
    """(mean loss, accuracy, examples) of the model x over the union of the clients' `which` data, in one pass."""
    dirs = data_dirs or [None] * len(parts)
    nodes = [ClientNode(cfg, pid, cfg.num_clients, d) for pid, d in zip(parts, dirs, strict=True)]
    data = [getattr(node, which) for node in nodes]
    model = nodes[0].model
    model.x.copy_(torch.as_tensor(x))
    model.module.eval()
    inputs, targets = torch.cat([d.inputs for d in data]), torch.cat([d.targets for d in data])
    with torch.no_grad():
        out = model.module(inputs)
        loss = float(nodes[0].loss_fn(out, targets))
        if out.shape[-1] > 1:
            correct = int((out.argmax(1) == targets).sum())
        else:
            correct = int(((out.squeeze(-1) > 0).long() == targets.long()).sum())
    return loss, correct / len(targets), len(targets)


# ---- held-out splits -----------------------------------------------------------------------------------------
def test_held_out_splits_are_disjoint_floor_rounded_and_seeded():
    splits = local_splits(53, seed=0, partition_id=3, validation_fraction=0.2, test_fraction=0.3)
    assert (len(splits.validation), len(splits.test)) == (math.floor(0.2 * 53), math.floor(0.3 * 53))
    together = np.concatenate([splits.train, splits.validation, splits.test])
    assert sorted(together.tolist()) == list(range(53))  # disjoint, and nothing lost
    again = local_splits(53, seed=0, partition_id=3, validation_fraction=0.2, test_fraction=0.3)
    assert np.array_equal(again.validation, splits.validation) and np.array_equal(again.test, splits.test)
    other_seed = local_splits(53, seed=1, partition_id=3, validation_fraction=0.2, test_fraction=0.3)
    other_client = local_splits(53, seed=0, partition_id=4, validation_fraction=0.2, test_fraction=0.3)
    assert not np.array_equal(other_seed.validation, splits.validation)
    assert not np.array_equal(other_client.validation, splits.validation)
    # validation is drawn first: it does not depend on whether a local test share is carved too
    assert np.array_equal(local_splits(53, 0, 3, 0.2).validation, splits.validation)
    one = local_splits(1, seed=0, partition_id=0, validation_fraction=0.5, test_fraction=0.5)
    assert one.train.tolist() == [0] and len(one.validation) == len(one.test) == 0
    assert not local_splits(10, 0, 0, 0.0).holds_out and local_splits(10, 0, 0, 0.0).train.tolist() == list(range(10))


def test_a_clients_training_rows_exclude_its_held_out_rows():
    cfg = resolve({**SYNTHETIC, "evaluation": "both", "validation-fraction": 0.25})
    plain = ClientNode(resolve(SYNTHETIC), 2, 6).data
    node = ClientNode(cfg, 2, 6)
    rows = {tuple(r.tolist()) for r in plain.inputs}

    def keys(d):
        return {tuple(r.tolist()) for r in d.inputs}

    train, val, test = keys(node.data), keys(node.validation_data), keys(node.test_data)
    assert val and test and not (train & val) and not (train & test) and not (val & test)
    assert train | val | test == rows and len(node.data) + len(node.validation_data) + len(node.test_data) == len(plain)


def test_central_only_runs_train_on_the_whole_partition():
    cfg = resolve(SYNTHETIC)
    node = ClientNode(cfg, 1, 6)
    assert node.validation_data is None and node.test_data is None
    assert len(node.data) == len(cfg_partition(cfg)[1])


def cfg_partition(cfg):
    from fedsuite.data import client_partition, load_dataset

    return client_partition(cfg, load_dataset(cfg))


# ---- federated metrics ---------------------------------------------------------------------------------------
def test_federated_metrics_equal_a_direct_computation_on_the_held_out_splits():
    config = {**SYNTHETIC, "evaluation": "federated", "validation-fraction": 0.2}
    strategy, rows = run_rows(config)
    last = rows[-1]
    assert last["round"] == 2 and "accuracy" not in last and "loss" not in last  # no central evaluation
    cfg = resolve(config)
    parts = sorted(int(p) for p in last["fed_client_accuracy"])
    assert parts == eval_cohort(2, 0, 6, 0, parts) and last["fed_clients"] == 3 and last["fed_skipped"] == 0
    loss, accuracy, _ = direct_metrics(cfg, strategy.x, parts, "test_data")
    assert last["fed_loss"] == pytest.approx(loss, rel=1e-6)
    assert last["fed_accuracy"] == pytest.approx(accuracy, abs=1e-12)
    val_loss, val_accuracy, _ = direct_metrics(cfg, strategy.x, parts, "validation_data")
    assert last["fed_val_loss"] == pytest.approx(val_loss, rel=1e-6)
    assert last["fed_val_accuracy"] == pytest.approx(val_accuracy, abs=1e-12)
    accuracies = sorted(last["fed_client_accuracy"].values())
    assert last["fed_accuracy_worst10"] == accuracies[0]  # ceil(10 % of 3) = 1 client


def test_evaluation_both_rows_hold_central_and_federated_metrics_and_central_validation_is_the_union():
    config = {**SYNTHETIC, "evaluation": "both", "validation-fraction": 0.25}
    strategy, rows = run_rows(config)
    assert [r["round"] for r in rows] == [0, 1, 2]  # one row per round
    assert "accuracy" in rows[0] and "fed_accuracy" not in rows[0]
    for row in rows[1:]:
        assert {"loss", "accuracy", "val_loss", "val_accuracy", "fed_loss", "fed_accuracy"} <= set(row)
    cfg = resolve(config)
    val_loss, val_accuracy, n = direct_metrics(cfg, strategy.x, range(6), "validation_data")
    assert n == sum(math.floor(0.25 * len(p)) for p in cfg_partition(cfg))
    assert rows[-1]["val_loss"] == pytest.approx(val_loss, rel=1e-6)
    assert rows[-1]["val_accuracy"] == pytest.approx(val_accuracy, abs=1e-12)


def test_eval_clients_are_drawn_by_seed_and_round_from_all_clients():
    strategy, rows = run_rows({**SYNTHETIC, "evaluation": "federated", "eval-clients": 2, "num-server-rounds": 3})
    drawn = [sorted(int(p) for p in r["fed_client_accuracy"]) for r in rows[1:]]
    assert drawn == [eval_cohort(t, 0, 6, 2, ()) for t in (1, 2, 3)]
    assert all(len(d) == 2 for d in drawn) and len({tuple(d) for d in drawn}) > 1
    assert eval_cohort(1, 0, 6, 2, ()) == eval_cohort(1, 0, 6, 2, ()) != eval_cohort(1, 5, 6, 2, ())
    assert eval_cohort(4, 0, 6, 10, ()) == list(range(6))  # never more than N


def evaluate_res(loss, n, **metrics) -> EvaluateRes:
    return EvaluateRes(Status(Code.OK, ""), loss, n, metrics)


def test_bad_evaluate_replies_are_rejected():
    sent = {0, 1}
    good = check_eval_reply(evaluate_res(0.5, 10, **{"partition-id": 0, "accuracy": 0.8}), sent)
    assert (good.partition_id, good.num_examples, good.accuracy) == (0, 10, 0.8)
    bad = [
        evaluate_res(float("nan"), 10, **{"partition-id": 0}),
        evaluate_res(0.5, 10, **{"partition-id": 7}),  # not asked
        evaluate_res(0.5, -1, **{"partition-id": 0}),
        evaluate_res(0.5, 10, **{"partition-id": 1, "accuracy": 1.5}),
        evaluate_res(0.5, 0, **{"partition-id": 1}),  # 0 examples without saying the split is empty
        evaluate_res(0.0, 0, **{"partition-id": 1, "error": "RuntimeError: boom"}),
    ]
    for res in bad:
        with pytest.raises(RejectedReply):
            check_eval_reply(res, sent)


def test_a_bad_reply_is_logged_and_not_averaged_in(tmp_path):
    config = {**SYNTHETIC, "evaluation": "federated", "num-server-rounds": 1, "out-dir": str(tmp_path), "run-name": "r"}
    strategy = run_inprocess(config, record=True)
    strategy._asked = {0, 1}
    results = [
        (None, evaluate_res(0.25, 10, **{"partition-id": 0, "accuracy": 0.5})),
        (None, evaluate_res(float("inf"), 1000, **{"partition-id": 1, "accuracy": 0.0})),
    ]
    loss, metrics = strategy.aggregate_evaluate(1, results, [])
    assert loss == 0.25 and metrics["fed_accuracy"] == 0.5 and metrics["fed_failures"] == 1
    assert "evaluate rejected" in (tmp_path / "r" / "clients.log").read_text()


def test_an_empty_held_out_split_is_skipped_and_counted():
    replies = [EvalReply(0, 0.5, 10, 0.6, None, None, 0), EvalReply(1, 0.0, 0, None, None, None, 0)]
    metrics = federated_metrics(replies, rejected=0, failures=0)
    assert metrics["fed_skipped"] == 1 and metrics["fed_clients"] == 1
    assert metrics["fed_loss"] == 0.5 and metrics["fed_accuracy"] == 0.6  # not averaged with a zero


# ---- tables on the nodes, a server without data ---------------------------------------------------------------
def write_table(folder: Path, rng, n_train: int, n_test: int, labels: list[int]) -> None:
    folder.mkdir(parents=True)
    for split, n in (("train", n_train), ("test", n_test)):
        if n == 0:
            continue
        y = rng.choice(labels, n)
        x = rng.normal(size=(n, 4)) + y[:, None]
        pd.DataFrame({**{f"f{j}": x[:, j] for j in range(4)}, "label": y}).to_csv(folder / f"{split}.csv", index=False)


def node_tables(root: Path, sizes) -> list[dict]:
    rng = np.random.default_rng(0)
    configs = []
    for pid, (n_train, n_test, labels) in enumerate(sizes):
        write_table(root / f"node{pid}", rng, n_train, n_test, labels)
        configs.append({"partition-id": pid, "num-partitions": len(sizes), "data-dir": str(root / f"node{pid}")})
    return configs


TABLE_RUN = {
    "dataset": "table",
    "model": "logreg",
    "num-clients": 3,
    "clients-per-round": 3,
    "client-mapping": "fixed",
    "local-steps": 2,
    "batch-size": 8,
}


def test_a_server_without_data_runs_scaffold_with_federated_evaluation(tmp_path):
    nodes = node_tables(tmp_path / "data", [(30, 10, [0, 1]), (45, 7, [1, 2]), (60, 12, [0, 1, 2])])
    config = {**TABLE_RUN, "algorithm": "scaffold", "server-data": False, "evaluation": "federated",
              "input-shape": "4", "num-classes": 3, "num-server-rounds": 3, "out-dir": str(tmp_path / "out"),
              "run-name": "nodes", "data-dir": str(tmp_path / "nowhere")}  # fmt: skip
    rows = Rows()
    strategy = run_inprocess(config, record=True, observers=[rows], node_configs=nodes)
    assert [r["round"] for r in rows.rows] == [0, 1, 2, 3] and strategy.plan.evaluate is None
    for row in rows.rows[1:]:
        assert row["replies"] == 3 and row["fed_clients"] == 3 and 0.0 <= row["fed_accuracy"] <= 1.0
        assert sorted(row["fed_client_accuracy"]) == ["0", "1", "2"]
    cfg = resolve(config)
    tested = [ClientNode(cfg, pid, 3, node["data-dir"]).test_data for pid, node in enumerate(nodes)]
    assert [len(t) for t in tested] == [10, 7, 12]  # each node's own test.csv
    loss, accuracy, _ = direct_metrics(cfg, strategy.x, [0, 1, 2], "test_data", [n["data-dir"] for n in nodes])
    assert rows.rows[-1]["fed_loss"] == pytest.approx(loss, rel=1e-6)  # weighted by the unequal test sizes
    assert rows.rows[-1]["fed_accuracy"] == pytest.approx(accuracy, abs=1e-12)
    meta = json.loads((tmp_path / "out" / "nodes" / "config.json").read_text())
    assert "client_sizes" not in meta and "classes_per_client" not in meta and "nodes" in meta["data"]
    summary = json.loads((tmp_path / "out" / "nodes" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["target_metric"] == "fed_accuracy"
    assert summary["final_fed_accuracy"] == rows.rows[-1]["fed_accuracy"]


def test_a_node_without_a_test_file_holds_out_its_own_rows_and_a_one_row_node_is_skipped(tmp_path):
    nodes = node_tables(tmp_path / "data", [(40, 0, [0, 1]), (1, 0, [1]), (30, 6, [0, 1])])
    config = {**TABLE_RUN, "algorithm": "fedavg", "server-data": False, "evaluation": "federated",
              "input-shape": "4", "num-classes": 2, "num-server-rounds": 1}  # fmt: skip
    strategy, rows = run_rows(config, node_configs=nodes)
    assert rows[-1]["fed_clients"] == 2 and rows[-1]["fed_skipped"] == 1 and rows[-1]["fed_failures"] == 0
    cfg = resolve(config)
    assert len(ClientNode(cfg, 0, 3, nodes[0]["data-dir"]).test_data) == math.floor(0.2 * 40)
    assert len(ClientNode(cfg, 1, 3, nodes[1]["data-dir"]).data) == 1


def test_central_evaluation_without_a_server_test_set_is_refused_naming_evaluation(tmp_path):
    write_table(tmp_path / "t", np.random.default_rng(1), 40, 0, [0, 1])
    config = {**TABLE_RUN, "algorithm": "fedavg", "client-mapping": "logical", "data-dir": str(tmp_path / "t")}
    with pytest.raises(ConfigError, match="^evaluation='central'"):
        server_dataset(resolve(config))
    assert server_dataset(resolve({**config, "evaluation": "federated"})) is not None
    args = [f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in config.items()]
    proc = subprocess.run([sys.executable, "-m", "simulation.run", "--check", "-c", " ".join(args)],
                          capture_output=True, text=True, cwd=PROJECT, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "evaluation=" in proc.stderr


# ---- results ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("column", "expected"),
    [("accuracy", {"0.5": 2, "0.9": None}), ("fed_accuracy", {"0.5": 1, "0.9": 2}),
     ("val_accuracy", {"0.5": None, "0.9": None})],
)  # fmt: skip
def test_target_metric_picks_the_column_rounds_to_target_reads(tmp_path, column, expected):
    recorder = RunRecorder(tmp_path / column, {}, {}, [0.5, 0.9], 2, target_column=column)
    recorder.record({"round": 0, "accuracy": 0.1})
    recorder.record({"round": 1, "accuracy": 0.3, "fed_accuracy": 0.6, "fed_accuracy_worst10": 0.2,
                     "fed_client_accuracy": {"0": 0.6, "1": 0.2}})  # fmt: skip
    recorder.record({"round": 2, "accuracy": 0.55, "fed_accuracy": 0.95, "fed_accuracy_worst10": 0.9,
                     "fed_client_accuracy": {"0": 0.95, "1": 0.9}})  # fmt: skip
    summary = json.loads((tmp_path / column / "summary.json").read_text())
    assert summary["rounds_to_target"] == expected and summary["target_metric"] == column
    assert summary["final_fed_accuracy"] == 0.95 and summary["best_fed_accuracy_worst10"] == 0.9
    assert (tmp_path / column / "accuracy.png").stat().st_size > 1000


def test_the_config_resolves_the_target_column():
    assert resolve({"evaluation": "federated"}).evaluation.target_column == "fed_accuracy"
    assert resolve({}).evaluation.target_column == "accuracy"
    both = resolve({"evaluation": "both", "validation-fraction": 0.1, "target-metric": "fed-val-accuracy"})
    assert both.evaluation.target_column == "fed_val_accuracy"


# ---- through flwr run (Ray) -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_flwr_run_with_evaluation_both_writes_central_and_federated_columns(tmp_path, monkeypatch):
    from simulation.launcher import launch as sim
    from simulation.launcher.processes import tagged_processes
    from tests.conftest import SESSION

    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))
    config = {**SYNTHETIC, "evaluation": "both", "validation-fraction": 0.2, "eval-clients": 2,
              "target-metric": "fed-accuracy", "out-dir": str(tmp_path / "results"), "run-name": "both"}  # fmt: skip
    folder = sim.run(config, quiet=True)
    rows = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert all(r["fed_clients"] == 2 and "accuracy" in r and "val_accuracy" in r for r in rows[1:])
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["target_metric"] == "fed_accuracy"
    assert summary["final_fed_accuracy"] == rows[-1]["fed_accuracy"]
    assert not tagged_processes(env=SESSION)


def test_natural_partitions_test_each_client_on_its_own_test_rows(tmp_path):
    rng = np.random.default_rng(2)
    for split, sites in (("train", ["a"] * 20 + ["b"] * 30 + ["c"] * 25), ("test", ["a"] * 4 + ["b"] * 9 + ["c"] * 6)):
        y = rng.integers(0, 2, len(sites))
        x = rng.normal(size=(len(sites), 3)) + y[:, None]
        frame = pd.DataFrame({"f0": x[:, 0], "f1": x[:, 1], "f2": x[:, 2], "site": sites, "label": y})
        frame.sample(frac=1.0, random_state=0).to_csv(tmp_path / f"{split}.csv", index=False)
    config = {**TABLE_RUN, "algorithm": "fedavg", "client-mapping": "logical", "data-dir": str(tmp_path),
              "partition": "natural", "partition-column": "site", "evaluation": "both",
              "num-server-rounds": 1}  # fmt: skip
    strategy, rows = run_rows(config)
    cfg = resolve(config)
    assert [len(ClientNode(cfg, pid, 3).test_data) for pid in range(3)] == [4, 9, 6]  # sites a, b, c
    assert [len(ClientNode(cfg, pid, 3).data) for pid in range(3)] == [20, 30, 25]  # nothing held out to test
    assert rows[-1]["fed_clients"] == 3 and "accuracy" in rows[-1]


def test_with_a_validation_split_the_divergence_guard_reads_the_validation_loss():
    """The test set decides nothing during tuning: not even which trial counts as diverged."""
    from fedsuite.server.guard import RunAborted

    strategy = run_inprocess({"dataset": "synthetic-logistic", "num-clients": 4, "clients-per-round": 2,
                              "num-server-rounds": 1, "validation-fraction": 0.25})  # fmt: skip
    first = strategy.guard.state_dict()["initial_loss"]
    strategy._metrics[7] = {"loss": 1e9 * first, "val_loss": first}  # only the test loss blows up: goes on
    strategy.end_round(7)
    strategy._metrics[8] = {"loss": first, "val_loss": 1e9 * first}  # the validation loss blows up: diverged
    with pytest.raises(RunAborted):
        strategy.end_round(8)
