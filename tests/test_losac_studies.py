"""Short CI versions of the LoSAC studies' commands (the long runs: docs/losac/index.md, docs/lowrank/index.md): the
low-rank estimation study and the Table II protocol write their table, plot and raw rows; the pieces they rely on are
checked here too."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.data import load_dataset
from fedsuite.local.variance import numerical_rank
from fedsuite.models.networks import build_model
from fedsuite.run.inprocess import run_inprocess

TINY_LOWRANK = "num-clients=10 clients-per-round=2 lowrank-size=8 synthetic-samples=20"


def test_lowrank_federation_is_the_spec_setting():
    cfg = resolve({"dataset": "synthetic-lowrank", "num-clients": 4, "clients-per-round": 2, "synthetic-samples": 50,
                   "lowrank-size": 8,
                   "lowrank-rank": 3})  # fmt: skip
    fed = load_dataset(cfg)
    truth = fed.x_star.reshape(8, 8)
    assert np.array_equal(truth, np.diag([1.0, 1, 1, 0, 0, 0, 0, 0])) and numerical_rank(truth) == 3
    assert fed.features_x.shape == (200, 64) and abs(fed.features_x.mean() - 0.1) < 0.05  # N(0.1, 1) entries
    residual = fed.targets - fed.features_x @ fed.x_star
    assert 0.07 < residual.std() < 0.13  # noise std 0.1 ([decision])
    model = build_model("matrix", (64,), 1, "regression")
    assert [tuple(p.shape) for p in model.parameters()] == [(8, 8)]
    with pytest.raises(ConfigError, match="lowrank-rank=9: must be <= lowrank-size=8"):
        resolve({"dataset": "synthetic-lowrank", "lowrank-size": 8, "lowrank-rank": 9})


def test_nuclear_prox_keeps_the_estimate_low_rank_and_without_it_the_rank_is_full():
    base = {"dataset": "synthetic-lowrank", "num-clients": 10, "clients-per-round": 5, "lowrank-size": 8,
            "lowrank-rank": 2, "synthetic-samples": 40, "local-steps": 5, "losac-blocks": 2, "lr": 0.01,
            "num-server-rounds": 40, "eval-every": 1000, "prox-penalty": "nuclear"}  # fmt: skip
    shrunk = run_inprocess({**base, "algorithm": "losac-prox", "prox-lambda": 2.0}).x.reshape(8, 8)
    plain = run_inprocess({**base, "algorithm": "losac"}).x.reshape(8, 8)
    assert numerical_rank(plain) == 8 and numerical_rank(shrunk) <= 4


def test_lowrank_study_command_writes_table_plot_and_rows(tmp_path, capsys):
    from simulation.studies import lowrank

    rc = lowrank.main(["--out", str(tmp_path), "--ranks", "2", "--lambdas", "0.1,1", "--rounds", "3",
                       "-c", TINY_LOWRANK])  # fmt: skip
    assert rc == 0
    with open(tmp_path / "rows.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 2 * 3  # algorithms × λ × rounds
    assert {r["algorithm"] for r in rows} == {"losac-prox", "scaffold-prox"}
    table = (tmp_path / "lowrank.md").read_text()
    assert table.count("| losac-prox |") == 2 and table.count("| scaffold-prox |") == 2 and table.count("*") >= 2
    assert (tmp_path / "lowrank.png").stat().st_size > 1000
    closing = capsys.readouterr().out.split("wrote:\n")[-1]  # the study ends by naming what it wrote
    assert all(f"  {tmp_path / name}" in closing for name in ("lowrank.md", "lowrank.csv", "lowrank.png", "rows.csv"))
    assert lowrank.main(["--out", str(tmp_path), "--algorithms", "nope"]) == 2


def test_table2_command_writes_the_papers_form(tmp_path, capsys):
    from simulation.studies import losac_table2 as table2

    rc = table2.main(["--out", str(tmp_path), "--algorithms", "losac,scaffold", "--blocks", "2", "--steps", "2",
                      "--rounds", "2", "--engine", "inprocess", "--target", "0.1",
                      "-c", "dataset='synthetic-logistic' model='auto' num-clients=6 clients-per-round=3",
                      "-c", "lr=0.01"])  # fmt: skip
    assert rc == 0
    table = (tmp_path / "table2.md").read_text()
    assert "| losac | 2 | 2 |" in table and "| scaffold | 2 | 2 |" in table
    assert capsys.readouterr().out.endswith(f"wrote:\n  {tmp_path / 'table2.md'}\n  {tmp_path / 'table2.csv'}\n")
    config = json.loads((tmp_path / "M2-T2" / "runs" / "losac" / "config.json").read_text())["run_config"]
    assert config["local-batches"] == "blocks" and config["loss-reduction"] == "sum" and config["losac-blocks"] == 2
    assert config["dataset"] == "synthetic-logistic"  # -c overrides the setting instead of clashing with it


def test_table2_combine_gives_mean_and_std_over_seed_folders(tmp_path):
    from simulation.studies import losac_table2 as table2

    fields = ["algorithm", "M", "T", "status", "rounds", "rounds_to_target", "final_loss", "final_accuracy",
              "speedup_vs_scaffold"]  # fmt: skip
    seeds = {  # per seed: (LoSAC rounds, SCAFFOLD rounds, LoSAC accuracy)
        "s1": ("60", "90", 0.90),
        "s2": ("80", "80", 0.92),
        "s3": ("", "70", 0.94),
    }  # s3: LoSAC never reached it
    for name, (losac, scaffold, accuracy) in seeds.items():
        (tmp_path / name).mkdir()
        with open(tmp_path / name / "table2.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            speedup = round(int(scaffold) / int(losac), 2) if losac else ""
            writer.writerow({"algorithm": "losac", "M": 5, "T": 6, "status": "completed", "rounds": 100,
                             "rounds_to_target": losac, "final_loss": 0.3, "final_accuracy": accuracy,
                             "speedup_vs_scaffold": speedup})  # fmt: skip
            writer.writerow({"algorithm": "scaffold", "M": 5, "T": 6, "status": "completed", "rounds": 100,
                             "rounds_to_target": scaffold, "final_loss": 0.3, "final_accuracy": 0.9,
                             "speedup_vs_scaffold": 1.0})  # fmt: skip
    (tmp_path / "s4").mkdir()  # a diverged LoSAC run: counted, never averaged in
    with open(tmp_path / "s4" / "table2.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerow({"algorithm": "losac", "M": 5, "T": 6, "status": "diverged", "rounds": 7,
                         "rounds_to_target": "", "final_loss": 99.0, "final_accuracy": 0.1,
                         "speedup_vs_scaffold": ""})  # fmt: skip
    out = tmp_path / "combined"
    assert table2.main(["--combine", *(str(tmp_path / s) for s in [*seeds, "s4"]), "--out", str(out)]) == 0
    rows = {r["algorithm"]: r for r in csv.DictReader(open(out / "seeds.csv"))}
    assert rows["losac"]["rounds_to_target"] == "70.0 ± 14.1" and rows["losac"]["rounds_to_target_each"] == "60 80 –"
    assert rows["losac"]["speedup_vs_scaffold"] == "1.25 ± 0.35"  # mean of 1.5 and 1.0 (per seed, not of means)
    assert rows["losac"]["final_accuracy"] == "0.9200 ± 0.0200"
    assert rows["scaffold"]["rounds_to_target"] == "80.0 ± 10.0" and rows["scaffold"]["speedup_vs_scaffold"] == ""
    assert rows["losac"]["completed"] == "3" and rows["losac"]["seeds"] == "4"
    assert "| losac | 5 | 6 | 3/4 | 70.0 ± 14.1 (2/3) | 60 80 – |" in (out / "seeds.md").read_text()
    assert table2.main(["--combine", str(tmp_path / "missing"), "--out", str(out)]) == 2
