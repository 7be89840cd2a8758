"""DLG attack and the LoSAC paper's leakage study command (docs/dlg/index.md)."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from torch import nn

from fedsuite.dlg import attack as dlg
from fedsuite.dlg.messages import MESSAGES, available
from simulation.studies import dlg as study

TASK, CLASSES, FEATURES = "classification", 2, 4


def tiny_problem(samples: int = 1):
    """A sigmoid MLP (twice differentiable) whose gradient (58 entries) far outnumbers the batch's unknowns."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(FEATURES, 8), nn.Sigmoid(), nn.Linear(8, CLASSES)).double()
    x = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    inputs = torch.randn(samples, FEATURES, dtype=torch.float64)
    targets = torch.arange(samples) % CLASSES
    return dlg.flat_forward(net), dlg.soft_loss(TASK), x, inputs, dlg.hard_probabilities(TASK, targets, CLASSES)


def local_sgd_message(forward, loss, x, inputs, probs, lr: float, steps: int) -> torch.Tensor:
    """FedAvg's client on the full batch, read as the attacker reads it: (x^t − x^+)/(η·T) (docs/dlg/index.md)."""
    z = x.clone()
    for _ in range(steps):
        z = z - lr * dlg.model_gradient(forward, loss, z, inputs, probs)
    return dlg.pseudo_gradient(z - x, lr, steps)


def run_attack(observed, forward, loss, x, inputs, **kw):
    shape = dlg.label_shape(TASK, len(inputs), CLASSES)
    return dlg.dlg_attack(forward, loss, TASK, x, observed, inputs, shape, **kw)


def test_flat_forward_matches_the_module():
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(3, 5), nn.Sigmoid(), nn.Linear(5, 2)).double()
    x = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    inputs = torch.randn(4, 3, dtype=torch.float64)
    assert torch.allclose(dlg.flat_forward(net)(x, inputs), net(inputs))


def test_one_full_batch_step_reveals_the_exact_gradient():
    forward, loss, x, inputs, probs = tiny_problem(samples=2)
    exact = dlg.model_gradient(forward, loss, x, inputs, probs)
    assert torch.allclose(local_sgd_message(forward, loss, x, inputs, probs, 0.1, 1), exact, rtol=1e-12, atol=1e-15)
    # the paper's sign, (x^+ − x)/(ηT), is the negative gradient
    assert torch.allclose(-dlg.pseudo_gradient(-0.1 * exact, 0.1, 1), -exact)


SEEDS = (0, 2, 4)  # dummy-data draws


@pytest.mark.parametrize("seed", SEEDS)
def test_attack_recovers_a_dsgd_batch(seed):
    forward, loss, x, inputs, probs = tiny_problem()
    observed = dlg.model_gradient(forward, loss, x, inputs, probs)
    trace = run_attack(observed, forward, loss, x, inputs, iterations=10, lr=1.0, optimizer="lbfgs", seed=seed)
    assert len(trace.errors) == len(trace.distances) == 11
    assert trace.errors[-1] < 1e-4 * trace.errors[0]  # orders of magnitude
    assert trace.distances[-1] < 1e-10 * trace.distances[0]
    assert trace.label_logits.argmax(-1).tolist() == [0]  # the soft label is found too


@pytest.mark.parametrize("seed", SEEDS)
def test_attack_fails_on_a_multi_step_fedavg_message(seed):
    forward, loss, x, inputs, probs = tiny_problem()
    observed = local_sgd_message(forward, loss, x, inputs, probs, lr=1.0, steps=50)
    trace = run_attack(observed, forward, loss, x, inputs, iterations=10, lr=1.0, optimizer="lbfgs", seed=seed)
    final = trace.errors[-1]
    assert not final < 1e-2 * trace.errors[0]  # a partial match at best (or a blow-up), never a recovery


def test_plain_gd_descends_the_matching_loss_and_is_seeded():
    forward, loss, x, inputs, probs = tiny_problem()
    observed = dlg.model_gradient(forward, loss, x, inputs, probs)
    a = run_attack(observed, forward, loss, x, inputs, iterations=200, lr=1.0, seed=5)
    b = run_attack(observed, forward, loss, x, inputs, iterations=200, lr=1.0, seed=5)
    assert a.errors == b.errors
    assert a.distances[-1] < 1e-2 * a.distances[0]
    assert a.errors[-1] < 0.5 * a.errors[0]


def test_unknown_optimizer_and_task_are_refused():
    forward, loss, x, inputs, probs = tiny_problem()
    with pytest.raises(ValueError, match="optimizer"):
        run_attack(x, forward, loss, x, inputs, optimizer="adam")
    with pytest.raises(ValueError, match="task"):
        dlg.soft_loss("regression")


def test_message_table_covers_the_issue():
    assert {"dsgd", "mimesvrg", "fedavg", "scaffold", "losac"} <= set(MESSAGES)
    assert MESSAGES["dsgd"].overrides["local-steps"] == 1 and MESSAGES["mimesvrg"].source == "query"
    assert available("nonsense").startswith("unknown")


def test_study_command_writes_its_files(tmp_path):
    argv = ["--out", str(tmp_path), "--dataset", "synthetic", "--clients", "4", "--round", "2", "--iterations", "5",
            "--algorithms", "dsgd,mimesvrg,fedavg,scaffold,losac", "--loss-reduction", "mean", "--lr", "0.5",
            "--attack-lr", "0.1", "-c", "synthetic-samples=3 synthetic-dim=6"]  # fmt: skip
    assert study.main(argv) == 0
    out = tmp_path / "synthetic"
    assert {p.name for p in out.iterdir()} >= {"table.md", "table.csv", "rows.csv", "errors.png", "settings.json"}
    table = {r["algorithm"]: r for r in csv.DictReader((out / "table.csv").open())}
    rows = list(csv.DictReader((out / "rows.csv").open()))
    ran = [a for a in table if not table[a]["note"]]
    assert {"dsgd", "mimesvrg", "fedavg", "scaffold"} <= set(ran)
    assert len(rows) == 6 * len(ran)
    assert json.loads((out / "settings.json").read_text())["run_config"]["num-clients"] == 4
    # exact-gradient messages match the true batch (up to float32 transport), multi-step ones do not
    for name in ("dsgd", "mimesvrg"):
        assert float(table[name]["D_true_batch"]) < 1e-9
    assert float(table["fedavg"]["D_true_batch"]) > 1e-6
    for name in ran:
        assert table[name]["decreased"] in ("yes", "no")
        first = [float(r["error"]) for r in rows if r["algorithm"] == name and r["iteration"] == "0"]
        assert first == [float(table[name]["err_0"])]
    assert "| dsgd |" in (out / "table.md").read_text()
