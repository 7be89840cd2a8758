"""Presets (fedsuite/config/presets.py): they resolve, explicit keys win through both paths, the launcher prints them,
unknown names and missing data are reported, and the values are the papers' numbers (docs/reference/papers.md)."""

import pytest

from fedsuite.config import presets as preset_rules
from fedsuite.config.presets import PRESETS, apply_preset
from fedsuite.config.run_config import ALGORITHMS, SCHEMA, ConfigError, resolve
from simulation import compare, presets
from simulation import run as runmod
from simulation.launcher import launch
from simulation.launcher.preflight import preflight
from simulation.launcher.project import pyproject_defaults

NAMES = sorted(PRESETS)
# the sources a preset reproduces (their numbers: docs/reference/papers.md)
PAPERS = ("FedSpeed thesis", "FedCM paper", "FedMIM paper", "FAdamET paper", "LoSAC paper", "FL-Simulator README")


def _launch_cfg(overrides: dict):
    """The config simulation.run launches with for these -c keys."""
    expanded, _ = preset_rules.expand(overrides)
    return resolve({**pyproject_defaults(), **expanded})


# --- every preset is well formed and resolves without data ------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_preset_resolves_for_each_of_its_algorithms(name):
    p = PRESETS[name]
    assert p.description and "\n" not in p.description and p.source.startswith(PAPERS)
    assert p.algorithms and set(p.algorithms) <= set(ALGORITHMS)
    assert set(p.values) <= set(SCHEMA), set(p.values) - set(SCHEMA)
    assert set(p.per_algorithm) <= set(p.algorithms)
    for keys in p.per_algorithm.values():
        assert set(keys) <= set(SCHEMA)
    cfg = resolve({"preset": name})  # the ServerApp's path
    assert cfg["preset"] == name
    assert cfg["algorithm"] == p.values["algorithm"]
    for key, value in p.values_for(cfg.algorithm).items():
        assert cfg[key] == value, key
    for algorithm in p.algorithms:  # simulation.run's path, one run per algorithm of the table
        cfg = _launch_cfg({"preset": name, "algorithm": algorithm})
        assert cfg["algorithm"] == algorithm and cfg["preset-expanded"] is True
        for key, value in p.values_for(algorithm).items():
            if key != "algorithm":
                assert cfg[key] == value, (algorithm, key)


def test_presets_change_the_defaults_and_differ_from_each_other():
    seen = set()
    for name in NAMES:
        values = dict(resolve({"preset": name}))
        values.pop("preset")
        assert values != dict(resolve()), name
        key = tuple(sorted(values.items()))
        assert key not in seen, f"{name} duplicates another preset"
        seen.add(key)


def test_no_preset_is_the_defaults():
    assert preset_rules.expand({"lr": 0.2}) == ({"lr": 0.2}, {})
    assert apply_preset({"lr": 0.2}) == ({"lr": 0.2}, {})


# --- precedence: defaults < preset < per-algorithm < explicit ---------------------------------------------------


def test_explicit_keys_override_the_preset_in_resolve():
    cfg = resolve({"preset": "fedspeed-cifar10-100x10", "lr": 0.05 * 3, "num-server-rounds": 7})
    assert cfg["lr"] == pytest.approx(0.15) and cfg["num-server-rounds"] == 7
    assert cfg["local-epochs"] == 5 and cfg["weight-decay"] == 1e-3  # the rest from the preset


def test_resolve_cannot_tell_an_explicit_default_from_an_unset_key():
    # documented limitation of the apps' path: weight-decay=0.0 is the default, so the preset's 1e-3 applies
    cfg = resolve({"preset": "fedspeed-cifar10-100x10", "weight-decay": 0.0})
    assert cfg["weight-decay"] == 1e-3


def test_simulation_run_expansion_lets_every_explicit_key_win():
    cfg = _launch_cfg({"preset": "fedspeed-cifar10-100x10", "weight-decay": 0.0, "clip-norm": 0.0, "lr": 0.3})
    assert cfg["weight-decay"] == 0.0 and cfg["clip-norm"] == 0.0 and cfg["lr"] == 0.3
    assert cfg["local-epochs"] == 5 and cfg["targets"] == "0.8,0.85"
    # what the ServerApp receives resolves to the same config (the preset is not applied a second time)
    expanded, _ = preset_rules.expand({"preset": "fedspeed-cifar10-100x10", "weight-decay": 0.0})
    assert resolve(expanded)["weight-decay"] == 0.0


def test_per_algorithm_values_follow_the_algorithm():
    # docs/reference/protocol.md: γ = 0.9995 for FedDyn/FedADMM/FedSpeed at 100/10 %, 0.998 for the others
    assert _launch_cfg({"preset": "fedspeed-cifar10-100x10"})["lr-decay"] == 0.9995
    assert _launch_cfg({"preset": "fedspeed-cifar10-100x10", "algorithm": "fedavg"})["lr-decay"] == 0.998
    assert _launch_cfg({"preset": "fedspeed-cifar10-100x10", "algorithm": "feddyn"})["lr-decay"] == 0.9995
    assert resolve({"preset": "fedspeed-cifar10-100x10", "algorithm": "scaffold"})["lr-decay"] == 0.998
    # an explicit key still beats the per-algorithm value
    assert _launch_cfg({"preset": "fedspeed-cifar10-100x10", "algorithm": "feddyn", "lr-decay": 1.0})["lr-decay"] == 1.0


