"""fedsuite/config/run_config.py: the run-config schema, its agreement with pyproject.toml and the registry, and its
errors."""

import tomllib
from pathlib import Path

import pytest

from fedsuite.config import run_config as C
from fedsuite.config.run_config import SCHEMA, Config, ConfigError, resolve

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _error(run_config) -> str:
    with pytest.raises(ConfigError) as exc:
        resolve(run_config)
    return str(exc.value)


# --- defaults and agreement with pyproject.toml / the registry ----------------------------------------------


def test_resolve_without_arguments_gives_the_defaults():
    for cfg in (resolve(), resolve(None), resolve({})):
        assert isinstance(cfg, Config)
        assert dict(cfg) == {name: key.default for name, key in SCHEMA.items()}
    cfg = resolve()
    assert cfg["algorithm"] == "fedavg"
    assert cfg["dataset"] == "fashion-mnist"
    assert cfg["num-clients"] == 100
    assert cfg["lr"] == 0.05
    assert cfg["partition-balanced"] is True
    assert len(cfg) == len(SCHEMA)


def test_pyproject_config_table_is_the_one_the_schema_generates():
    text = PYPROJECT.read_text()
    assert C.with_generated_config_table(text) == text, f"run: {C.WRITE_COMMAND}"
    assert C.pyproject_is_current(PYPROJECT)
    assert C.main(["--check-pyproject"]) == 0


def test_pyproject_config_table_and_schema_agree():
    table = tomllib.loads(PYPROJECT.read_text())["tool"]["flwr"]["app"]["config"]
    assert set(table) - set(SCHEMA) == set(), "keys in pyproject.toml missing from the schema"
    assert set(SCHEMA) - set(table) == set(), "schema keys missing from pyproject.toml"
    for name, value in table.items():
        default = SCHEMA[name].default
        assert value == default, f"{name}: pyproject {value!r} != schema {default!r}"
        assert type(value) is type(default), f"{name}: pyproject type {type(value)} != schema {type(default)}"
    # and the pyproject table is itself a valid run config
    assert dict(resolve(table)) == dict(resolve())


def test_generated_table_reads_back_as_the_schema_defaults():
    table = tomllib.loads(C.pyproject_config_block())["tool"]["flwr"]["app"]["config"]
    assert list(table) == list(SCHEMA)
    for name, value in table.items():
        assert value == SCHEMA[name].default and type(value) is type(SCHEMA[name].default), name


@pytest.mark.parametrize(
    "value, literal",
    [(True, "true"), (False, "false"), (0, "0"), (4096.0, "4096.0"), (1e-8, "1e-08"), ("0.6,0.3", '"0.6,0.3"'),
     ("a\"b\\c", '"a\\"b\\\\c"'), ("ϕ", '"ϕ"')],
)  # fmt: skip
def test_toml_values_read_back_as_the_same_value_and_type(value, literal):
    assert C.toml_value(value) == literal
    read = tomllib.loads(f"x = {literal}")["x"]
    assert read == value and type(read) is type(value)


def test_a_table_that_differs_from_the_schema_is_found_and_rewritten_leaving_the_rest_as_it_was():
    head, tail = '[project]\nname = "x"\n\n# a comment\n', "\n\n[tool.other]\nkey = 1  # kept\n"
    stale = head + C.pyproject_config_block().replace("lr = 0.05", "lr = 0.5") + tail
    fixed = C.with_generated_config_table(stale)
    assert fixed != stale and fixed == head + C.pyproject_config_block() + tail
    assert C.with_generated_config_table(fixed) == fixed
    missing_key = head + C.pyproject_config_block().replace("seed = 0\n", "") + tail
    assert C.with_generated_config_table(missing_key) == fixed


def test_check_and_write_on_a_stale_pyproject(tmp_path, monkeypatch, capsys):
    stale = PYPROJECT.read_text().replace("num-clients = 100", "num-clients = 10")
    path = tmp_path / "pyproject.toml"
    path.write_text(stale)
    monkeypatch.setattr(C, "PYPROJECT", path)
    assert not C.pyproject_is_current(path)
    assert C.main(["--check-pyproject"]) == 1
    assert C.WRITE_COMMAND in capsys.readouterr().out
    assert C.main(["--write-pyproject"]) == 0
    assert path.read_text() == PYPROJECT.read_text()
    assert C.main(["--check-pyproject"]) == 0


