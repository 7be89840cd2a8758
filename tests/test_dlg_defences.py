"""The DLG study against each privacy defence (docs/dlg/defences.md): what the server really observes of one
client's one-record upload under no defence, client-level DP and SecAgg+, and how well it reconstructs the record."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsuite.dlg import analytic as dlg_analytic
from fedsuite.dlg.defences import DEFENCES, capture
from fedsuite.privacy.secagg import SecAggSettings
from fedsuite.server.app import quiet_flower_logs
from simulation.studies import dlg_defences as study

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
needs_data = pytest.mark.skipif(not FASHION_DIR.is_dir(), reason=f"{FASHION_DIR} not present")
CLIENT = 1


def settings(*flags: str):
    args = study.parse_args(["--out", "unused", "--rounds", "1", *flags])
    quiet_flower_logs()
    return args, study.base_config(args)


def observed(name: str, run_config: dict, partition: int = CLIENT):
    (obs,) = capture(name, run_config, [1], partition)
    return obs


def test_closed_form_recovers_one_record_from_a_softmax_regression_gradient():
    torch.manual_seed(0)
    layer = torch.nn.Linear(12, 4).double()
    record = torch.randn(1, 12, dtype=torch.float64)
    torch.nn.functional.cross_entropy(layer(record), torch.tensor([2])).backward()
    gradient = torch.cat([layer.weight.grad.reshape(-1), layer.bias.grad]).numpy()
    assert np.allclose(dlg_analytic.class_ratios(gradient, 4), record.numpy(), rtol=1e-12)
    assert np.allclose(dlg_analytic.reconstruct(gradient, 4), record.numpy()[0], rtol=1e-12)
    with pytest.raises(ValueError, match="linear layer"):
        dlg_analytic.class_ratios(gradient[:-1], 4)


@needs_data
def test_the_undefended_upload_is_reconstructed():
    args, run_config = settings("--seeds", "2")
    attacks, closed_form, _, _ = study.attack_observation(observed("none", run_config), run_config, args)
    kept = [a for a in attacks if a.kept]
    assert len(kept) == 1 and kept[0].distance == min(a.distance for a in attacks)
    assert kept[0].client < 1e-4  # float32 transport of Δ bounds it; measured about 1e-6
    assert closed_form < 1e-5  # measured about 1e-7


@needs_data
def test_secagg_shows_the_server_only_the_cohort_mean():
    args, run_config = settings("--seeds", "1", "--iterations", "1")  # the closed form is scored here
    plain = [observed("none", run_config, p).delta.astype(np.float64) for p in range(args.clients)]
    secure = observed("secagg", run_config)
    bound = SecAggSettings.from_values({**run_config, "secagg": True}).bound()
    assert secure.cohort == list(range(args.clients))
    assert np.abs(secure.delta - np.mean(plain, axis=0)).max() <= bound  # the mean, up to quantisation
    assert np.abs(secure.delta - plain[CLIENT]).max() > 100 * bound  # not client 1's reply
    _, undefended, _, _ = study.attack_observation(observed("none", run_config), run_config, args)
    _, hidden, _, _ = study.attack_observation(secure, run_config, args)
    assert hidden > 1e4 * undefended and hidden > 1e-2


@needs_data
def test_dp_clients_reply_carries_its_noise_share_and_dp_server_reply_does_not():
    args, run_config = settings("--seeds", "1", "--iterations", "1")  # the closed form is scored here
    clip = run_config["dp-clip"]
    delta = observed("none", run_config).delta.astype(np.float64)
    clipped = delta * min(1.0, clip / np.linalg.norm(delta))
    assert np.linalg.norm(delta) > clip  # the clip binds in this round
    server = observed("dp-server-2", run_config).delta  # the server adds its noise after it received the reply
    assert np.allclose(server, clipped, rtol=1e-6, atol=1e-9)
    noisy = observed("dp-clients-0.5", run_config).delta
    std = DEFENCES["dp-clients-0.5"].overrides["dp-noise"] * clip / math.sqrt(args.clients)
    assert abs(float(np.std(noisy - clipped)) / std - 1) < 0.05  # 7850 coordinates: the share's std
    _, closed_form, _, _ = study.attack_observation(observed("dp-clients-0.5", run_config), run_config, args)
    assert closed_form > 0.5


@needs_data
def test_study_command_writes_its_files(tmp_path):
    argv = ["--out", str(tmp_path), "--defences", "none,secagg", "--rounds", "1", "--seeds", "1", "--iterations", "3"]
    assert study.main(argv) == 0
    assert {p.name for p in tmp_path.iterdir()} >= {*study.FILES, "settings.json"}
    table = {r["defence"]: r for r in csv.DictReader((tmp_path / "table.csv").open())}
    assert set(table) == {"none", "secagg"} and float(table["none"]["closed_form_client_median"]) < 1e-5
    rows = list(csv.DictReader((tmp_path / "rows.csv").open()))
    assert len(rows) == 2 * 4
    assert "| none |" in (tmp_path / "table.md").read_text()


def test_an_unknown_defence_is_refused_before_any_work(tmp_path, capsys):
    assert study.main(["--out", str(tmp_path), "--defences", "none,dp-7"]) == 2
    err = capsys.readouterr().err
    assert "--defences" in err and "'dp-7'" in err and "secagg" in err
    assert not any(tmp_path.iterdir())
