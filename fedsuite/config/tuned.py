"""tuned.toml: the hyper-parameters `python -m simulation.tune` chose per algorithm, for studies to run with.

    # python -m simulation.tune --algorithms fedavg,fedcm ...   (chosen on the validation split)
    [fedavg]
    lr = 0.05

    [fedcm]
    lr = 0.0158
    fedcm-alpha = 0.1

One table per algorithm, each key a run-config key with its value. A study applies it like a preset
(`with_tuned`): the file's values for the run's algorithm win over a preset, the keys the user gives explicitly
win over the file. Reading checks every name and value against the registry and the schema and raises one
ConfigError naming the file.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

from fedsuite.config.run_config import ConfigError, Scalar, active_schema, toml_value
from fedsuite.results.folder import write_atomic

Tuned = dict[str, dict[str, Scalar]]  # algorithm -> run-config key -> value


def _toml_key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name, ensure_ascii=False)


def text(tuned: Mapping[str, Mapping[str, Scalar]], comments: Iterable[str] = ()) -> str:
    """The file's text: `comments` as # lines, then one table per algorithm in the given order."""
    lines = [f"# {c}" for c in comments]
    for algorithm, values in tuned.items():
        lines += ["", f"[{_toml_key(algorithm)}]"]
        lines += [f"{_toml_key(key)} = {toml_value(value)}" for key, value in values.items()]
    return "\n".join(lines).lstrip("\n") + "\n"


def write(path: Path, tuned: Mapping[str, Mapping[str, Scalar]], comments: Iterable[str] = ()) -> None:
    """Write the file in one step (never half-written)."""
    write_atomic(Path(path), text(tuned, comments))


def read(path: Path | str) -> Tuned:
    """The file's values, every algorithm registered and every key and value allowed by the schema."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as err:
        raise ConfigError(f"tuned values {path}: cannot read ({err.strerror or err})") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"tuned values {path}: not valid TOML ({err})") from err
    from fedsuite.registry.known import ALGORITHMS

    schema = active_schema()
    tuned: Tuned = {}
    for algorithm, values in data.items():
        if algorithm not in ALGORITHMS:
            raise ConfigError(f"tuned values {path}: [{algorithm}] is not an algorithm; allowed are "
                              f"{', '.join(ALGORITHMS)}")  # fmt: skip
        if not isinstance(values, dict):
            raise ConfigError(f"tuned values {path}: {algorithm} must be a table [{algorithm}] of key = value")
        tuned[algorithm] = {}
        for key, value in values.items():
            if key not in schema or key == "algorithm":
                raise ConfigError(f"tuned values {path}: [{algorithm}] {key}: not a run-config key")
            checked, error = schema[key].check(value)
            if error is not None:
                raise ConfigError(f"tuned values {path}: [{algorithm}] {error}")
            tuned[algorithm][key] = checked
    return tuned


def values_for(tuned: Mapping[str, Mapping[str, Scalar]], algorithm: str, path: Path | str = "tuned.toml") -> dict:
    """The file's values for `algorithm`; an algorithm the file does not name is a ConfigError."""
    if algorithm not in tuned:
        raise ConfigError(f"tuned values {path}: no [{algorithm}] table; it has {', '.join(tuned) or 'none'}")
    return dict(tuned[algorithm])


def with_tuned(explicit: Mapping[str, Scalar], tuned: Mapping[str, Mapping[str, Scalar]], algorithm: str,
               path: Path | str = "tuned.toml") -> dict:  # fmt: skip
    """A run's explicit settings for `algorithm`: the file's values, overridden by the keys given explicitly."""
    return {**values_for(tuned, algorithm, path), **explicit}
