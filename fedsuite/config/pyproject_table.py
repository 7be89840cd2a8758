"""pyproject.toml's `[tool.flwr.app.config]` table, generated from the built-ins' schema: Flower reads the run
config's defaults from there, and the schema is the only place a default is written. `python -m fedsuite.config
--write-pyproject` rewrites the table (fedsuite/config/run_config.py's `main`), `--check-pyproject` says whether it is
current.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from fedsuite.config.keys import ConfigError, Scalar
from fedsuite.registry.known import BUILT_IN_SCHEMA as SCHEMA

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
PYPROJECT_BEGIN = "# BEGIN run-config defaults"
PYPROJECT_END = "# END run-config defaults"
WRITE_COMMAND = "python -m fedsuite.config --write-pyproject"


def toml_value(value: Scalar) -> str:
    """`value` as a TOML literal that reads back as the same Python value and type."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    return repr(value)  # int, or a finite float (repr keeps the '.0' or the exponent)


def pyproject_config_block() -> str:
    """The run-config table, with the markers and the comment that say where it comes from."""
    lines = [
        f"{PYPROJECT_BEGIN}: every key with its default, generated from the built-ins' schema",
        "# (fedsuite/config/schema.py and fedsuite/registry/builtin.py, where defaults are written)",
        f"# by `{WRITE_COMMAND}`; do not edit by hand.",
        "# Flower reads the defaults from here; tests/test_config.py fails when this table and the schema differ.",
        "[tool.flwr.app.config]",
        *(f"{key.name} = {toml_value(key.default)}" for key in SCHEMA.values()),
        PYPROJECT_END,
    ]
    return "\n".join(lines)


def with_generated_config_table(pyproject_text: str) -> str:
    """`pyproject_text` with the block between the markers replaced by `pyproject_config_block()`; the rest of the
    text is kept byte for byte. Raises ConfigError when the markers are missing."""
    pattern = re.compile(f"^{re.escape(PYPROJECT_BEGIN)}.*?^{re.escape(PYPROJECT_END)}$", re.S | re.M)
    if len(pattern.findall(pyproject_text)) != 1:
        raise ConfigError(
            f"pyproject.toml needs one '{PYPROJECT_BEGIN}' … '{PYPROJECT_END}' block around its "
            "[tool.flwr.app.config] table"
        )
    return pattern.sub(lambda _: pyproject_config_block(), pyproject_text)


def pyproject_is_current(path: Path = PYPROJECT) -> bool:
    """Whether the table in `path` is exactly what the schema generates."""
    text = path.read_text()
    return with_generated_config_table(text) == text