def test_pyproject_without_the_markers_is_an_error():
    with pytest.raises(ConfigError, match="BEGIN run-config defaults"):
        C.with_generated_config_table("[tool.flwr.app.config]\nlr = 0.05\n")


def test_every_default_passes_its_own_check():
    for name, key in SCHEMA.items():
        value, err = key.check(key.default)
        assert err is None, err
        assert value == key.default, name


def test_algorithm_names_match_the_registry():
    from fedsuite.registry import known as registry

    assert set(C.ALGORITHMS) == set(registry.ALGORITHMS.built_in)
    assert len(C.ALGORITHMS) == len(set(C.ALGORITHMS))
    assert SCHEMA["algorithm"].choices == C.ALGORITHMS


def test_registry_argument_keys_are_schema_keys():
    from fedsuite.registry import known as registry

    for algo in registry.ALGORITHMS.values():
        for key in (*algo.strategy_args.values(), *algo.client_args.values()):
            assert key in SCHEMA, f"{algo.name} reads unknown run-config key {key!r}"


def test_schema_choices_cover_the_dataset_model_table():
    assert set(C.DATASET_MODELS) == set(C.DATASETS)
    for dataset, models in C.DATASET_MODELS.items():
        assert models and set(models) <= set(C.MODELS) - {"auto"}, dataset


# --- ConfigError messages --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, bad, allowed",
    [
        ("algorithm", "fedfoo", ["fedavg", "fedprox", "scaffold", "fedspeed", "fedspeed-ing", "fedmim"]),
        ("dataset", "imagenet", ["fashion-mnist", "mnist", "cifar10", "cifar100", "tinyimagenet", "synthetic-lsq"]),
        ("model", "vgg16", ["auto", "cnn", "2nn", "logreg", "resnet18-gn", "linear"]),
        ("partition", "pathological", ["iid", "dirichlet", "shards", "mixture"]),
        ("sampling", "poisson", ["fixed", "bernoulli"]),
        ("weighting", "loss", ["uniform", "samples"]),
        ("device", "tpu", ["auto", "cpu", "cuda"]),
    ],
)
def test_unknown_name_lists_allowed_values(key, bad, allowed):
    msg = _error({key: bad})
    assert f"{key}={bad!r}" in msg
    assert "allowed values" in msg
    for name in allowed:
        assert name in msg


@pytest.mark.parametrize(
    "key, bad, bound",
    [
        ("lr", -0.1, "> 0"),
        ("lr", 0.0, "> 0"),
        ("partition-alpha", 0.0, "> 0"),
        ("partition-alpha", -1.0, "> 0"),
        ("participation", 1.5, "in (0, 1]"),
        ("participation", 0.0, "in (0, 1]"),
        ("partition-mixture", 1.01, "in [0, 1]"),
        ("num-clients", 0, ">= 1"),
        ("seed", -1, ">= 0"),
        ("weight-decay", -1e-4, ">= 0"),
        ("lr-decay", 1.5, "in (0, 1]"),
        ("fedopt-tau", 0.0, "> 0"),
        ("dp-delta", 1.0, "in (0, 1)"),
        ("num-server-rounds", 10**6, "in [1, 100000]"),
    ],
)
def test_out_of_range_names_key_and_its_whole_range(key, bad, bound):
    msg = _error({key: bad})
    assert f"{key}={bad!r}: must be {bound}" in msg


def _outside(key: C.Key) -> list:
    """A value just past each of a key's bounds (the bound itself where it is open)."""
    kind = type(key.default)
    below = key.low if key.low_open else key.low - 1
    above = key.high if key.high_open else key.high + 1
    return [kind(below), kind(above)]


@pytest.mark.parametrize("key", [k for k in SCHEMA.values() if k.low is not None and k.high is not None],
                         ids=lambda k: k.name)  # fmt: skip
