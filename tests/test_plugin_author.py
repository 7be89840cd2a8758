"""What a plug-in author hits, checked: the kit fails a plug-in whose declared client state is never saved, never
changes or is never read back; invariants get the round and its cohort; a rule without `aggregate` is refused when
registered or built, and one that returns None is named; the studies refuse resume-from before any run; the console's
run config line lists a plug-in's keys; the example with client state (examples/local_momentum), installed like any
package, passes its own kit tests; the plug-in page names every module the examples import and every field of what a
plug-in writes or reads."""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedsuite import testing as kit
from fedsuite.config.run_config import Key, resolve
from fedsuite.registry import known as registry
from fedsuite.registry.plugins import AlgorithmRegistry, PluginError
from fedsuite.rules.client_rule import ClientRule
from fedsuite.rules.declared import Vector
from fedsuite.rules.server_rule import RuleSettings, ServerRule
from fedsuite.server.rule_result import RuleResultError
from fedsuite.server.sampling import Sampler
from fedsuite.strategies.fedavg import FedAvg
from tests.example_install import CHILD_TIMEOUT, installed_example

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "local_momentum"
HERE = "tests.test_plugin_author"


# ---- plug-ins with a mistake each --------------------------------------------------------------------------------
class UntouchedClient(ClientRule):
    """Declares a momentum buffer m_i and never touches it."""

    @classmethod
    def state_specs(cls, cfg):
        return (Vector("m_i", "float32"),)


class ForgetfulClient(UntouchedClient):
    """Reads m_i but never saves a new value: every round starts from zeros."""

    def uplink(self, result, rule, ctx):
        self.state.get("m_i")
        return {"delta": result.x - result.x0}


class ConstantClient(UntouchedClient):
    """Reads m_i and saves the same value every round."""

    def uplink(self, result, rule, ctx):
        self.state.set("m_i", self.state.get("m_i") * 0 + 1)
        return {"delta": result.x - result.x0}


class UnreadClient(ForgetfulClient):
    """Saves m_i after every round and never reads it back."""

    def uplink(self, result, rule, ctx):
        self.state.set("m_i", result.x - result.x0)
        return {"delta": result.x - result.x0}


class NoAggregate(ServerRule):
    """A rule that forgot to define aggregate."""


class ForgetsToReturn(FedAvg):
    def aggregate(self, server_round, replies):
        self.x + self.displacement(replies)  # no return


@pytest.fixture
def plugged(monkeypatch):
    """This process's registry replaced by one of its own (the real one stays plain)."""
    own = AlgorithmRegistry([registry.ALGORITHMS[n] for n in registry.ALGORITHMS.built_in], discover=list)
    monkeypatch.setattr(registry, "ALGORITHMS", own)
    return own


def plug_in(own: AlgorithmRegistry, name: str, client: str = "fedsuite.clients.fedavg:FedAvgClient",
            strategy: str = "fedsuite.strategies.fedavg:FedAvg", keys: tuple = ()) -> None:  # fmt: skip
    own.register(registry.Algorithm(name, strategy, client, "", "", keys=keys))


# ---- 1. the kit checks declared client state ----------------------------------------------------------------------
def test_a_plugin_that_never_saves_its_declared_state_fails_the_kit(plugged):
    plug_in(plugged, "forgetful", f"{HERE}:ForgetfulClient")
    assert kit.check_communication("forgetful") == (1, 1, 0)  # the older checks pass it
    with pytest.raises(AssertionError, match=r"^forgetful: declared client state 'm_i' stays zero") as err:
        kit.check_client_state("forgetful")
    assert "\n" not in str(err.value) and "self.state.set('m_i', …) after the local loop" in str(err.value)
    plug_in(plugged, "untouched", f"{HERE}:UntouchedClient")
    with pytest.raises(AssertionError, match=r"^untouched: declared client state 'm_i' stays absent"):
        kit.check_client_state("untouched")


def test_a_state_saved_unchanged_or_never_read_back_fails_the_kit(plugged):
    plug_in(plugged, "constant", f"{HERE}:ConstantClient")
    plug_in(plugged, "unread", f"{HERE}:UnreadClient")
    with pytest.raises(AssertionError, match=r"^constant: declared client state 'm_i' never changes"):
        kit.check_client_state("constant")
    with pytest.raises(AssertionError, match=r"^unread: declared client state 'm_i' is saved but never read back"):
        kit.check_client_state("unread")


