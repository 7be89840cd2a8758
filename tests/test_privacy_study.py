"""The privacy–utility study's report (simulation/studies/privacy_utility.py) on hand-made run folders: the table
averages completed seeds only and shows each setting's ε, and the paired gaps against FedAvg give the right
verdict."""

from __future__ import annotations

import json
import math

from simulation.studies import privacy_utility


def _run(root, algorithm, sigma, seed, accuracy, epsilon, status="completed"):
    folder = root / "runs" / algorithm / ("default" if sigma is None else f"dp-noise={sigma}") / f"seed-{seed}"
    folder.mkdir(parents=True)
    config = {
        "algorithm": algorithm,
        "seed": seed,
        "dp": "off" if sigma is None else "server",
        "dp-noise": 1.0 if sigma is None else sigma,
    }
    (folder / "config.json").write_text(json.dumps({"run_config": config}))  # as a results folder holds it
    (folder / "summary.json").write_text(json.dumps({"status": status, "final_accuracy": accuracy,
                                                     "rounds_completed": 1}))  # fmt: skip
    row = {"round": 1} if sigma is None else {"round": 1, "dp_epsilon": epsilon}
    (folder / "rounds.jsonl").write_text(json.dumps({"round": 0}) + "\n" + json.dumps(row) + "\n")


def test_the_report_tables_accuracy_against_epsilon_and_pairs_the_seeds(tmp_path):
    plain, private, out = tmp_path / "plain", tmp_path / "dp", tmp_path / "out"
    for seed, (avg, scaffold) in enumerate(((0.80, 0.82), (0.78, 0.81))):
        _run(plain, "fedavg", None, seed, avg, None)
        _run(plain, "scaffold", None, seed, scaffold, None)
        _run(private, "fedavg", 1.0, seed, avg - 0.1, 3.5)
        _run(private, "scaffold", 1.0, seed, avg - 0.1 - 0.01 * (seed + 1), 3.5)  # worse under DP, every seed
        _run(private, "fedavg", 0.0, seed, avg, None)  # σ = 0: ε is infinite (written as null)
        _run(private, "scaffold", 0.0, seed, scaffold if seed else 0.5, None, "completed" if seed else "diverged")
    assert privacy_utility.main(["--plain", str(plain), "--dp", str(private), "--out", str(out)]) == 0
    table = (out / "table.md").read_text()
    assert "| algorithm | no DP | σ=0 (ε=∞) | σ=1 (ε=3.5) |" in table
    assert "| fedavg | 0.7900 ± 0.0141 | 0.7900 ± 0.0141 | 0.6900 ± 0.0141 |" in table
    assert "0.8100 ± 0.0000 (1 of 2 did not complete)" in table  # the diverged seed is counted, not averaged
    gaps = (out / "gaps.md").read_text()
    assert "| scaffold | +0.0250 ± 0.0071 (helps, 2 seeds) | +0.0300 ± 0.0000 (helps, 1 seed) |" in gaps
    assert "-0.0150 ± 0.0071 (hurts, 2 seeds)" in gaps
    assert (out / "accuracy-vs-epsilon.png").stat().st_size > 0
    zero = [r for r in privacy_utility.runs(private) if r["sigma"] == 0.0]
    assert zero and all(math.isinf(r["epsilon"]) for r in zero)


def test_the_report_refuses_a_folder_without_runs(tmp_path, capsys):
    assert privacy_utility.main(["--plain", str(tmp_path), "--dp", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "--plain" in capsys.readouterr().err
