"""The typed settings groups of the system models, pruning, secure aggregation, privacy and batching
(fedsuite/config/settings.py): each reads its values from a resolved config and its defaults from the schema, the
objects a config without the keys builds decide nothing, no module reads a run-config key with a default written again
(`.get("<key>", <default>)`), and one parser reads 'module:callable' (fedsuite/config/import_paths.py)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from fedsuite.config import schema
from fedsuite.config.import_paths import ImportPathError, is_import_path, load_import_path, parse_import_path
from fedsuite.config.run_config import Batching, resolve
from fedsuite.config.settings import schema_default, value_of
from fedsuite.privacy.secagg import SecAggSettings
from fedsuite.privacy.settings import ClientPrivacy, SampleLevelPrivacy
from fedsuite.registry import known as registry
from fedsuite.server.pruning import PruneSettings, Pruning
from fedsuite.systems import SystemModel
from fedsuite.systems.availability import Availability
from fedsuite.systems.deadline import Deadline
from fedsuite.systems.dropout import Dropouts
from fedsuite.systems.work import LocalWork

PACKAGE = Path(__file__).resolve().parent.parent / "fedsuite"

# group → (how a Config holds it, a run config that sets every one of its keys away from the default)
GROUPS = {
    LocalWork: (lambda cfg: cfg.systems.work,
                {"local-work": "uniform", "local-steps-min": 2, "local-steps": 6, "seed": 3}),
    Dropouts: (lambda cfg: cfg.systems.dropouts, {"dropout-rate": 0.25, "seed": 3}),
    Deadline: (lambda cfg: cfg.systems.deadline,
               {"round-deadline": 40, "deadline-policy": "drop", "client-speed": "uniform", "speed-spread": 2.0,
                "local-steps": 5, "seed": 3}),
    Availability: (lambda cfg: cfg.systems.availability,
                   {"availability": "markov", "num-clients": 20, "clients-per-round": 2, "availability-p-off": 0.1,
                    "availability-p-on": 0.7, "availability-period": 4, "availability-fraction": 0.75, "seed": 3}),
    SecAggSettings: (lambda cfg: cfg.secagg,
                     {"secagg": True, "client-mapping": "fixed", "clients-per-round": 7, "secagg-shares": 5,
                      "secagg-threshold": 3, "secagg-clip-range": 4.0, "secagg-quantization": 1024}),
    PruneSettings: (lambda cfg: cfg.pruning,
                    {"prune-at": "9:0.2,3:0.1", "prune-score": "val_loss", "validation-fraction": 0.1}),
    Batching: (lambda cfg: cfg.batching, {"batch-clients": True, "batch-messages": 3, "cuda-graphs": False,
                                             "batch-chunk": 5}),
    ClientPrivacy: (lambda cfg: cfg.privacy,
                    {"dp": "server", "dp-noise": 2.0, "dp-clip": 0.5, "dp-clip-mode": "adaptive",
                     "dp-clip-quantile": 0.4, "dp-clip-lr": 0.1, "dp-count-noise": 3.0, "dp-delta": 1e-6,
                     "dp-noise-source": "seeded", "local-steps": 2}),
    SampleLevelPrivacy: (lambda cfg: cfg.sample_privacy,
                         {"dp-sgd": True, "dp-sgd-noise": 1.5, "dp-sgd-clip": 0.5, "local-steps": 2}),
}  # fmt: skip

# group → (one of its keys, a schema default other than today's that a run config resolves with, run config)
CHANGED_DEFAULT = {
    LocalWork: ("local-steps", 3, {}),
    Dropouts: ("dropout-rate", 0.25, {}),
    Deadline: ("round-deadline", 5, {"local-steps": 5}),
    Availability: ("availability", "cycle", {}),
    SecAggSettings: ("secagg-clip-range", 4.0, {}),
    PruneSettings: ("prune-score", "val_loss", {}),
    Batching: ("batch-messages", 2, {}),
    ClientPrivacy: ("dp-noise", 2.0, {}),
    SampleLevelPrivacy: ("dp-sgd-clip", 0.5, {}),
}


def _field(cls, key: str) -> str:
    return next(name for name, held in cls.keys().items() if held == key)


@pytest.mark.parametrize("cls", GROUPS, ids=lambda cls: cls.__name__)
def test_a_group_holds_the_resolved_values_of_its_keys(cls):
    held_by, run_config = GROUPS[cls]
    cfg = resolve(run_config)
    group = held_by(cfg)
    assert type(group) is cls and dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    assert group == cls.from_values(cfg) == cls.from_values(dict(cfg))
    assert held_by(cfg) is group  # built once per Config
    for name, key in cls.keys().items():
        value = getattr(group, name)
        if key == "prune-at":
            assert value == ((3, 0.1), (9, 0.2))
        else:
            assert value == cfg[key] and type(value) is type(cfg[key]), (name, key)
        if key in run_config and key != "seed":
            assert value != schema_default(key), f"{key} is left at its default: the test sets nothing"
    assert cls.__doc__ and all(f"{name} ({key})" in cls.__doc__ for name, key in cls.keys().items())


@pytest.mark.parametrize("cls", GROUPS, ids=lambda cls: cls.__name__)
def test_a_group_reads_its_defaults_from_the_schema(cls, monkeypatch):
    key, new, run_config = CHANGED_DEFAULT[cls]
    held_by = GROUPS[cls][0]
    before = cls()
    changed = dataclasses.replace(registry.BUILT_IN_SCHEMA[key], default=new)
    assert changed.default != registry.BUILT_IN_SCHEMA[key].default
    for module, name in ((registry, "BUILT_IN_SCHEMA"), (schema, "COMMON_SCHEMA")):  # resolve's, the groups'
        monkeypatch.setattr(module, name, {**getattr(module, name), key: changed})
    field = _field(cls, key)
    assert getattr(held_by(resolve(run_config)), field) == new  # resolved: the value came from the schema
    assert getattr(cls.from_values(run_config), field) == new  # the key left out: its schema default
    assert getattr(cls(), field) == new and cls() != before  # a field not given: its schema default


def test_every_field_default_is_the_schema_default():
    for cls in GROUPS:
        built = cls()
        for name, key in cls.keys().items():
            expected = schema.COMMON_SCHEMA[key].default
            assert getattr(built, name) == (() if key == "prune-at" else expected), (cls.__name__, name)


def test_a_config_without_the_keys_decides_nothing():
    """A plan built by hand (no run-config keys) gives the objects that decide nothing, as before the groups."""
    model = SystemModel.from_run_config({})
    assert not model.on and model == SystemModel() and model.fit_config(1, 0) == {} and model.absent(1, [0, 1]) == {}
    assert Availability.from_values({}) is None and Availability.from_values({"availability": "always"}) is None
    assert (LocalWork.from_values({}).on, Dropouts.from_values({}).on, Deadline.from_values({}).on) == (False,) * 3
    assert not SecAggSettings.from_values({}).on and SecAggSettings.from_values({}) == SecAggSettings()
    pruning = Pruning.from_run_config({})
    assert pruning.marks == {} and pruning.score == "val_accuracy" and pruning.check(5, {"val_accuracy": 0.0}) is None
    assert not ClientPrivacy.from_values({}).on and not SampleLevelPrivacy.from_values({}).enabled
    assert resolve().systems == SystemModel() and not resolve().systems.on


def test_a_partial_config_keeps_what_it_gives():
    model = SystemModel.from_run_config({"local-work": "uniform", "local-steps-min": 2, "local-steps": 4})
    assert model.work == LocalWork("uniform", 2, 4, 0) and model.fit_config(1, 0)["local-steps"] in (2, 3, 4)
    assert Pruning.from_run_config({"prune-at": "4:0.5"}).marks == {4: 0.5}
    assert value_of({}, "secagg-quantization") == 2**22 and value_of({"secagg": True}, "secagg") is True


# ---- no default written outside the schema -----------------------------------------------------------------------
# Receivers whose keys are not run-config keys although some share a name: a reply's metrics, a node's config, the
# environment, a message's properties.
NOT_RUN_CONFIG = ("metrics", "node_config", "environ", "properties")


def raw_reads(path: Path, keys: set[str], root: Path = PACKAGE.parent) -> list[str]:
    """`x.get("<run-config key>", <default>)` calls in `path`, as 'file:line: source' (file relative to `root`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"):
            continue
        if not node.args or not isinstance(node.args[0], ast.Constant) or node.args[0].value not in keys:
            continue
        if len(node.args) + len(node.keywords) < 2:  # .get(key): absent is None, no default written
            continue
        receiver = ast.unparse(node.func.value)
        if receiver.rsplit(".", 1)[-1].rstrip("()") in NOT_RUN_CONFIG:
            continue
        found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_run_config_key_is_read_with_a_default_outside_the_schema():
    keys = set(registry.BUILT_IN_SCHEMA)
    found = [line for path in sorted(PACKAGE.rglob("*.py")) for line in raw_reads(path, keys)]
    assert not found, ("a run-config key read with a default written again; read its settings group (or "
                       "fedsuite.config.settings.value_of) instead:\n  " + "\n  ".join(found))  # fmt: skip


SAMPLE = """
def f(v, metrics, node_config):
    return (v.get("dropout-rate", 0.0), metrics.get("loss", 0.0), v.get("seed"),
            node_config.get("seed", 0), v.get("loss-reduction", default="mean"))
"""


def test_the_scan_finds_a_raw_read(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(SAMPLE)
    assert raw_reads(sample, set(registry.BUILT_IN_SCHEMA), tmp_path) == [
        "sample.py:3: v.get('dropout-rate', 0.0)",
        "sample.py:4: v.get('loss-reduction', default='mean')",
    ]


# ---- one parser for 'module:callable' ------------------------------------------------------------------------------
# The modules that split a string at ':' or import a module by name for something other than an import path.
OTHER_COLONS = {
    "fedsuite/config/import_paths.py": "the parser itself",
    "fedsuite/server/pruning.py": "prune-at's 'round:value' marks",
    "fedsuite/state/tier.py": "a client-state key's 'prev:' prefix",
    "fedsuite/results/tracking.py": "imports a tracker's package by module name",
    "fedsuite/moved.py": "imports a moved module by its new name",
}


def test_one_parser_reads_module_callable():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE.parent))
        if where in OTHER_COLONS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), where)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            splits = node.func.attr in ("partition", "rpartition", "split", "rsplit") and any(
                isinstance(a, ast.Constant) and a.value == ":" for a in node.args
            )
            if splits or node.func.attr == "import_module":
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "parse 'module:callable' with fedsuite.config.import_paths:\n  " + "\n  ".join(found)


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("pkg.mod:make", ("pkg.mod", "make")),
        ("pkg.mod:Class.build", ("pkg.mod", "Class.build")),
        ("pkg.mod", None),
        (":make", None),
        ("pkg.mod:", None),
        ("pkg.mod:a:b", None),
        ("pkg.mod: make", None),
        (3, None),
    ],
)
def test_the_parser(text, parsed):
    assert parse_import_path(text) == (None if parsed is None else tuple(parsed))
    assert is_import_path(text) is (parsed is not None)