def test_preset_expanded_stops_a_second_expansion():
    cfg = resolve({"preset": "losac-mnist", "preset-expanded": True})
    assert cfg["lr"] == SCHEMA["lr"].default and cfg["dataset"] == SCHEMA["dataset"].default


# --- errors -----------------------------------------------------------------------------------------------------


def test_unknown_preset_names_the_allowed_ones():
    for call in (lambda: resolve({"preset": "fedspeed-cifar10"}), lambda: preset_rules.expand({"preset": "nope"})):
        with pytest.raises(ConfigError) as exc:
            call()
        assert "unknown preset" in str(exc.value)
        for name in NAMES:
            assert name in str(exc.value)


def test_unknown_preset_on_the_command_line_exits_2(capsys):
    assert runmod.main(["--check", "-c", "preset='cifar'"]) == 2
    assert "fedmim-cifar10-table3" in capsys.readouterr().err
    assert compare.main(["--algorithms", "fedavg", "-c", "preset='cifar'"]) == 2


def test_missing_data_names_the_preset_and_the_files(tmp_path):
    cfg = _launch_cfg({"preset": "fedspeed-cifar10-100x10", "data-dir": str(tmp_path), "out-dir": str(tmp_path)})
    with pytest.raises(FileNotFoundError) as exc:
        preflight(cfg)
    text = str(exc.value)
    assert "preset='fedspeed-cifar10-100x10'" in text and "dataset='cifar10'" in text
    assert str(tmp_path / "cifar-10-batches-py") in text and "data_batch_1" in text and "test_batch" in text


# --- the printed config -----------------------------------------------------------------------------------------


def test_run_prints_the_resolved_config_with_the_preset_keys(monkeypatch, capsys):
    def stop():
        raise ConfigError("stopped after printing")

    monkeypatch.setattr(launch, "flwr_executable", stop)
    with pytest.raises(ConfigError, match="stopped after printing"):
        launch.run({"preset": "fedmim-cifar10-table3", "lr": 0.05, "weight-decay": 0.0})
    out = capsys.readouterr().out
    assert "preset 'fedmim-cifar10-table3'" in out
    lines = {line.split("=")[0].strip(): line for line in out.splitlines() if " = " in line}
    for key in ("algorithm", "dataset", "model", "colour-perturbation", "fedmim-alphas", "num-server-rounds"):
        assert lines[key].endswith("(preset)"), lines[key]
    assert "'fedmim'" in lines["algorithm"] and "500" in lines["num-server-rounds"]
    assert "(-c, over the preset's 0.1)" in lines["lr"]
    assert "(-c, over the preset's 0.001)" in lines["weight-decay"]
    assert "preset-expanded" not in lines


def test_describe_without_a_preset_lists_only_changed_keys():
    text = preset_rules.describe(resolve({"lr": 0.2}), {}, {"lr": 0.2})
    assert "lr" in text and "(-c)" in text and "algorithm" not in text


# --- the values are the papers' numbers (spot checks; docs/reference/papers.md, the algorithms' pages) -----------


def test_fedspeed_thesis_presets_match_the_thesis():
    c10 = resolve({"preset": "fedspeed-cifar10-100x10"})
    assert (c10["dataset"], c10["model"], c10["num-clients"], c10["participation"]) == (
        "cifar10", "resnet18-gn", 100, 0.1)  # fmt: skip
    assert (c10["local-epochs"], c10["batch-size"], c10["fedspeed-mu"], c10["lr-decay"]) == (5, 50, 0.1, 0.9995)
    assert (c10["fedspeed-rho"], c10["fedspeed-alpha"], c10["lr"], c10["weight-decay"]) == (0.1, 1.0, 0.1, 1e-3)
    assert (c10["clip-norm"], c10["clip-scope"], c10["num-server-rounds"]) == (10.0, "reference", 1500)
    assert c10.targets == [0.8, 0.85] and c10["sampling"] == "bernoulli" and c10["partition-alpha"] == 0.6
    c500 = resolve({"preset": "fedspeed-cifar10-500x2"})
    assert (c500["num-clients"], c500["participation"], c500["local-epochs"], c500["batch-size"]) == (500, 0.02, 2, 20)
    assert (c500["fedspeed-mu"], c500["lr-decay"]) == (0.001, 0.9998) and c500.targets == [0.75, 0.825]
    c100 = resolve({"preset": "fedspeed-cifar100-500x2"})
    assert c100["dataset"] == "cifar100" and c100.targets == [0.4, 0.5] and c100["num-server-rounds"] == 1500
    # docs/algorithms/fedprox.md
    assert _launch_cfg({"preset": "fedspeed-cifar100-500x2", "algorithm": "fedprox"})["prox-mu"] == 0.001


