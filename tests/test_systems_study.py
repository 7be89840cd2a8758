"""The heterogeneous-systems study's report (simulation/studies/systems.py) on small hand-made sweep folders: the
conditions are read from each run's config, differences are paired by seed, and an unfinished run is counted,
never averaged."""

from __future__ import annotations

import json

import pytest

from simulation.studies import systems as study


def write_run(root, algorithm, grid, seed, accuracy, status="completed", steps=(24.0, 24.0), replied=10, **config):
    folder = root / "runs" / algorithm / grid / f"seed-{seed}"
    folder.mkdir(parents=True)
    run_config = {"algorithm": algorithm, "seed": seed, "local-steps": 24, **config}
    (folder / "config.json").write_text(json.dumps({"run_config": run_config}))
    reached = {"0.8": 40 if accuracy > 0.8 else None}
    summary = {"status": status, "final_accuracy": accuracy, "rounds_to_target": reached}
    (folder / "summary.json").write_text(json.dumps(summary))
    rows = [{"round": 0}] + [{"round": t, "steps_mean": s, "replies": replied, "cohort": 10}
                             for t, s in enumerate(steps, 1)]  # fmt: skip
    (folder / "rounds.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


@pytest.fixture
def sweeps(tmp_path):
    stragglers, dropouts = tmp_path / "stragglers", tmp_path / "dropouts"
    for seed, (base, slow, nova) in enumerate([(0.83, 0.80, 0.82), (0.84, 0.79, 0.83), (0.82, 0.81, 0.815)]):
        write_run(stragglers, "fedavg", "speed-spread=1", seed, base, **{"speed-spread": 1.0})
        write_run(stragglers, "fedavg", "speed-spread=24", seed, slow, steps=(6.0, 8.0), **{"speed-spread": 24.0})
        write_run(stragglers, "fednova", "speed-spread=1", seed, base, **{"speed-spread": 1.0})
        write_run(stragglers, "fednova", "speed-spread=24", seed, nova, steps=(6.0, 8.0), **{"speed-spread": 24.0})
        write_run(dropouts, "fedavg", "dropout-rate=0.3", seed, base - 0.01, replied=7, **{"dropout-rate": 0.3})
    write_run(dropouts, "fednova", "dropout-rate=0.3", 0, 0.5, status="diverged", **{"dropout-rate": 0.3})
    return stragglers, dropouts


def test_table_pairs_by_seed_and_counts_unfinished_runs(sweeps, tmp_path, capsys):
    stragglers, dropouts = sweeps
    out = tmp_path / "report"
    assert study.main(["--stragglers", str(stragglers), "--dropouts", str(dropouts), "--out", str(out)]) == 0
    table = (out / "table.md").read_text()
    assert "| fedavg | stragglers, spread 24 | 0.8000 ± 0.0100 | 40.0 ± 0.0 (1/3) | 7.0 | 1.00 |" in table
    assert "| fedavg | drop-outs 0.3 | 0.8200 ± 0.0100 | 40.0 ± 0.0 (3/3) | 24.0 | 0.70 |" in table
    assert "| fednova | drop-outs 0.3 | – (1 of 1 did not finish) |" in table
    loss = (out / "loss.md").read_text()  # each algorithm against its own on-time runs, seed by seed
    assert "| fedavg | – | -0.0300 ± 0.0200 (lower, 3 seeds) | -0.0100 ± 0.0000 (lower, 3 seeds) |" in loss
    versus = (out / "against-fedavg.md").read_text()  # FedNova minus FedAvg in the same condition
    assert "| fednova | +0.0000 ± 0.0000 (not shown, 3 seeds) | +0.0217 ± 0.0176 (higher, 3 seeds) | – |" in versus
    assert (out / "accuracy.png").stat().st_size > 1000


def test_missing_sweep_is_one_line(tmp_path, capsys):
    argv = ["--stragglers", str(tmp_path / "none"), "--dropouts", str(tmp_path), "--out", str(tmp_path)]
    assert study.main(argv) == 2
    assert capsys.readouterr().err.count("\n") == 1
