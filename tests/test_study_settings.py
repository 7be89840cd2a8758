"""What a study runs is what its flags say (docs/running/compare-and-sweep.md): a -c or --grid key the study sets
for every run itself (algorithm, seed, where the run goes) is refused instead of being replaced run after run while
the report named it; grid values that run the same setting (lr=1 and lr=1.0) are refused like a value given twice;
a list flag given twice holds both lists; and each run keeps its client state in a client-state-dir subfolder of its
own, checked before the first run."""

from __future__ import annotations

import json
import os

import pytest

from fedsuite.config.run_config import ConfigError
from fedsuite.state import store as state
from simulation import compare, sweep, tune
from simulation.experiment.flags import parse_grid

SETTING = "dataset='synthetic-logistic' num-clients=6 clients-per-round=3 num-server-rounds=3 targets='0.5'"


def _refused(capsys, *said: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert all(s in err for s in said), err
    return err


# --- keys the study sets ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, said",
    [(["--grid", "seed=1,2"], ("--grid seed", "use --seeds")),
     (["--grid", "algorithm='fedavg','fedprox'"], ("--grid algorithm", "use --algorithms")),
     (["--grid", "out-dir='a','b'"], ("--grid out-dir", "use --out")),
     (["-c", "seed=2"], ("-c seed", "use --seeds")),
     (["-c", "algorithm='fedprox'"], ("-c algorithm", "use --algorithms")),
     (["-c", "run-name='x'"], ("-c run-name", "use --out"))],
)  # fmt: skip
def test_a_sweep_refuses_a_key_it_sets_for_every_run(tmp_path, capsys, argv, said):
    """Before: `--grid algorithm=…,seed=…` ran fedavg seed 0 again and again under rows named fedprox, seed 2."""
    assert sweep.main(["--algorithms", "fedavg", "--seeds", "0", *argv, "-c", SETTING, "--engine", "inprocess",
                       "--out", str(tmp_path)]) == 2  # fmt: skip
    _refused(capsys, "simulation.sweep sets", *said)
    assert not (tmp_path / "runs").exists()


def test_compare_and_tune_refuse_the_keys_they_set_and_compare_keeps_its_seed(tmp_path, capsys):
    assert compare.main(["--algorithms", "fedavg", "-c", "algorithm='fedprox'", "-c", SETTING, "--engine",
                         "inprocess", "--out", str(tmp_path / "c")]) == 2  # fmt: skip
    _refused(capsys, "-c algorithm", "use --algorithms")
    assert tune.main(["--algorithms", "fedavg", "-c", "seed=4", "-c", SETTING, "--out", str(tmp_path / "t")]) == 2
    _refused(capsys, "-c seed", "--seeds (the search) and --final-seeds")
    assert not (tmp_path / "c").exists() and not (tmp_path / "t").exists()
    assert compare.main(["--algorithms", "fedavg", "-c", SETTING + " seed=4", "--engine", "inprocess",
                         "--out", str(tmp_path / "c")]) == 0  # fmt: skip
    assert json.loads((tmp_path / "c/runs/fedavg/config.json").read_text())["run_config"]["seed"] == 4


def test_grid_values_that_run_the_same_setting_are_refused_like_one_given_twice():
    with pytest.raises(ConfigError, match=r"--grid 'lr=1,1.0': 1 and 1.0 are the same lr \(1.0\)"):
        parse_grid("lr=1,1.0")
    with pytest.raises(ConfigError, match=r"--grid 'lr=0.05,0.050': 0.05 and 0.050 are the same lr"):
        parse_grid("lr=0.05,0.050")
    assert parse_grid("lr=1,2.5") == [(("lr", 1),), (("lr", 2.5),)]


# --- list flags given twice ---------------------------------------------------------------------------------------


def test_a_list_flag_given_twice_holds_both_lists():
    """Before: the last --seeds, --grid, --algorithms or --space was kept and the others dropped, silently."""
    args = sweep.Sweep(None).parser().parse_args(["--algorithms", "fedavg", "--algorithms", "scaffold", "--seeds",
                                                  "0", "--seeds", "1,2", "--grid", "lr=0.1,0.2", "--grid",
                                                  "local-steps=2"])  # fmt: skip
    assert (args.algorithms, args.seeds, args.grid) == ("fedavg,scaffold", "0,1,2", "lr=0.1,0.2 local-steps=2")
    args = tune.Tuning(None).parser().parse_args(["--space", "lr=0.1", "--space", "fedcm:fedcm-alpha=0.1",
                                                  "--final-seeds", "7", "--final-seeds", "8"])  # fmt: skip
    assert (args.space, args.final_seeds) == ("lr=0.1 fedcm:fedcm-alpha=0.1", "7,8")
    args = compare.Comparison(None).parser().parse_args(["--algorithms", "fedavg", "--algorithms", "fedprox"])
    assert args.algorithms == "fedavg,fedprox"
    assert sweep.Sweep(None).parser().parse_args(["--algorithms", "fedavg"]).seeds == "0,1,2"  # the default alone