def test_the_loader_names_the_key_in_one_line():
    assert load_import_path("model", "fedsuite.config.import_paths:ImportPath.name") is not None
    with pytest.raises(ImportPathError) as err:
        load_import_path("dataset", "nowhere.at_all:load")
    assert str(err.value) == ("dataset='nowhere.at_all:load': cannot import it (ModuleNotFoundError: No module named "
                              "'nowhere')")  # fmt: skip
    with pytest.raises(ImportPathError, match=r"^strategy='fedavg': expected 'module:Class'$"):
        load_import_path("strategy", "fedavg", shape="'module:Class'")


def test_a_second_colon_is_refused_before_training():
    """A value with a second colon is no import path: refused by resolve, as the allow-list and the loader read it."""
    with pytest.raises(Exception, match="model='fedsuite.models.networks:a:b'"):
        resolve({"model": "fedsuite.models.networks:a:b"})


# ---- the local loop takes one settings object ----------------------------------------------------------------------
def _linear_clients(clients: int = 2):
    import torch
    from torch import nn

    from fedsuite.local.loop import LocalData
    from fedsuite.models.networks import FlatModel

    generator = torch.Generator().manual_seed(0)
    datas = [LocalData(torch.randn(9, 3, generator=generator), torch.randn(9, generator=generator))
             for _ in range(clients)]  # fmt: skip
    return FlatModel(nn.Linear(3, 1, bias=False)), datas


