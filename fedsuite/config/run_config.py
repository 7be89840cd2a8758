"""A run's config: `resolve(run_config)` merges Flower's run config over the schema's defaults and returns a
`Config`, or raises one `ConfigError` that lists every bad key with what is allowed.

The keys come from the schema of this process (fedsuite/registry/known.py `active_schema`: the common keys of
fedsuite/config/schema.py plus each registered algorithm's own keys, built-ins and plug-ins alike), and each algorithm's
own checks run after every key passed its check. The schema is the only place a default is written:
pyproject.toml's `[tool.flwr.app.config]` table (where Flower reads them) is generated from the built-ins' schema
(`python -m fedsuite.config --write-pyproject`), the run-config reference page docs/reference/run-config.md too
(simulation.algorithms).
A `Config` also carries typed settings objects (`cfg.local`, `cfg.evaluation`, …) for the groups the code reads.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Mapping
from typing import Any

# Besides what it uses, this module hands on the names it held before its parts moved out (marked F401): plug-ins
# declare their keys as fedsuite.config.run_config.Key, and fedsuite.config forwards the old module's names from here
# (fedsuite/moved.py). The parts: the settings groups (groups.py), the cross-key checks (cross_checks.py), the keys
# (keys.py, schema.py) and pyproject.toml's table (pyproject_table.py).
from fedsuite.config.cross_checks import cross_checks
from fedsuite.config.groups import (
    Aggregation,
    Batching,
    ClientSampling,
    ClientStateSettings,
    Compression,
    DataSource,
    Evaluation,
    LocalLoop,
    Output,
    Partitioning,
    RunControl,
    SyntheticData,
)
from fedsuite.config.import_paths import is_import_path  # noqa: F401
from fedsuite.config.keys import ConfigError, Key, Scalar, float_list, int_list, parse_pairs, similar_keys  # noqa: F401
from fedsuite.config.presets import apply_preset, preset_error
from fedsuite.config.pyproject_table import (  # noqa: F401
    PYPROJECT,
    PYPROJECT_BEGIN,
    PYPROJECT_END,
    WRITE_COMMAND,
    pyproject_config_block,
    pyproject_is_current,
    toml_value,
    with_generated_config_table,
)
from fedsuite.config.schema import (  # noqa: F401
    BINARY_LABEL_DATASETS,
    COLOUR_DATASETS,
    DATA_FORMATS,
    DATASET_MODELS,
    DATASETS,
    MODELS,
    PLUGIN_CONFIG,
)
from fedsuite.config.settings import Settings, setting, value_of  # noqa: F401
from fedsuite.privacy.secagg import SecAggSettings
from fedsuite.privacy.settings import ClientPrivacy, SampleLevelPrivacy
from fedsuite.registry import known as registry_known
from fedsuite.registry.known import ALGORITHMS as ALGORITHMS_REGISTRY
from fedsuite.registry.known import BUILT_IN_SCHEMA, active_schema, algorithm_errors  # noqa: F401
from fedsuite.results.run_folder import run_name_problem  # noqa: F401
from fedsuite.server.pruning import PruneSettings, parse_marks  # noqa: F401
from fedsuite.systems.checks import system_errors  # noqa: F401
from fedsuite.systems.model import SystemModel

SCHEMA = BUILT_IN_SCHEMA  # the built-ins' schema (fedsuite/registry/known.py); a run resolves against active_schema()
ALGORITHMS = ALGORITHMS_REGISTRY.built_in  # the built-in algorithm names, in the registry's order


class Config(Mapping):
    """A validated, read-only run config (string keys as in pyproject.toml), with typed views of it.

    `cfg["lr"]` reads one key; the typed settings objects group what the code reads together: `cfg.data`,
    `cfg.synthetic`, `cfg.partitioning`, `cfg.sampling`, `cfg.local`, `cfg.aggregation`, `cfg.privacy`,
    `cfg.evaluation`, `cfg.run_control`, `cfg.output`, `cfg.client_state`, `cfg.sample_privacy`, `cfg.secagg`,
    `cfg.pruning`, `cfg.batching`, `cfg.compression` and the system models `cfg.systems` (fedsuite/systems);
    `cfg.algorithm`, `cfg.dataset`, `cfg.preset`, `cfg.num_clients`, `cfg.seed` and `cfg.model` are the run's
    identity. Everything is built once, here.
    """

    def __init__(self, values: Mapping[str, Scalar], explicit: frozenset[str] = frozenset()):
        self._values = dict(values)
        self.explicit = explicit  # keys the run config gave with a value other than the default
        v = self._values
        self._data = DataSource.from_values(v)
        self._synthetic = SyntheticData.from_values(v)
        self._partitioning = Partitioning.from_values(v)
        self._sampling = ClientSampling.from_values(v)
        self._local = LocalLoop.from_values(v)
        self._aggregation = Aggregation.from_values(v)
        self._privacy = ClientPrivacy.from_values(v)
        self._evaluation = Evaluation.from_values(v)
        self._run_control = RunControl.from_values(v)
        self._output = Output.from_values(v)
        self._client_state = ClientStateSettings.from_values(v)
        self._sample_privacy = SampleLevelPrivacy.from_values(v)
        self._secagg = SecAggSettings.from_values(v)
        self._pruning = PruneSettings.from_values(v)
        self._batching = Batching.from_values(v)
        self._compression = Compression.from_values(v)
        self._systems = SystemModel.from_run_config(v)

    def __getitem__(self, key: str) -> Scalar:
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Config({self._values!r})"

    @property
    def data(self) -> DataSource:
        return self._data

    @property
    def synthetic(self) -> SyntheticData:
        return self._synthetic

    @property
    def partitioning(self) -> Partitioning:
        return self._partitioning

    @property
    def sampling(self) -> ClientSampling:
        return self._sampling

    @property
    def local(self) -> LocalLoop:
        return self._local

    @property
    def aggregation(self) -> Aggregation:
        return self._aggregation

    @property
    def privacy(self) -> ClientPrivacy:
        return self._privacy

    @property
    def evaluation(self) -> Evaluation:
        return self._evaluation

    @property
    def run_control(self) -> RunControl:
        return self._run_control

    @property
    def output(self) -> Output:
        return self._output

    @property
    def client_state(self) -> ClientStateSettings:
        return self._client_state

    @property
    def sample_privacy(self) -> SampleLevelPrivacy:
        return self._sample_privacy

    @property
    def secagg(self) -> SecAggSettings:
        return self._secagg

    @property
    def pruning(self) -> PruneSettings:
        return self._pruning

    @property
    def batching(self) -> Batching:
        return self._batching

    @property
    def compression(self) -> Compression:
        return self._compression

    @property
    def systems(self) -> SystemModel:
        """The system models (local work, drop-outs, deadline, availability) of this run."""
        return self._systems

    @property
    def algorithm(self) -> str:
        return str(self._values["algorithm"])

    @property
    def dataset(self) -> str:
        return self._data.name

    @property
    def preset(self) -> str:
        """The preset's name; '' = none."""
        return str(self._values["preset"])

    @property
    def num_clients(self) -> int:
        """N, number of clients (partitions)."""
        return int(self._values["num-clients"])

    @property
    def seed(self) -> int:
        return int(self._values["seed"])

    @property
    def model(self) -> str:
        """The model name (resolves model='auto' for built-in datasets; own data resolves it from its shape)."""
        name = str(self._values["model"])
        return DATASET_MODELS[self.dataset][0] if name == "auto" and self.dataset in DATASET_MODELS else name

    @property
    def model_args(self) -> str:
        """`model-args`, the factory's further keyword arguments as a TOML inline table ('' = none)."""
        return str(self._values["model-args"])

    @property
    def buffers(self) -> str:
        """'average' or 'local': what happens to the model's buffers (BatchNorm statistics)."""
        return str(self._values["buffers"])

    @property
    def targets(self) -> list[float]:
        return list(self._evaluation.targets)

    @property
    def is_synthetic(self) -> bool:
        return self.dataset.startswith("synthetic-")