def test_fedcm_presets_match_the_paper():
    one = resolve({"preset": "fedcm-cifar10-100x10"})
    assert (one["algorithm"], one["num-clients"], one["participation"], one["fedcm-alpha"]) == ("fedcm", 100, 0.1, 0.1)
    assert (one["local-epochs"], one["batch-size"], one["lr-decay"], one["num-server-rounds"]) == (5, 50, 0.998, 4000)
    # docs/reference/protocol.md
    assert _launch_cfg({"preset": "fedcm-cifar10-100x10", "algorithm": "feddyn"})["lr-decay"] == 0.9995
    two = resolve({"preset": "fedcm-cifar10-500x2"})
    assert (two["num-clients"], two["participation"], two["fedcm-alpha"]) == (500, 0.02, 0.05)
    c100 = _launch_cfg({"preset": "fedcm-cifar100-500x2"})  # FedCM itself: E = 5 at 500 clients, B = 50
    assert (c100["dataset"], c100["fedcm-alpha"], c100["local-epochs"], c100["batch-size"]) == ("cifar100", 0.05, 5, 50)
    base = _launch_cfg({"preset": "fedcm-cifar100-500x2", "algorithm": "scaffold"})  # baselines: E = 2, B = 20
    assert (base["local-epochs"], base["batch-size"]) == (2, 20)
    dyn = _launch_cfg({"preset": "fedcm-cifar100-500x2", "algorithm": "feddyn"})
    # docs/reference/protocol.md, docs/algorithms/feddyn.md
    assert (dyn["lr-decay"], dyn["feddyn-alpha"]) == (0.999, 0.001)
    assert _launch_cfg({"preset": "fedcm-cifar100-100x10", "algorithm": "fedadam"})["batch-size"] == 50


def test_fedmim_preset_matches_the_paper():
    cfg = resolve({"preset": "fedmim-cifar10-table3"})
    assert cfg["colour-perturbation"] is True and cfg["dataset"] == "cifar10"
    assert (cfg["fedmim-alphas"], cfg["fedmim-betas"]) == ("0.6,0.3", "0.9,0.1")
    assert (cfg["local-epochs"], cfg["batch-size"], cfg["num-server-rounds"]) == (5, 50, 500)
    assert (cfg["lr"], cfg["lr-decay"], cfg["weight-decay"], cfg["participation"]) == (0.1, 0.998, 1e-3, 0.1)


def test_fadamet_presets_match_the_paper():
    cfg = resolve({"preset": "fadamet-cifar10"})
    assert (cfg["algorithm"], cfg["num-clients"], cfg["sampling"], cfg["clients-per-round"]) == (
        "fadamet", 100, "fixed", 10)  # fmt: skip
    assert (cfg["tracking-clients"], cfg["local-steps"], cfg["lr"], cfg["weight-decay"]) == (5, 3, 1e-3, 1e-8)
    assert (cfg["adam-beta1"], cfg["adam-beta2"], cfg["adam-eps"]) == (0.9, 0.99, 1e-8)
    assert (cfg["partition"], cfg["partition-alpha"]) == ("dirichlet", 0.1) and cfg.targets == [0.75]
    assert _launch_cfg({"preset": "fadamet-cifar10", "algorithm": "fedavg"})["lr"] == 0.1  # SGD baselines
    assert resolve({"preset": "fadamet-cifar100"}).targets == [0.5]


def test_losac_preset_matches_table_ii():
    cfg = resolve({"preset": "losac-mnist"})
    assert (cfg["dataset"], cfg["model"], cfg["partition"], cfg["num-clients"]) == ("mnist", "2nn", "shards", 100)
    assert (cfg["sampling"], cfg["clients-per-round"], cfg["local-batches"], cfg["loss-reduction"]) == (
        "fixed", 10, "blocks", "sum")  # fmt: skip
    assert (cfg["lr"], cfg["losac-blocks"], cfg["local-steps"], cfg["num-server-rounds"]) == (1e-4, 5, 6, 500)
    assert cfg.targets == [0.85] and cfg["weight-decay"] == 0.0 and cfg["clip-norm"] == 0.0


def test_flsim_preset_matches_the_flsim_readme():
    cfg = resolve({"preset": "flsim-cifar10-100x10"})
    assert (cfg["num-clients"], cfg["participation"], cfg["local-epochs"], cfg["batch-size"]) == (100, 0.1, 5, 50)
    assert (cfg["num-server-rounds"], cfg["lr-decay"], cfg["algorithm"]) == (1000, 0.998, "fedspeed")
    assert cfg["clip-scope"] == "reference" and cfg["fedcm-alpha"] == 0.1


# --- the presets page ---------------------------------------------------------------------------------------------


def test_the_presets_page_has_the_presets_table_and_an_example():
    text = presets.PAGE.read_text()
    assert presets.generated() in text, "run: python -m simulation.presets --write"
    assert text.startswith("# Presets") and "python -m simulation.run -c \"preset='" in text
