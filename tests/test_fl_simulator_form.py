"""FedSpeed's client round against the form of the FedSpeed authors' simulator (FL-Simulator, client/fedspeed.py),
written here independently in plain torch: SAM's normalised ascent, the dual term added to the loss as
μ·⟨x, h_i − x^t⟩, the gradient norm clipped over all parameters, then torch.optim.SGD with weight decay wd + μ.
Under clip-scope='reference' fedsuite's round equals it (with and without clipping); clip-scope='clean' clips
only the loss gradient and the dual, so it differs once clipping bites (docs/algorithms/fedspeed.md)."""

from __future__ import annotations

import copy
import types

import pytest
import torch
from torch import nn

from fedsuite.clients.fedspeed import FedSpeedClient
from fedsuite.config.run_config import resolve
from fedsuite.local.loop import minibatches, train_local
from fedsuite.models.networks import FlatModel, loss_function
from fedsuite.rules.client_rule import RoundContext
from tests.helpers import one_client_of_a_2nn

MU, RHO, LR, WD, EPOCHS, BATCH = 0.1, 0.1, 0.05, 1e-3, 2, 16


@pytest.fixture(scope="module")
def setting():
    net, data, x0 = one_client_of_a_2nn()
    h_i = torch.randn(x0.numel()) * 0.5  # the server's sum of this client's displacements: ĝ_i = −μ·h_i
    return net, data, x0, h_i


def fedsuite_round(setting, clip: float, scope: str) -> torch.Tensor:
    net, data, x0, h_i = setting
    model = FlatModel(copy.deepcopy(net))
    cfg = resolve({"algorithm": "fedspeed", "dual-storage": "server", "clip-scope": scope})
    node = types.SimpleNamespace(cfg=cfg, state_of=lambda client: None)  # the server holds the duals: no client state
    client = FedSpeedClient(node, MU, RHO, 1.0, dual_storage="server")
    rule = client.rule(RoundContext(round=1, lr=LR, down={"model": x0, "h_i": h_i}))
    result = train_local(model, x0, data, loss_function("classification"), rule, lr=LR, weight_decay=WD,
                         clip_norm=clip, epochs=EPOCHS, steps=0, batch_size=BATCH,
                         generator=torch.Generator().manual_seed(3))  # fmt: skip
    return result.x.detach().clone()


def simulator_form_round(setting, clip: float) -> torch.Tensor:
    net, data, x0, h_i = setting
    model = copy.deepcopy(net)
    torch.nn.utils.vector_to_parameters(x0.clone(), model.parameters())
    params = list(model.parameters())
    optimiser = torch.optim.SGD(params, lr=LR, weight_decay=WD + MU)  # the prox's μ·x rides on the weight decay
    loss_fn = nn.CrossEntropyLoss()
    correction = h_i - x0
    for inputs, targets in minibatches(data, EPOCHS, 0, BATCH, torch.Generator().manual_seed(3)):
        optimiser.zero_grad()
        loss_fn(model(inputs), targets).backward()
        norm = torch.norm(torch.stack([p.grad.norm() for p in params]))
        ascent = [p.grad * (RHO / (norm + 1e-7)) for p in params]
        with torch.no_grad():
            for p, e in zip(params, ascent, strict=True):
                p.add_(e)
        optimiser.zero_grad()
        loss_fn(model(inputs), targets).backward()  # the gradient at the ascent point
        with torch.no_grad():
            for p, e in zip(params, ascent, strict=True):
                p.sub_(e)
        flat = torch.cat([p.reshape(-1) for p in params])
        (MU * torch.sum(flat * correction)).backward()  # adds μ·(h_i − x^t) = −ĝ_i − μ·x^t to the gradient
        if clip:
            torch.nn.utils.clip_grad_norm_(params, clip)
        optimiser.step()
    return torch.cat([p.detach().reshape(-1) for p in params])


@pytest.mark.parametrize("clip", [0.0, 10.0, 1.0])
def test_reference_clip_scope_is_the_simulators_round(setting, clip):
    x0 = setting[2]
    ours, theirs = fedsuite_round(setting, clip, "reference"), simulator_form_round(setting, clip)
    moved = (theirs - x0).norm()
    assert moved > 1e-2  # the round moved the model
    assert (ours - theirs).norm() / moved < 1e-5


def test_clean_clip_scope_differs_once_clipping_bites(setting):
    x0 = setting[2]
    clean, theirs = fedsuite_round(setting, 1.0, "clean"), simulator_form_round(setting, 1.0)
    assert (clean - theirs).norm() / (theirs - x0).norm() > 1e-2
    assert (fedsuite_round(setting, 0.0, "clean") - simulator_form_round(setting, 0.0)).norm() < 1e-4