def resolve(run_config: Mapping[str, Any] | None = None) -> Config:
    """Defaults overlaid with `run_config` (its `preset` expanded first unless `preset-expanded`), every key
    checked; raises ConfigError listing all problems."""
    run_config = dict(run_config or {})
    errors: list[str] = []
    if (err := preset_error(value_of(run_config, "preset"))) is not None:
        errors.append(err)
    elif not value_of(run_config, "preset-expanded"):
        run_config, _ = apply_preset(run_config)
    run_config = unpack_plugin_config(run_config, errors)
    values: dict[str, Scalar] = {}
    schema = active_schema()
    for name in sorted(set(run_config) - set(schema)):
        close = similar_keys(name, schema)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        errors.append(f"{name}: unknown key{hint}")
    own = algorithm_defaults(run_config, schema)
    for name, key in schema.items():
        given = run_config.get(name, key.default)
        value, err = key.check(own[name] if name in own and given == key.default else given)
        if err:
            errors.append(err)
        else:
            values[name] = value
    errors += cross_checks(values)
    if errors:
        raise ConfigError("invalid run config:\n  " + "\n  ".join(errors))
    explicit = frozenset(k for k in run_config if k in schema and run_config[k] != schema[k].default)
    return Config(values, explicit)


def algorithm_defaults(run_config: Mapping[str, Any], schema: Mapping[str, Key]) -> Mapping[str, Any]:
    """The chosen algorithm's own defaults of common keys (its registry entry's `key_defaults`; none for a name the
    registry does not know, which the `algorithm` key's check refuses)."""
    algorithm = registry_known.ALGORITHMS.get(str(value_of(run_config, "algorithm")))
    return {} if algorithm is None else algorithm.key_defaults


