"""Plug-in algorithms (fedsuite.registry.plugins): the out-of-tree example examples/fedavgm (fedavgm-nesterov, which
extends the built-in FedAvgM), installed like any package, passes its own kit tests and runs through simulation.compare
like a built-in; a bad value of its key is named with the allowed range; an entry point that fails to import is named in
one warning; a name or key clash is refused.

The example is installed from a temporary copy into a temporary folder (`pip install --target`), put on the path of
the child processes only: this venv and this process's registry stay plain for every other test."""

from __future__ import annotations

import csv
import json
import logging
import re
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from fedsuite.config.run_config import ConfigError, Key, active_schema, resolve
from fedsuite.registry import costs
from fedsuite.registry import known as registry
from fedsuite.registry.plugins import GROUP, AlgorithmRegistry, PluginError
from tests.example_install import CHILD_TIMEOUT, installed_example

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "fedavgm"
# FedAvg's halves, as the built-in entries name them (fedsuite/registry/builtin.py)
FEDAVG, FEDAVG_CLIENT = "fedsuite.strategies.fedavg:FedAvg", "fedsuite.clients.fedavg:FedAvgClient"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Environment of child processes that see the example installed (its entry point and its package)."""
    yield from installed_example(EXAMPLE, tmp_path_factory.mktemp("fedavgm"))


def child(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT)  # fmt: skip


def test_the_installed_example_passes_its_kit_tests(installed):
    env, source = installed
    done = child(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], env, source)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "5 passed" in done.stdout


def test_compare_runs_the_plugin_against_built_ins_like_a_built_in(installed, tmp_path):
    env, _ = installed
    settings = ("dataset='synthetic-lsq' num-clients=5 clients-per-round=5 synthetic-dim=4 synthetic-samples=20 "
                "batch-size=0 local-steps=5 lr=0.05 num-server-rounds=4 seed=3 fedavgm-beta=0.5 "
                "fedavgm-nesterov-beta=0.5")  # fmt: skip
    names = ("fedavg", "fedavgm", "fedavgm-nesterov")
    args = ["-m", "simulation.compare", "--algorithms", ",".join(names), "--engine", "inprocess", "-c", settings]
    done = child([*args, "--out", str(tmp_path)], env, ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    rows = {r["algorithm"]: r for r in csv.DictReader((tmp_path / "comparison.csv").open())}
    assert set(rows) == set(names) and {r["status"] for r in rows.values()} == {"completed"}
    runs = {a: json.loads((tmp_path / "runs" / a / "config.json").read_text())["run_config"] for a in rows}
    assert runs["fedavgm-nesterov"]["fedavgm-nesterov-beta"] == 0.5
    assert runs["fedavgm-nesterov"]["seed"] == runs["fedavg"]["seed"] == 3
    first = {a: json.loads((tmp_path / "runs" / a / "rounds.jsonl").read_text().splitlines()[1]) for a in rows}
    assert first["fedavgm"]["relative_error"] == first["fedavg"]["relative_error"]  # round 1: v = mean Δ, as FedAvg
    assert first["fedavgm-nesterov"]["relative_error"] != first["fedavgm"]["relative_error"]  # (1 + β) mean Δ
    assert len({rows[a]["final_rel_err"] for a in names}) == 3  # then the momentum acts
    assert "fedavgm-nesterov" in (tmp_path / "comparison.md").read_text()


def test_a_bad_value_of_a_plugin_key_is_named_with_its_allowed_range(installed):
    env, _ = installed
    done = child(["-m", "simulation.compare", "--algorithms", "fedavgm-nesterov", "--engine", "inprocess", "-c",
                  "dataset='synthetic-lsq' fedavgm-nesterov-beta=1.0"], env, ROOT)  # fmt: skip
    assert done.returncode == 2
    assert "fedavgm-nesterov-beta=1.0: must be in [0, 1)" in done.stderr


# ---- the registry's rules, on a registry of its own (this process's stays plain) ---------------------------------
def built_ins() -> list[registry.Algorithm]:
    return [registry.ALGORITHMS[name] for name in registry.ALGORITHMS.built_in]


def entry_point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name, value, GROUP)


def clashing_fedavg() -> registry.Algorithm:
    return registry.Algorithm("fedavg", FEDAVG, FEDAVG_CLIENT, "", "")


@pytest.fixture
def with_example(monkeypatch):
    """This process's registry with the example's entry point and one that fails to import; restored afterwards."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    found = [
        entry_point("broken", "no_such_fedsuite_plugin:algorithm"),
        entry_point("fedavgm-nesterov", "fedavgm_plugin:algorithm"),
    ]
    calls = []
    plugged = AlgorithmRegistry(built_ins(), discover=lambda: calls.append(1) or found)
    assert not calls  # lazily: nothing is imported before the registry is read
    monkeypatch.setattr(registry, "ALGORITHMS", plugged)
    yield plugged
    assert len(calls) == 1  # once