def test_a_two_sided_range_is_named_whole_whichever_bound_a_value_violates(key):
    below, above = (key.check(value)[1] for value in _outside(key))
    assert below.split(": ", 1)[1] == above.split(": ", 1)[1]  # the same words on both sides
    low = "(" if key.low_open else "["
    high = ")" if key.high_open else "]"
    assert below.endswith(f": must be in {low}{key.low:g}, {key.high:g}{high}")


@pytest.mark.parametrize(
    "key, edge",
    [("partition-mixture", 0.0), ("partition-mixture", 1.0), ("participation", 1.0), ("local-steps", 0)],
)
def test_inclusive_bounds_are_accepted(key, edge):
    assert resolve({key: edge})[key] == edge


def test_clients_per_round_above_num_clients():
    msg = _error({"num-clients": 5, "clients-per-round": 6})
    assert "clients-per-round" in msg and "num-clients" in msg
    assert "6" in msg and "5" in msg
    # equal is fine, and bernoulli sampling does not use S
    assert resolve({"num-clients": 6, "clients-per-round": 6})["clients-per-round"] == 6
    assert resolve({"num-clients": 5, "clients-per-round": 6, "sampling": "bernoulli"})["sampling"] == "bernoulli"


@pytest.mark.parametrize(
    "dataset, model", [("synthetic-lsq", "cnn"), ("synthetic-logistic", "linear"), ("cifar10", "2nn")]
)
def test_model_that_does_not_fit_the_dataset(dataset, model):
    msg = _error({"dataset": dataset, "model": model})
    assert f"model={model!r}" in msg and f"dataset={dataset!r}" in msg
    for fits in C.DATASET_MODELS[dataset]:
        assert fits in msg


def test_unknown_key():
    msg = _error({"lrr": 0.1})
    assert "lrr" in msg and "unknown key" in msg


def test_unknown_key_suggests_close_names():
    msg = _error({"partition-alfa": 0.1})
    assert "partition-alfa: unknown key" in msg
    assert "partition-alpha" in msg  # the "did you mean" hint


@pytest.mark.parametrize("typo, best", [("local-step", "local-steps"), ("lr_decai", "lr-decay"),
                                        ("dp-delt", "dp-delta"), ("num-round", "num-server-rounds"),
                                        ("partition-alfa", "partition-alpha")])  # fmt: skip
def test_a_typos_suggestions_are_ordered_closest_first(typo, best):
    msg = _error({typo: 1})
    assert f"{typo}: unknown key (did you mean {best}, " in msg


@pytest.mark.parametrize(
    "key, bad, expected",
    [
        ("num-clients", "100", "expected an integer"),
        ("num-clients", 10.0, "expected an integer"),
        ("num-clients", True, "expected an integer"),
        ("lr", True, "expected a number"),
        ("lr", "0.1", "expected a number"),
        ("lr", float("nan"), "expected a finite number"),
        ("lr", float("inf"), "expected a finite number"),
        ("download", 1, "expected true or false"),
        ("download", "true", "expected true or false"),
        ("dataset", 3, "expected a string"),
        ("targets", 0.7, "expected a string"),
    ],
)
def test_wrong_types(key, bad, expected):
    msg = _error({key: bad})
    assert f"{key}=" in msg and expected in msg


def test_several_bad_keys_reported_together():
    msg = _error({"lr": -1.0, "algorithm": "sgd", "lrr": 3, "num-clients": "ten", "participation": 2.0})
    assert msg.startswith("invalid run config")
    for fragment in ("lr=-1.0", "algorithm='sgd'", "lrr: unknown key", "num-clients='ten'", "participation=2.0"):
        assert fragment in msg
    assert len(msg.splitlines()) == 1 + 5  # header + one line per problem


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_ints_are_accepted_for_float_keys():
    cfg = resolve({"lr": 1, "partition-alpha": 2, "participation": 1, "weight-decay": 0})
    for key, want in (("lr", 1.0), ("partition-alpha", 2.0), ("participation", 1.0), ("weight-decay", 0.0)):
        assert cfg[key] == want and type(cfg[key]) is float