_RESOLVED: dict[tuple, Config] = {}  # run config (and the registry it was resolved against) → its Config
_RESOLVED_SLOTS = 16
_RESOLVED_LOCK = threading.Lock()


def run_configsetting(run_config: Mapping[str, Any]) -> tuple | None:
    """What a resolved run config depends on: its keys, values and their types (1, 1.0 and True resolve
    differently) and the algorithms registered in this process (their keys and checks); None when a value cannot be
    a key (not hashable)."""
    try:
        given = tuple(sorted((str(k), type(v).__name__, v) for k, v in run_config.items()))
        key = (given, tuple((name, id(algorithm)) for name, algorithm in ALGORITHMS_REGISTRY.items()))
        hash(key)
    except TypeError:
        return None
    return key


def resolve_cached(run_config: Mapping[str, Any] | None = None) -> Config:
    """`resolve(run_config)`, the same read-only Config again for an equal run config: a node resolves the run config
    of every message it gets, and it is the same for the whole run. A run config that fails is resolved (and
    refused) again each time."""
    key = run_configsetting(run_config or {})
    if key is None:
        return resolve(run_config)
    with _RESOLVED_LOCK:
        found = _RESOLVED.get(key)
    if found is not None:
        return found
    cfg = resolve(run_config)
    with _RESOLVED_LOCK:
        _RESOLVED[key] = cfg
        while len(_RESOLVED) > _RESOLVED_SLOTS:
            _RESOLVED.pop(next(iter(_RESOLVED)))
    return cfg


def unpack_plugin_config(run_config: dict[str, Any], errors: list[str]) -> dict[str, Any]:
    """`run_config` with the pairs of `plugin-config` beside the other keys and `plugin-config` emptied (its keys
    now stand on their own, so a resolved config resolves again to itself). A pair that names a built-in key, or a
    key also given directly with another value, is an error."""
    packed = value_of(run_config, PLUGIN_CONFIG)
    if not isinstance(packed, str) or not packed.strip():
        return run_config
    try:
        pairs = parse_pairs(packed)
    except ValueError as err:
        errors.append(f"{PLUGIN_CONFIG}={packed!r}: {err}; write \"key=value key2='text'\"")
        return {**run_config, PLUGIN_CONFIG: ""}
    for key, value in pairs.items():
        if key in SCHEMA:
            errors.append(f"{PLUGIN_CONFIG}: {key!r} is a built-in key; give it directly, not in {PLUGIN_CONFIG}")
        elif key in run_config and run_config[key] != value:
            errors.append(f"{PLUGIN_CONFIG}: {key!r} is also given directly ({run_config[key]!r} and {value!r})")
    return {**run_config, **pairs, PLUGIN_CONFIG: ""}


def with_num_clients(cfg: Config, num_clients: int, why: str) -> Config:
    """`cfg` with num-clients set by the data (partition='natural'); an explicit different value is an error."""
    if cfg.num_clients == num_clients:
        return cfg
    if "num-clients" in cfg.explicit:
        raise ConfigError(
            f"num-clients={cfg.num_clients}: {why} makes {num_clients} clients; leave num-clients out "
            f"or set it to {num_clients}"
        )
    new = resolve({**dict(cfg), "num-clients": num_clients, "preset-expanded": True})  # the preset is applied
    return Config({**dict(new), "preset-expanded": cfg["preset-expanded"]}, cfg.explicit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="pyproject.toml's [tool.flwr.app.config] table from the schema")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write-pyproject", action="store_true", help="rewrite the table in pyproject.toml")
    action.add_argument("--check-pyproject", action="store_true", help="exit 1 when the table is out of date")
    args = parser.parse_args(argv)
    if args.write_pyproject:
        PYPROJECT.write_text(with_generated_config_table(PYPROJECT.read_text()))
    elif args.check_pyproject:
        if not pyproject_is_current(PYPROJECT):
            print("pyproject.toml's run-config table differs from the schema; run: " + WRITE_COMMAND)
            return 1
    else:
        print(pyproject_config_block())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