# ---- 2. invariants get the round and the cohort -------------------------------------------------------------------
def test_invariants_get_the_round_and_its_cohort_where_they_take_them():
    seen, plain, loose = [], [], []

    def with_round_and_cohort(strategy, server_round, cohort):
        seen.append((server_round, tuple(cohort)))

    def strategy_only(strategy):
        plain.append(strategy.rule.x.copy())

    def any_keywords(strategy, **context):
        loose.append(sorted(context))

    cfg = resolve(kit.PARTIAL)
    kit.run_algorithm("fedavg", kit.PARTIAL, invariants=[with_round_and_cohort, strategy_only, any_keywords])
    sampler = Sampler.from_settings(cfg.sampling)
    rounds = range(1, kit.PARTIAL["num-server-rounds"] + 1)
    assert seen == [(r, tuple(sampler.cohort(r))) for r in rounds]
    assert all(len(c) == kit.PARTIAL["clients-per-round"] for _, c in seen)
    assert len(plain) == len(rounds) and loose == [["cohort", "server_round"]] * len(rounds)


# ---- 3. the aggregate contract ------------------------------------------------------------------------------------
def test_a_rule_without_aggregate_is_refused_when_registered_and_when_built(plugged):
    with pytest.raises(PluginError, match=rf"'noagg' refused: strategy='{HERE}:NoAggregate' does not define "
                                          r"aggregate\(server_round, replies\)"):  # fmt: skip
        plug_in(plugged, "noagg", strategy=f"{HERE}:NoAggregate")
    settings = RuleSettings(np.zeros(4), Sampler(4, "fixed", 1), lr=0.1)
    with pytest.raises(TypeError, match=rf"server rule {HERE}:NoAggregate does not define aggregate"):
        NoAggregate(settings)  # an entry point's rule, built before its first round


def test_an_aggregate_that_returns_none_is_named_in_one_line(plugged):
    plug_in(plugged, "forgets", strategy=f"{HERE}:ForgetsToReturn")
    with pytest.raises(RuleResultError) as err:
        kit.run_algorithm("forgets", {"num-server-rounds": 2})
    message = str(err.value)
    assert message.startswith("round 1: algorithm 'forgets' (server rule tests.test_plugin_author:ForgetsToReturn)")
    assert "aggregate returned None: return the new model" in message and "\n" not in message
    assert "diverged" not in message