def test_overrides_are_applied_and_config_is_read_only():
    cfg = resolve({"algorithm": "fedprox", "prox-mu": 0.5, "seed": 3})
    assert (cfg["algorithm"], cfg["prox-mu"], cfg["seed"]) == ("fedprox", 0.5, 3)
    assert cfg["lr"] == SCHEMA["lr"].default
    with pytest.raises(TypeError):
        cfg["seed"] = 4  # type: ignore[index]


# --- Config properties -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dataset, model",
    [
        ("fashion-mnist", "cnn"),
        ("mnist", "cnn"),
        ("cifar10", "resnet18-gn"),
        ("cifar100", "resnet18-gn"),
        ("tinyimagenet", "resnet18-gn"),
        ("synthetic-lsq", "linear"),
        ("synthetic-logistic", "logreg"),
    ],
)
def test_model_auto_resolves_per_dataset(dataset, model):
    cfg = resolve({"dataset": dataset})
    assert cfg["model"] == "auto"
    assert cfg.model == model
    assert cfg.is_synthetic == dataset.startswith("synthetic-")


def test_explicit_model_is_kept():
    assert resolve({"dataset": "cifar10", "model": "cnn"}).model == "cnn"
    assert resolve({"dataset": "mnist", "model": "2nn"}).model == "2nn"


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("0.7,0.75,0.8", [0.7, 0.75, 0.8]),
        ("0.5", [0.5]),
        (" 0.6 , 0.9 ", [0.6, 0.9]),
        ("0.6,,0.9,", [0.6, 0.9]),
        ("", []),
        ("0,1", [0.0, 1.0]),
    ],
)
def test_targets_parses_the_string(text, parsed):
    assert resolve({"targets": text}).targets == pytest.approx(parsed)


def test_default_targets():
    assert resolve().targets == pytest.approx([0.7, 0.75, 0.8])


@pytest.mark.parametrize("bad", ["0.7;0.8", "seventy", "0.7,abc", "1.5", "-0.1,0.5", "nan"])
def test_bad_targets_string_raises(bad):
    msg = _error({"targets": bad})
    assert "targets=" in msg and repr(bad) in msg


@pytest.mark.parametrize(
    "alphas, betas",
    [("0.6,0.5", "0.9,0.1"), ("0.6,0.3", "0.9"), ("", ""), ("0.6,-0.1", "0.5,0.5"), ("a,b", "0.1,0.1")],
)
def test_fedmim_weights_are_checked(alphas, betas):
    msg = _error({"algorithm": "fedmim", "fedmim-alphas": alphas, "fedmim-betas": betas})
    assert "fedmim-alphas" in msg and "fedmim-betas" in msg


def test_fedmims_weights_are_fedmims_own_rule():
    """The check lives in FedMIM's registry entry, not in the schema: another algorithm ignores the keys."""
    from fedsuite.registry import known as registry

    assert resolve({"algorithm": "fedavg", "fedmim-alphas": "0.9,0.2"})["algorithm"] == "fedavg"
    (check,) = registry.ALGORITHMS["fedmim"].checks
    assert check({"fedmim-alphas": "0.9,0.2", "fedmim-betas": "0.9,0.1"}).startswith("fedmim-alphas='0.9,0.2'")


def test_fedspeed_ing_needs_client_held_duals():
    msg = _error({"algorithm": "fedspeed-ing", "dual-storage": "server"})
    assert "dual-storage='server'" in msg and "use client" in msg
    assert resolve({"algorithm": "fedspeed", "dual-storage": "server"})["dual-storage"] == "server"


@pytest.mark.parametrize("algorithm, extra", [("scaffold", {"scaffold-option": 1}),
                                              ("scaffold-prox", {"scaffold-option": 1}), ("mimesvrg", {})])  # fmt: skip
def test_a_mean_loss_full_gradient_correction_refuses_sum_reduced_steps(algorithm, extra):
    msg = _error({"algorithm": algorithm, "loss-reduction": "sum", **extra})
    assert "loss-reduction='sum'" in msg and "use loss-reduction='mean'" in msg
    assert resolve({"algorithm": algorithm, "loss-reduction": "mean", **extra})["loss-reduction"] == "mean"
    assert resolve({"algorithm": "scaffold", "loss-reduction": "sum"})["scaffold-option"] == 2  # option 2 is fine
