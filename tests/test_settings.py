"""The typed settings objects on Config (fedsuite/config/run_config.py): real Python types, values equal to the
Config's keys, frozen, built once per Config."""

import dataclasses
import pickle
from typing import get_type_hints

import pytest

from fedsuite.config import run_config as C
from fedsuite.config.presets import PRESETS
from fedsuite.config.run_config import SCHEMA, Config, resolve

GROUPS = {
    "data": C.DataSource,
    "synthetic": C.SyntheticData,
    "partitioning": C.Partitioning,
    "sampling": C.ClientSampling,
    "local": C.LocalLoop,
    "aggregation": C.Aggregation,
    "evaluation": C.Evaluation,
    "run_control": C.RunControl,
    "output": C.Output,
    "client_state": C.ClientStateSettings,
}

CONFIGS = [
    {},
    {"lr": 1, "weight-decay": 0, "round-timeout": 30, "client-state-budget-mb": 1},  # ints given for float keys
    {"dataset": "synthetic-lowrank", "lowrank-rank": 2, "local-batches": "blocks", "losac-blocks": 3},
    {"sampling": "bernoulli", "participation": 0.5, "targets": " 0.6 , 0.9 ", "autocast": "bf16"},
    {"targets": "", "client-state": "disk", "client-state-dir": "/tmp/x", "device": "cpu", "overwrite": True},
    {"server-data": False, "evaluation": "federated", "input-shape": "3, 8,8", "num-classes": 4, "eval-clients": 3},
    {"evaluation": "both", "validation-fraction": 0.1, "target-metric": "val-accuracy", "local-test-fraction": 0.3},
    *({"preset": name} for name in sorted(PRESETS)),
]


def _ids(run_config: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in run_config.items()) or "defaults"


@pytest.mark.parametrize("run_config", CONFIGS, ids=_ids)
@pytest.mark.parametrize("attribute, cls", GROUPS.items(), ids=GROUPS)
def test_every_field_is_its_key_with_the_declared_type(run_config, attribute, cls):
    cfg = resolve(run_config)
    group = getattr(cfg, attribute)
    assert type(group) is cls
    types = get_type_hints(cls)
    for name, key in cls.keys().items():
        value = getattr(group, name)
        if key == "targets":
            assert value == tuple(cfg.targets) and all(type(t) is float for t in value)
            assert type(value) is tuple
        elif key == "input-shape":
            assert value == tuple(int(t) for t in cfg[key].split(",") if t.strip()) and type(value) is tuple
        else:
            assert value == cfg[key] and type(value) is type(cfg[key]) is types[name], (attribute, name)


@pytest.mark.parametrize("cls", GROUPS.values(), ids=GROUPS)
def test_groups_are_frozen_and_read_schema_keys(cls):
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    assert set(cls.keys().values()) <= set(SCHEMA)
    assert cls.__doc__ and all(f"{name} ({key})" in cls.__doc__ for name, key in cls.keys().items()), cls
    group = getattr(resolve(), next(k for k, v in GROUPS.items() if v is cls))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(group, dataclasses.fields(cls)[0].name, None)


def test_the_groups_named_in_the_brief_hold_these_keys():
    assert C.LocalLoop.keys() == {
        "epochs": "local-epochs", "steps": "local-steps", "work": "local-work", "steps_min": "local-steps-min",
        "batch_size": "batch-size", "lr": "lr",
        "lr_decay": "lr-decay", "weight_decay": "weight-decay", "clip_norm": "clip-norm", "clip_scope": "clip-scope",
        "relaxed_init": "relaxed-init", "local_batches": "local-batches", "blocks": "losac-blocks",
        "loss_reduction": "loss-reduction",
        "client_threads": "client-threads", "autocast": "autocast", "channels_last": "channels-last",
    }  # fmt: skip
    assert C.ClientStateSettings.keys() == {
        "mode": "client-state", "budget_mb": "client-state-budget-mb", "dir": "client-state-dir"
    }  # fmt: skip
    assert C.Evaluation.keys() == {
        "eval_every": "eval-every",
        "eval_batch_size": "eval-batch-size",
        "targets": "targets",
        "mode": "evaluation",
        "eval_clients": "eval-clients",
        "local_test_fraction": "local-test-fraction",
        "validation_fraction": "validation-fraction",
        "target_metric": "target-metric",
    }
    assert set(C.RunControl.keys().values()) >= {
        "min-replies",
        "divergence-factor",
        "round-timeout",
        "checkpoint-every",
    }