def test_a_failing_entry_point_is_named_in_one_warning_and_the_rest_works(with_example, caplog):
    with caplog.at_level(logging.WARNING, logger="fedsuite.registry.plugins"):
        names = list(with_example)
        list(with_example)  # loaded once
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "entry point broken = no_such_fedsuite_plugin:algorithm" in warnings[0]
    assert "ModuleNotFoundError" in warnings[0]
    assert set(with_example.built_in) < set(names) and "fedavgm-nesterov" in names and "broken" not in names
    cfg = resolve({"algorithm": "fedavgm-nesterov"})
    assert cfg["fedavgm-nesterov-beta"] == 0.9 and active_schema()["fedavgm-nesterov-beta"].default == 0.9
    assert costs.communication("fedavgm-nesterov", cfg) == (1, 1, 0)
    assert costs.client_state_vectors("fedavgm-nesterov", cfg) == 0
    preset = resolve({"algorithm": "fedavgm-nesterov", "preset": "fedcm-cifar10-100x10", "fedavgm-nesterov-beta": 0.5})
    assert (preset["dataset"], preset["fedavgm-nesterov-beta"]) == ("cifar10", 0.5)  # a preset's common keys apply
    with pytest.raises(ConfigError, match=r"fedavgm-nesterov-beta=-0\.1: must be in \[0, 1\)"):
        resolve({"algorithm": "fedavgm-nesterov", "fedavgm-nesterov-beta": -0.1})
    with pytest.raises(ConfigError, match=r"algorithm='fedavgn': allowed values are .*fedavgm-nesterov"):
        resolve({"algorithm": "fedavgn"})


def test_a_clash_with_a_built_in_name_or_key_is_refused_in_one_line(caplog):
    clash = [entry_point("clash", "tests.test_plugins:clashing_fedavg")]
    plugged = AlgorithmRegistry(built_ins(), discover=lambda: clash)
    with caplog.at_level(logging.WARNING, logger="fedsuite.registry.plugins"):
        assert plugged["fedavg"] == registry.ALGORITHMS["fedavg"]  # the built-in stays
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "'fedavg' is a built-in algorithm" in warning and "\n" not in warning
    with pytest.raises(PluginError, match="'fedavg' is a built-in algorithm"):
        plugged.register(clashing_fedavg())
    other_lr = Key("server-lr", 0.5, "a server lr of its own", low=0.0)
    rival = registry.Algorithm("rival", FEDAVG, FEDAVG_CLIENT, "", "",
                               {"server_lr": "server-lr"}, keys=(other_lr,))  # fmt: skip
    with pytest.raises(PluginError, match="key 'server-lr' is declared differently by a built-in key"):
        plugged.register(rival)
    unknown = registry.Algorithm("loose", FEDAVG, FEDAVG_CLIENT, "", "",
                                 {"server_lr": "loose-lr"})  # fmt: skip
    with pytest.raises(PluginError, match="reads run-config key 'loose-lr', which no one declares"):
        plugged.register(unknown)
    assert set(plugged) == set(plugged.built_in)


@pytest.mark.parametrize("strategy,client", [("strategies.fedavg:FedAvg", FEDAVG_CLIENT),
                                             (FEDAVG, "clients.fedavg:FedAvgClient")])  # fmt: skip
def test_a_built_in_half_named_by_its_folder_is_refused_with_its_package_spelling(strategy, client):
    """The checkout's folders import from the repository root only, and then as second classes: the one line says
    how to write it (fedsuite.strategies.… / fedsuite.clients.…)."""
    plugged = AlgorithmRegistry(built_ins(), discover=list)
    old = registry.Algorithm("old-spelling", strategy, client, "", "")
    path = strategy if strategy != FEDAVG else client
    with pytest.raises(PluginError, match=re.escape(f"names a built-in half by its folder; write 'fedsuite.{path}'")):
        plugged.register(old)


