"""DP noise nobody can recompute from the run config (docs/privacy.md, Secret noise): by default every noise stream
(the server's noise on the sum, the clients' shares, adaptive clipping's count noise, DP-SGD's per-step noise) is
keyed by secret bits from the OS, so two runs of one config end on different models; dp-noise-source='seeded' gives
reproducible noise, says once on the console that the run is not private, and every row and the summary record it.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from fedsuite.privacy.noise import numpy_stream, torch_stream
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.privacy import ServerPrivacy
from fedsuite.testing.kit import PARTIAL

pytest.importorskip("dp_accounting")

CLIENT_DP = {"dp-noise": 1.0, "dp-clip": 0.3}
ADAPTIVE = {**CLIENT_DP, "dp-clip-mode": "adaptive", "dp-count-noise": 2.0}
DP_SGD = {"dp-sgd": True, "dp-sgd-noise": 1.0, "dp-sgd-clip": 1.0}
MECHANISMS = {
    "server": {"dp": "server", **CLIENT_DP},
    "clients": {"dp": "clients", **CLIENT_DP},
    "dp-sgd": DP_SGD,
    "both": {"dp": "server", **CLIENT_DP, **DP_SGD},
}


def _final(changes: dict, **kwargs) -> np.ndarray:
    return run_inprocess({**PARTIAL, "algorithm": "scaffold", **changes}, **kwargs).x


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_two_runs_of_one_config_draw_different_noise_by_default(mechanism):
    config = MECHANISMS[mechanism]
    first, second = _final(config), _final(config)
    assert not np.array_equal(first, second), f"{mechanism}: the noise is a function of the run config"


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_seeded_noise_is_reproducible_and_is_noise(mechanism):
    config = {**MECHANISMS[mechanism], "dp-noise-source": "seeded"}
    first, second = _final(config), _final(config)
    assert first.tobytes() == second.tobytes()
    assert not np.array_equal(first, _final({**config, "dp-noise": 0.0, "dp-sgd-noise": 0.0}))


def test_adaptive_clippings_count_noise_is_secret_too():
    """dp='server', adaptive clipping, σ = 0 on the uploads: the count noise (σ_b) is the only noise left, and it
    moves C, so two runs' final clips differ by default and agree when seeded."""

    def clips(source: str) -> list[float]:
        run = run_inprocess({**PARTIAL, "algorithm": "fedavg", "dp": "server", **ADAPTIVE, "dp-noise": 0.0,
                             "dp-noise-source": source})  # fmt: skip
        return [run.stage(ServerPrivacy).clip]

    assert clips("secure") != clips("secure")
    assert clips("seeded") == clips("seeded")


def test_the_streams_are_secret_unless_seeded():
    structure = [0, 1, 2, 0xD9, 0]
    assert np.array_equal(
        numpy_stream("seeded", structure).normal(size=8), numpy_stream("seeded", structure).normal(size=8)
    )
    assert not np.array_equal(
        numpy_stream("secure", structure).normal(size=8), numpy_stream("secure", structure).normal(size=8)
    )
    assert torch_stream("seeded", 5).initial_seed() == 5
    assert torch_stream("secure", 5).initial_seed() != torch_stream("secure", 5).initial_seed()
    with pytest.raises(ValueError, match="dp-noise-source='os': allowed values are secure, seeded"):
        numpy_stream("os", structure)


def _records(folder) -> tuple[list[dict], dict]:
    rows = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
    return rows, json.loads((folder / "summary.json").read_text())


@pytest.mark.parametrize(("source", "label", "private"), [("secure", "secret", True),
                                                            ("seeded", "seeded: not private", False)])  # fmt: skip
def test_every_row_and_the_summary_say_whether_the_noise_is_secret(source, label, private, tmp_path, caplog):
    config = {**MECHANISMS["server"], "dp-noise-source": source, "out-dir": str(tmp_path), "run-name": "r"}
    with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"):
        _final(config, record=True)
    rows, summary = _records(tmp_path / "r")
    assert rows and all(row["dp_noise"] == label for row in rows)
    assert summary["dp_noise"] == label and summary["private"] is private
    warned = [r.getMessage() for r in caplog.records if "NOT private" in r.getMessage()]
    assert len(warned) == (0 if private else 1)
    assert "\n" not in "".join(warned)


def test_a_run_without_dp_records_no_noise_label(tmp_path):
    _final({"out-dir": str(tmp_path), "run-name": "r"}, record=True)
    rows, summary = _records(tmp_path / "r")
    assert all("dp_noise" not in row for row in rows) and "private" not in summary


def test_a_secret_noise_run_resumes_and_completes(tmp_path):
    """Checkpoint at round 2, resume to round 4: the run completes; the resumed run keeps the checkpoint's rows
    (the rounds before it are in the model), and its later rounds draw fresh noise."""
    config = {**MECHANISMS["server"], "out-dir": str(tmp_path), "run-name": "r", "checkpoint-every": 2,
              "num-server-rounds": 2}  # fmt: skip
    _final(config, record=True)
    before, _ = _records(tmp_path / "r")
    resumed = {**config, "num-server-rounds": 4, "resume-from": str(tmp_path / "r")}
    _final(resumed, record=True)
    rows, summary = _records(tmp_path / "r")
    assert summary["status"] == "completed" and [r["round"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[:3] == before
    assert all(r["dp_noise"] == "secret" for r in rows)
