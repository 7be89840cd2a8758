"""Resuming a run (`resume-from`): the checkpoint loaded once and checked whole and compatible before anything
starts, the checkpointed run's config under the given keys, and the hint that says how to continue a run."""

from __future__ import annotations

import sys
from pathlib import Path

from fedsuite.config.run_config import Config, ConfigError
from simulation.launcher.project import absolute


def check_resume(cfg: Config) -> None:
    """With resume-from, before anything starts: the checkpoint is whole (every file as sealed) and the run config
    computes what the checkpointed run did (fedsuite.results.checkpoint.check_compatible). Raises ConfigError naming the
    bad file, or every differing key with both values."""
    if not cfg["resume-from"]:
        return
    from fedsuite.results import checkpoint

    folder = absolute(str(cfg["resume-from"]))
    ckpt = load_checkpoint(folder)
    try:
        checkpoint.check_compatible(ckpt, dict(cfg))
    except checkpoint.CheckpointError as err:
        text = str(err)
        if "differs in" in text:
            text += ("; leave those keys out of -c to continue the run as it was, or start a new run (without "
                     "resume-from) to use the new values")  # fmt: skip
        raise ConfigError(f"resume-from={str(folder)!r}: {text}") from None


_CHECKPOINTS: dict[Path, object] = {}


def load_checkpoint(folder: Path):
    """fedsuite.results.checkpoint.load (which verifies every file against the checkpoint's manifest first,
    fedsuite.results.checkpoint_files), once per process; every failure is a ConfigError naming the folder or file."""
    from fedsuite.results import checkpoint

    if folder not in _CHECKPOINTS:
        try:
            _CHECKPOINTS[folder] = checkpoint.load(folder)
        except Exception as err:  # a file load cannot read (BadZipFile, JSONDecodeError …)
            raise ConfigError(f"resume-from={str(folder)!r}: {_checkpoint_problem(err)}") from None
    return _CHECKPOINTS[folder]


def _checkpoint_problem(err: Exception) -> str:
    from fedsuite.results import checkpoint

    if isinstance(err, checkpoint.CheckpointError):
        return str(err)
    if isinstance(err, OSError) and err.filename:
        return f"checkpoint file {err.filename} cannot be read ({err.strerror or err}); resume from another copy"
    return f"the checkpoint cannot be read ({type(err).__name__}: {err}); resume from another copy"


def resumed_overrides(overrides: dict) -> dict:
    """With resume-from: the checkpointed run's config, the results folder it is in, then the given overrides
    (e.g. a larger num-server-rounds), so `-c "resume-from='<folder>'"` alone continues the run."""
    if not overrides.get("resume-from"):
        return overrides
    folder = absolute(str(overrides["resume-from"]))
    base = load_checkpoint(folder).run_config
    kept = {k: v for k, v in base.items() if k not in ("out-dir", "run-name", "overwrite", "resume-from")}
    return {**kept, **overrides, "resume-from": str(folder), "out-dir": str(folder.parent), "run-name": folder.name}


def print_resume_hint(folder: Path | None) -> None:
    """An interrupted or failed run with a checkpoint: say how to continue it."""
    from fedsuite.results import checkpoint

    if folder is not None and checkpoint.has_checkpoint(folder):
        print(f"resume it from its last checkpoint: {checkpoint.resume_command(folder)}", file=sys.stderr)