def test_readme_tables_list_the_shipped_algorithms_only(monkeypatch):
    from simulation import algorithms

    before = algorithms.algorithm_table()
    plugged = AlgorithmRegistry(built_ins(), discover=lambda: [])
    plugged.register(registry.Algorithm("mine", FEDAVG, FEDAVG_CLIENT, "", ""))
    monkeypatch.setattr(algorithms, "ALGORITHMS", plugged)
    assert "mine" in plugged and algorithms.algorithm_table() == before
    assert plugged.built_in == tuple(registry.ALGORITHMS.built_in) == tuple(name for name in before_names(before))


def before_names(table: str) -> list[str]:
    return [row.split("`")[1] for row in table.splitlines()[2:]]


# ---- a plug-in's keys through Flower (flwr run accepts only pyproject.toml's keys) --------------------------------
def test_the_plugin_config_key_carries_plugin_keys_and_resolves_to_them(with_example):
    from fedsuite.config.run_config import resolve

    packed = resolve({"algorithm": "fedavgm-nesterov", "plugin-config": "fedavgm-nesterov-beta=0.5"})
    direct = resolve({"algorithm": "fedavgm-nesterov", "fedavgm-nesterov-beta": 0.5})
    assert dict(packed) == dict(direct) and packed["plugin-config"] == ""  # resolves again to itself
    assert "fedavgm-nesterov-beta" in packed.explicit
    for bad, said in (("lr=0.1", "'lr' is a built-in key"), ("fedavgm-nesterov-beta=abc", "the value is not TOML"),
                      ("fedavgm-nesterov-beta", "is not key=value")):  # fmt: skip
        with pytest.raises(ConfigError, match=said):
            resolve({"algorithm": "fedavgm-nesterov", "plugin-config": bad})
    with pytest.raises(ConfigError, match="also given directly"):
        resolve({"algorithm": "fedavgm-nesterov", "fedavgm-nesterov-beta": 0.2,
                 "plugin-config": "fedavgm-nesterov-beta=0.5"})  # fmt: skip


def test_simulation_run_packs_keys_outside_pyprojects_table():
    from simulation.launcher.overrides import flower_overrides

    assert flower_overrides({"lr": 0.1}) == {"lr": 0.1}
    packed = flower_overrides({"algorithm": "fedavgm-nesterov", "fedavgm-nesterov-beta": 0.5,
                               "plugin-config": "other-key='x'"})  # fmt: skip
    assert packed == {"algorithm": "fedavgm-nesterov", "plugin-config": 'other-key="x" fedavgm-nesterov-beta=0.5'}


def test_a_plugin_run_resumed_through_flwr_run_keeps_its_keys(installed, tmp_path):
    """Before, Flower refused a plug-in's key ('Invalid run configuration') after its start, and every resume of a
    plug-in run failed (it sent the checkpoint's plug-in keys again). The run starts in process (2 rounds,
    checkpointed); its resume goes through simulation.run and `flwr run` with the checkpoint's
    fedavgm-nesterov-beta, packed into plugin-config like any -c key outside pyproject's table (one Ray launch)."""
    env, _ = installed
    env = {**env, "FLWR_HOME": str(tmp_path / "flwr-home")}
    settings = (
        "dataset='synthetic-lsq' num-clients=4 clients-per-round=2 num-server-rounds=2 "
        "fedavgm-nesterov-beta=0.5 checkpoint-every=1"
    )  # the sweep sets algorithm from --algorithms
    done = child(["-m", "simulation.sweep", "--algorithms", "fedavgm-nesterov", "--seeds", "0", "--engine", "inprocess",
                  "--out", str(tmp_path / "s"), "-c", settings], env, ROOT)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    (first,) = (tmp_path / "s" / "runs").rglob("summary.json")
    folder = first.parent
    done = child(["-m", "simulation.run", "-c", f"resume-from='{folder}' num-server-rounds=3"], env, ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert json.loads((folder / "summary.json").read_text())["rounds_completed"] == 3
    assert json.loads((folder / "config.json").read_text())["run_config"]["fedavgm-nesterov-beta"] == 0.5
    assert "plugin-config=" in done.stdout  # the launched `flwr run` command: the key went through Flower packed