def test_values_of_a_changed_config():
    local = {"local-epochs": 3, "lr": 1, "clip-scope": "reference"}
    server = {"eval-every": 5, "targets": "0.5,0.6", "min-replies": 0.0, "round-timeout": 2}
    cfg = resolve({**local, **server, "client-state": "memory", "client-state-budget-mb": 10})
    assert (cfg.local.epochs, cfg.local.lr, cfg.local.clip_scope) == (3, 1.0, "reference")
    assert type(cfg.local.lr) is float
    assert cfg.evaluation == C.Evaluation(eval_every=5, eval_batch_size=1000, targets=(0.5, 0.6), mode="central",
                                         eval_clients=0, local_test_fraction=0.2, validation_fraction=0.0,
                                         target_metric="auto")  # fmt: skip
    assert cfg.client_state == C.ClientStateSettings(mode="memory", budget_mb=10.0, dir="")
    assert (cfg.run_control.min_replies, cfg.run_control.round_timeout) == (0.0, 2.0)
    assert cfg.sampling == C.ClientSampling(mode="fixed", num_clients=100, clients_per_round=10, participation=0.1,
                                            seed=0)  # fmt: skip


def test_identity_properties():
    cfg = resolve({"algorithm": "scaffold", "dataset": "mnist", "num-clients": 7, "clients-per-round": 3, "seed": 4})
    assert (cfg.algorithm, cfg.dataset, cfg.num_clients, cfg.seed, cfg.preset) == ("scaffold", "mnist", 7, 4, "")
    assert (type(cfg.num_clients), type(cfg.seed)) == (int, int)
    assert cfg.model == "cnn" and cfg.data.name == "mnist" and not cfg.is_synthetic
    assert resolve({"preset": "losac-mnist"}).preset == "losac-mnist"


def test_groups_are_built_once_and_survive_pickling():
    cfg = resolve({"lr": 0.2})
    assert cfg.local is cfg.local and cfg.evaluation is cfg.evaluation
    copy = pickle.loads(pickle.dumps(cfg))
    assert isinstance(copy, Config) and dict(copy) == dict(cfg)
    for attribute in GROUPS:
        assert getattr(copy, attribute) == getattr(cfg, attribute)


def test_settings_are_hashable_and_compare_by_value():
    assert resolve({"seed": 1}).partitioning == resolve({"seed": 1}).partitioning
    assert hash(resolve({"seed": 1}).partitioning) == hash(resolve({"seed": 1}).partitioning)
    assert resolve({"seed": 1}).partitioning != resolve({"seed": 2}).partitioning


@pytest.mark.parametrize("run_config", [{}, {"sampling": "bernoulli", "participation": 0.3, "seed": 5}], ids=_ids)
def test_sampler_from_the_sampling_settings_draws_the_same_cohorts(run_config):
    from fedsuite.server.sampling import Sampler

    cfg = resolve(run_config)
    keys = ("num-clients", "sampling", "clients-per-round", "participation", "seed")
    by_keys = Sampler(*(cfg[k] for k in keys))  # how the server builds it today
    assert Sampler.from_settings(cfg.sampling) == by_keys
    assert [Sampler.from_settings(cfg.sampling).cohort(r) for r in (1, 2, 3)] == [by_keys.cohort(r) for r in (1, 2, 3)]