# ---- 5. studies start fresh runs ----------------------------------------------------------------------------------
@pytest.mark.parametrize("study", ["compare", "sweep", "tune"])
def test_a_study_refuses_resume_from_before_any_run(study, tmp_path, capsys):
    module = __import__(f"simulation.{study}", fromlist=["main"])
    out = tmp_path / "out"
    code = module.main(["--algorithms", "fedavg", "--engine", "inprocess", "--out", str(out), "-c",
                        f"dataset='synthetic-lsq' num-server-rounds=2 resume-from='{tmp_path / 'run'}'"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and not out.exists()
    assert err.startswith(f"error: resume-from: python -m simulation.{study} starts fresh runs") and "\n" not in err
    assert "python -m simulation.run -c \"resume-from='<its results folder>'\"" in err
    assert "rerun this command" in err


def test_a_sweep_grid_of_resume_from_is_refused_too(tmp_path, capsys):
    from simulation import sweep

    code = sweep.main(["--algorithms", "fedavg", "--seeds", "0", "--engine", "inprocess", "--out", str(tmp_path / "o"),
                       "--grid", f"resume-from='{tmp_path}'", "-c", "dataset='synthetic-lsq'"])  # fmt: skip
    assert code == 2 and "resume-from: python -m simulation.sweep starts fresh runs" in capsys.readouterr().err


# ---- 6. the run config line ---------------------------------------------------------------------------------------
def test_the_run_config_line_lists_plugin_keys_like_built_in_ones(plugged):
    from fedsuite.config.presets import describe

    plug_in(plugged, "keyed", keys=(Key("keyed-mu", 0.9, "a plug-in's knob", low=0.0, high=1.0),))
    given = {"algorithm": "keyed", "keyed-mu": 0.5, "lr": 0.1}
    lines = describe(resolve(given), {}, given).splitlines()
    assert "  keyed-mu  = 0.5            (-c)" in lines and "  lr        = 0.1            (-c)" in lines
    default = {"algorithm": "keyed"}
    assert not any("keyed-mu" in line for line in describe(resolve(default), {}, default).splitlines())


# ---- 4. the example with client state, installed like any package -------------------------------------------------
@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Environment of child processes that see the example installed (its entry point and its package)."""
    yield from installed_example(EXAMPLE, tmp_path_factory.mktemp("local-momentum"))


def test_the_local_momentum_example_passes_its_kit_tests(installed):
    env, source = installed
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], env=env,
                          cwd=source, capture_output=True, text=True, timeout=CHILD_TIMEOUT)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "6 passed" in done.stdout


def test_the_momentum_step_keeps_its_buffer_apart_from_the_move():
    sys.path.insert(0, str(EXAMPLE))
    try:
        from local_momentum_plugin.client import MomentumStep
    finally:
        sys.path.remove(str(EXAMPLE))
    import torch

    step = MomentumStep(torch.ones(3), 0.5)
    d = torch.full((3,), 2.0)
    u = step(d, None)
    u.mul_(10)  # a later stage edits the move …
    np.testing.assert_array_equal(step.m.numpy(), np.full(3, 2.5, np.float32))  # … never the buffer


# ---- 7. the plug-in page documents what a plug-in touches ---------------------------------------------------------
PAGE = ROOT / "docs" / "own" / "algorithm.md"


def fedsuite_imports(folder: Path) -> set[str]:
    """The fedsuite modules the Python files under `folder` import."""
    found = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names if node.module == "fedsuite"]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found |= {n for n in names if n.split(".")[0] == "fedsuite"}
    return found


def import_table_modules() -> list[str]:
    """The modules of the page's table of what a plug-in imports (`fedsuite.strategies.<module>` as a pattern)."""
    text = PAGE.read_text()
    table = text[text.index("A plug-in imports fedsuite only as") :].split("\n\n")[1]
    return [m for row in table.splitlines()[2:] for m in re.findall(r"`(fedsuite\.[\w.<>]+)`", row.split("|")[1])]


def test_every_module_the_plugin_examples_import_is_in_the_pages_import_table():
    listed = [re.compile(re.escape(m).replace(re.escape("<module>"), r"\w+") + "$") for m in import_table_modules()]
    used = set().union(*(fedsuite_imports(ROOT / "examples" / e) for e in ("fedavgm", "local_momentum")))
    assert {"fedsuite.testing", "fedsuite.rules.server_rule", "fedsuite.strategies.fedavgm"} <= used
    missing = sorted(m for m in used if m != "fedsuite" and not any(p.match(m) for p in listed))
    assert not missing, f"docs/own/algorithm.md's import table does not list {missing}"


def test_the_plugin_page_names_every_field_a_plugin_writes_or_reads():
    from fedsuite.local.loop import LocalResult, StepContext
    from fedsuite.registry.entry import Algorithm

    page = PAGE.read_text()
    named = {
        Algorithm: [f.name for f in dataclasses.fields(Algorithm)],
        Key: ["resumable", "app", "client", "tunable"],  # the tags; the others are Key(...)'s signature on the page
        StepContext: [f.name for f in dataclasses.fields(StepContext)],
        LocalResult: [f.name for f in dataclasses.fields(LocalResult)],
        kit.KitRun: [f.name for f in dataclasses.fields(kit.KitRun)],
        kit.RoundObservation: [f.name for f in dataclasses.fields(kit.RoundObservation)],
        kit.Minibatch: [f.name for f in dataclasses.fields(kit.Minibatch)],
    }
    missing = [f"{cls.__name__}.{name}" for cls, names in named.items() for name in names
               if not re.search(rf"`{name}\b", page)]  # fmt: skip
    missing += [name for name in kit.__all__ if f"`{name}" not in page]
    assert not missing, f"docs/own/algorithm.md does not name {missing}"
