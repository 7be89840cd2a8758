"""A node operator's allow-list (node config `allowed-modules`, fedsuite/node/trust.py): a run naming an import-path
model or loader from another module is refused by that node before anything is imported, with an error reply whose
one line reaches the server's log and clients.log; allowed runs are unchanged."""

from __future__ import annotations

import logging
import sys
import textwrap

import numpy as np
import pytest
from flwr.common import FitIns, GetPropertiesIns, ndarrays_to_parameters

from fedsuite.config.run_config import resolve
from fedsuite.node.app import client_fn
from fedsuite.node.trust import NodeConfigError, admits, allowed_modules, refusal
from fedsuite.run.inprocess import node_contexts, run_inprocess
from tests.observing import Rows

LSQ = {"dataset": "synthetic-lsq", "algorithm": "fedavg", "num-clients": 2, "clients-per-round": 2,
       "num-server-rounds": 2, "synthetic-dim": 6, "synthetic-samples": 20, "local-steps": 3, "batch-size": 5,
       "lr": 0.05, "client-mapping": "fixed", "device": "cpu"}  # fmt: skip
FACTORY = """
import torch

IMPORTED = True


def linear(input_shape, num_classes, task):
    return torch.nn.Linear(input_shape[0], 1, bias=False)
"""


def node_context(run_config: dict, node_config: dict):
    """The Context a deployed SuperNode with `node_config` gives the ClientApp for a run of `run_config`."""
    return node_contexts(run_config, 1, 0, [node_config])[0]


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """Importable packages mylab.models and otherlab.models (the same linear factory), and evil (never imported:
    its import would raise)."""
    for name in ("mylab", "otherlab"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
        (tmp_path / name / "models.py").write_text(textwrap.dedent(FACTORY))
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "__init__.py").write_text("raise SystemExit('evil was imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.split(".")[0] in ("mylab", "otherlab", "evil")]:
        del sys.modules[name]


def test_names_admit_themselves_and_their_submodules():
    assert admits("mylab", ("mylab",)) and admits("mylab.models.deep", ("mylab",))
    assert not admits("mylabx", ("mylab",)) and not admits("mylab", ("mylab.models",))
    assert allowed_modules({}) is None  # no key: nothing restricted
    assert allowed_modules({"allowed-modules": ""}) == ()  # empty: built-ins only
    assert allowed_modules({"allowed-modules": " mylab, tools.data "}) == ("mylab", "tools.data")
    with pytest.raises(NodeConfigError, match="node config allowed-modules='my lab'"):
        allowed_modules({"allowed-modules": "my lab"})


@pytest.mark.parametrize(
    "run, node, expected",
    [
        (
            {"model": "evil.mod:f"},
            "mylab",
            "runs only models and loaders from mylab (node config allowed-modules), each named 'module:callable' "
            "with a plain callable name; the run names model='evil.mod:f'",
        ),  # fmt: skip
        ({"dataset": "evil.data:load"}, "mylab", "the run names dataset='evil.data:load'"),
        (
            {"model": "evil:f", "dataset": "evil:g"},
            "",
            "from none, built-ins only (node config allowed-modules), each named 'module:callable' with a plain "
            "callable name; the run names model='evil:f' and dataset='evil:g'",
        ),  # fmt: skip
        ({"model": "mylab.models:linear"}, "mylab", None),
        ({"model": "mylab.models:os.system"}, "mylab", "the run names model='mylab.models:os.system'"),  # reach-through
        ({"model": "cnn", "dataset": "fashion-mnist"}, "", None),  # built-ins are always allowed
        (
            {"model": "fedsuite.models.networks:cnn", "dataset": "table"},
            "",
            None,
        ),  # the built-in CNN by its import path
        ({"model": "evil.mod:f"}, None, None),  # no allow-list
    ],
)
def test_refusal_names_the_key_and_what_the_run_names(run, node, expected):
    reason = refusal(resolve(run), {} if node is None else {"allowed-modules": node})
    if expected is None:
        assert reason is None
    else:
        assert expected in reason and "\n" not in reason


def fit_ins(round_=1) -> FitIns:
    return FitIns(ndarrays_to_parameters([np.zeros(3, np.float32)]), {"round": round_, "lr": 0.1})


def test_a_refused_fit_is_an_error_reply_and_nothing_is_imported(packages):
    nc = {"partition-id": 1, "num-partitions": 2, "allowed-modules": "mylab"}
    context = node_context({**LSQ, "model": "evil.mod:f"}, nc)
    res = client_fn(context).fit(fit_ins())
    assert res.num_examples == 0 and not res.parameters.tensors
    assert res.metrics["partition-id"] == 1
    assert res.metrics["error"] == ("NodeRefused: this node runs only models and loaders from mylab (node config "
                                    "allowed-modules), each named 'module:callable' with a plain callable name; the "
                                    "run names model='evil.mod:f'")  # fmt: skip
    assert "evil" not in sys.modules
    # discovery still learns which partition the node is, so its fit messages carry the refusal to the server
    props = client_fn(context).get_properties(GetPropertiesIns({}))
    assert dict(props.properties) == {"partition-id": 1, "num-partitions": 2}
    assert "evil" not in sys.modules


def test_a_loader_outside_the_list_is_refused_before_it_is_imported(packages):
    nc = {"partition-id": 0, "num-partitions": 2, "allowed-modules": "mylab"}
    res = client_fn(node_context({**LSQ, "dataset": "evil.data:load"}, nc)).fit(fit_ins())
    assert "dataset='evil.data:load'" in res.metrics["error"] and "evil" not in sys.modules


def test_a_bad_allow_list_is_an_error_reply_naming_the_key(packages):
    nc = {"partition-id": 0, "num-partitions": 2, "allowed-modules": "my-lab"}
    res = client_fn(node_context({**LSQ, "model": "mylab.models:linear"}, nc)).fit(fit_ins())
    assert res.metrics["error"].startswith("NodeConfigError: node config allowed-modules='my-lab'")
    assert "mylab" not in sys.modules


def test_a_refusing_node_is_rejected_and_logged_the_others_train(packages, tmp_path, caplog):
    """Node 1 allows only mylab; the run's model is otherlab's: every round node 1's reply is rejected with the
    reason (server log and clients.log) and node 0 alone trains."""
    config = {**LSQ, "model": "otherlab.models:linear", "min-replies": 0.5, "out-dir": str(tmp_path / "results"),
              "run-name": "refused"}  # fmt: skip
    nodes = [{"partition-id": 0, "num-partitions": 2},
             {"partition-id": 1, "num-partitions": 2, "allowed-modules": "mylab"}]  # fmt: skip
    caplog.set_level(logging.WARNING)
    strategy = run_inprocess(config, record=True, node_configs=nodes)
    reason = "this node runs only models and loaders from mylab (node config allowed-modules)"
    lines = [r.getMessage() for r in caplog.records if reason in r.getMessage()]
    assert len(lines) == 2 and all("client 1 rejected: NodeRefused:" in line for line in lines)
    log = (tmp_path / "results" / "refused" / "clients.log").read_text()
    assert log.count(reason) == 2 and "model='otherlab.models:linear'" in log
    assert [r["replies"] for r in strategy.plan.recorder.rows[1:]] == [1, 1]


def test_an_allowed_import_path_model_trains_exactly_as_without_a_list(packages):
    """Allow-lists that admit the run change nothing: the same bytes as nodes without one."""
    config = {**LSQ, "model": "mylab.models:linear"}
    listed = [{"partition-id": i, "num-partitions": 2, "allowed-modules": "tools, mylab"} for i in (0, 1)]
    rows = Rows()
    with_list = run_inprocess(config, observers=[rows], node_configs=listed)
    without = run_inprocess(config)
    assert [r["replies"] for r in rows.rows[1:]] == [2, 2]
    assert with_list.x.tobytes() == without.x.tobytes()