def test_the_paper_studies_join_their_list_flags_too(tmp_path, capsys):
    from simulation.studies import dlg, dlg_defences, lowrank
    from simulation.studies import lora as lora_study
    from simulation.studies import losac_table2 as table2

    assert lora_study.LoraStudy(None).parser().parse_args(["--seeds", "0", "--seeds", "1"]).seeds == "0,1"
    args = table2.TableTwo(None).parser().parse_args(["--out", "x", "--blocks", "2", "--blocks", "5", "--steps", "6"])
    assert (args.blocks, args.steps) == ("2,5", "6")
    attacked = dlg.parse_args(["--out", "x", "--algorithms", "fedavg", "--algorithms", "dsgd"])
    assert attacked.algorithms == ["fedavg", "dsgd"]
    assert lowrank.main(["--out", str(tmp_path), "--ranks", "2", "--ranks", "x"]) == 2
    _refused(capsys, "--ranks '2,x'")
    defended = dlg_defences.parse_args(["--out", "x", "--defences", "none", "--defences", "secagg"])
    assert defended.defences == ["none", "secagg"]


def test_a_sweep_given_seeds_twice_runs_both_and_refuses_one_given_in_each(tmp_path, capsys):
    argv = ["--algorithms", "fedavg", "-c", SETTING, "--engine", "inprocess", "--out", str(tmp_path)]
    assert sweep.main([*argv, "--seeds", "0", "--seeds", "0"]) == 2
    _refused(capsys, "--seeds '0,0': 0 is given twice")
    assert sweep.main([*argv, "--seeds", "0", "--seeds", "1"]) == 0
    assert sorted(p.name for p in (tmp_path / "runs/fedavg/default").iterdir()) == ["seed-0", "seed-1"]
    assert "--seeds 0,1 " in (tmp_path / "sweep.md").read_text()  # the reproduce line holds both


def test_tune_final_seeds_none_goes_alone(tmp_path, capsys):
    assert tune.main(["--algorithms", "fedavg", "--final-seeds", "none", "--final-seeds", "5", "-c", SETTING,
                      "--out", str(tmp_path)]) == 2  # fmt: skip
    _refused(capsys, "--final-seeds 'none,5': none (no final runs) goes alone")


# --- client state -------------------------------------------------------------------------------------------------


def _stateful(folder) -> str:
    return f"{SETTING} client-state='disk' client-state-dir='{folder}'"


def test_every_run_of_a_sweep_keeps_its_client_state_in_a_folder_of_its_own(tmp_path):
    """Before: the second seed was refused the folder the first had claimed, and 'rerun to try the failed runs
    again' could never succeed."""
    states, out = tmp_path / "state", tmp_path / "out"
    argv = ["--algorithms", "scaffold", "--seeds", "0,1", "-c", _stateful(states), "--engine", "inprocess",
            "--out", str(out)]  # fmt: skip
    assert sweep.main(argv) == 0
    for seed in (0, 1):
        run, own = out / f"runs/scaffold/default/seed-{seed}", states / f"runs/scaffold/default/seed-{seed}"
        assert json.loads((run / "summary.json").read_text())["status"] == "completed"
        assert state.owner(own)["results"] == str(run) and state.state_files(own)
        assert json.loads((run / "config.json").read_text())["run_config"]["client-state-dir"] == str(own)
    # an earlier attempt of a run that is run again (interrupted here) gives its folder up to the new attempt
    summary = out / "runs/scaffold/default/seed-1/summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "status": "interrupted"}))
    before = state.owner(states / "runs/scaffold/default/seed-1")["state-key"]
    assert sweep.main(argv) == 0
    assert json.loads(summary.read_text())["status"] == "completed"
    assert state.owner(states / "runs/scaffold/default/seed-1")["state-key"] != before


def test_a_client_state_folder_of_a_run_outside_the_study_is_refused_before_the_first_run(tmp_path, capsys):
    states = tmp_path / "state"
    taken = states / "runs" / "scaffold"
    state.claim(taken, 12345, "/elsewhere/run")  # another run's client state, where the comparison's run would go
    (taken / "partition-000000.state").write_bytes(b"")
    argv = ["--algorithms", "scaffold", "-c", _stateful(states), "--engine", "inprocess"]
    assert compare.main([*argv, "--out", str(tmp_path / "c")]) == 2
    _refused(capsys, "run scaffold: client-state-dir=", "state key 12345, results /elsewhere/run")
    assert not (tmp_path / "c").exists() and state.owner(taken)["state-key"] == "12345"


def test_a_comparison_beside_another_runs_client_state_completes_without_a_traceback(tmp_path, capsys):
    """Before: the run was refused the folder another run owned, then the table's writing ended in
    FileNotFoundError (the results folder had never been made)."""
    states = tmp_path / "state"
    state.claim(states, 12345, "/elsewhere/run")
    assert compare.main(["--algorithms", "scaffold", "-c", _stateful(states), "--engine", "inprocess", "--out",
                         str(tmp_path / "c")]) == 0  # fmt: skip
    assert "FileNotFoundError" not in capsys.readouterr().err and (tmp_path / "c" / "comparison.md").exists()
    assert state.owner(states)["state-key"] == "12345"  # the other run's folder is left as it was
    assert os.listdir(states / "runs" / "scaffold")