def _loss(out, y):
    import torch

    return torch.nn.functional.mse_loss(out.squeeze(-1), y)


def test_the_round_settings_come_from_the_runs_local_loop_keys():
    from fedsuite.local.loop import LocalSettings

    cfg = resolve({"local-epochs": 3, "batch-size": 4, "weight-decay": 0.01, "clip-norm": 2.0,
                   "loss-reduction": "sum"})  # fmt: skip
    assert LocalSettings.of_round(cfg.local, 0.05, 7) == LocalSettings(
        lr=0.05, steps=7, epochs=3, batch_size=4, weight_decay=0.01, clip_norm=2.0, loss_reduction="sum"
    )
    assert LocalSettings(0.1, 2, 1, 4, 0.0, 0.0).loss_reduction == schema.COMMON_SCHEMA["loss-reduction"].default


@pytest.mark.parametrize("steps, reduction", [(3, "mean"), (0, "sum")])
def test_train_local_with_settings_is_the_keyword_form_bit_for_bit(steps, reduction):
    import torch

    from fedsuite.local.loop import LocalSettings, Prox, UpdateRule, train_local

    model, (data, _) = _linear_clients()
    x0 = torch.full((3,), 0.2)
    keywords = dict(lr=0.05, weight_decay=0.01, clip_norm=0.5, epochs=2, steps=steps, batch_size=4)

    def run(**given):
        rule = UpdateRule(unclipped=(Prox(0.1),))
        result = train_local(model, x0, data, _loss, rule, generator=torch.Generator().manual_seed(3), **given)
        return result.x.clone(), result.steps, result.mean_loss, result.first_loss

    by_keywords = run(**keywords, loss_reduction=reduction)
    by_settings = run(settings=LocalSettings(**keywords, loss_reduction=reduction))
    assert torch.equal(by_keywords[0], by_settings[0]) and by_keywords[1:] == by_settings[1:]
    assert not torch.equal(by_settings[0], x0)
    with pytest.raises(TypeError, match="not both"):
        run(settings=LocalSettings(**keywords), lr=0.05)


def test_train_stacked_with_settings_is_the_keyword_form_bit_for_bit():
    import torch

    from fedsuite.batched.loop import train_stacked
    from fedsuite.local.loop import LocalSettings, UpdateRule

    model, datas = _linear_clients()
    x0s = [torch.full((3,), 0.1), torch.full((3,), -0.3)]
    keywords = dict(lr=0.05, weight_decay=0.01, clip_norm=0.5, epochs=1, steps=3, batch_size=4)

    def run(**given):
        generators = [torch.Generator().manual_seed(c) for c in range(2)]
        results = train_stacked(model, x0s, datas, _loss, [UpdateRule(), UpdateRule()], generators=generators,
                                **given)  # fmt: skip
        return [(r.x.clone(), r.steps, r.mean_loss) for r in results]

    by_keywords, by_settings = run(**keywords), run(settings=LocalSettings(**keywords))
    for (x_k, *rest_k), (x_s, *rest_s) in zip(by_keywords, by_settings, strict=True):
        assert torch.equal(x_k, x_s) and rest_k == rest_s
