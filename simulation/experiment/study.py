"""A study is arguments → jobs → report → reproduce line. A study command declares those parts on a `Study`; the
parts every study shares are here once: the parser (`python -m <module>`, the module docstring's first paragraph),
a bad setting stopping it with one line and exit code 2 before any run (an --out that is a file, or lies below
one, too), SIGINT, SIGTERM and SIGHUP stopping it as Ctrl-C does with the line that reruns it
(simulation.experiment.signals.run_stoppable), stale outputs removed before the runs, the report printed and the
files it wrote listed (`wrote:`); a file it cannot write (a full disk) is one line and exit code 1, the runs kept.

    class Comparison(Study):
        module = "simulation.compare"
        def add_arguments(self, parser): ...      # the study's own flags
        def plan(self, args): ...                  # arguments → a plan with its jobs, everything checked
        def run(self, plan): ...                   # the jobs run (simulation.experiment.runner.run_jobs)
        def report(self, plan, results): ...       # the files written, the text printed
        def reproduce(self, plan): ...             # the command line the report names

    main = Comparison(__doc__).main
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedsuite.config.run_config import ConfigError
from simulation.experiment import report as reports
from simulation.experiment.flags import shell_command
from simulation.experiment.progress import print_written
from simulation.experiment.signals import run_stoppable

BAD_INPUT = (ConfigError, FileNotFoundError, ValueError)  # a setting that cannot work: exit code 2, before any run


class Study:
    """One study command. `module` names it (`python -m <module>`); `doc` is its module docstring. Subclasses
    declare `add_arguments`, `plan`, `run`, `report`, `reproduce` and `exit_code`, and where they need them
    `answer_at_once`, `announce`, `outputs`, `stale`, `rerun_argv`; `bad_input` are the errors of a setting that
    cannot work, `run_errors` those only the runs can find (both: one line, exit code 2)."""

    module: str = ""
    bad_input: tuple[type[Exception], ...] = BAD_INPUT
    run_errors: tuple[type[Exception], ...] = ()

    def __init__(self, doc: str | None):
        self.doc = doc or ""

    # --- what a study declares -------------------------------------------------------------------------------------

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The study's flags."""

    def answer_at_once(self, args: argparse.Namespace) -> int | None:
        """The exit code of a flag that answers without any run (tune's --list), else None."""
        return None

    def plan(self, args: argparse.Namespace) -> Any:
        """Every setting checked and the jobs made, before any run; raises a BAD_INPUT error naming the flag or key."""
        raise NotImplementedError

    def announce(self, plan: Any) -> int | None:
        """Print what will run; an exit code to stop here (tune's --dry-run), else None."""
        return None

    def outputs(self, plan: Any) -> Sequence[Path]:
        """The files the study writes besides the runs, listed after `wrote:`."""
        return []

    def out_folder(self, plan: Any) -> Path | None:
        """The folder the study writes into (--out): checked with the settings, made before the runs."""
        out = getattr(plan, "out", None)
        return Path(out) if out is not None else None

    def stale(self, plan: Any) -> Sequence[Path]:
        """The outputs removed before the runs, so none from an earlier invocation is taken for this one's."""
        return self.outputs(plan)

    def run(self, plan: Any) -> Any:
        """Run the plan's jobs; what the report needs."""
        raise NotImplementedError

    def report(self, plan: Any, results: Any) -> str:
        """Write the study's files; the text to print."""
        raise NotImplementedError

    def reproduce(self, plan: Any) -> str:
        """The command line that reproduces the study (the `Reproduce:` line of its report)."""
        raise NotImplementedError

    def exit_code(self, plan: Any, results: Any, rerun: str) -> int:
        """0 when every run completed, else 1; may say more after the written files (how to rerun what failed).
        Every study says it from its own results: no default, so none can report success it did not check."""
        raise NotImplementedError

    def rerun_argv(self, argv: list[str]) -> list[str]:
        """The arguments of the command that continues a stopped study (by default the same)."""
        return argv

    # --- what every study does -------------------------------------------------------------------------------------

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog=f"python -m {self.module}", description=self.doc.split("\n\n")[0])
        self.add_arguments(parser)
        return parser

    def main(self, argv: list[str] | None = None) -> int:
        """The command: its exit code (0 done, 1 a run did not complete, 2 a bad setting, 130/143/129 a signal)."""
        args = self.parser().parse_args(argv)
        if (code := self.answer_at_once(args)) is not None:
            return code
        given = list(sys.argv[1:] if argv is None else argv)
        rerun = shell_command(self.module, self.rerun_argv(given))
        return run_stoppable(lambda: self.command(args, rerun), rerun)

    def command(self, args: argparse.Namespace, rerun: str) -> int:
        """Plan (exit 2 on a bad setting), announce, run, report, list the files; the exit code."""
        try:
            plan = self.plan(args)
            check_out(self.out_folder(plan))
        except self.bad_input as err:
            return _refused(err)
        if (code := self.announce(plan)) is not None:
            return code
        try:
            make_out(self.out_folder(plan))
            reports.remove_stale(self.stale(plan))
        except (ConfigError, OSError) as err:  # OSError: an earlier table that cannot be removed (named)
            return _refused(err)
        try:
            results = self.run(plan)
            text = self.report(plan, results)
        except self.run_errors as err:
            return _refused(err)
        except OSError as err:  # a table, CSV or plot that cannot be written: the runs' folders stay as they are
            return _unwritten(err, rerun)
        print(text)
        print_written(self.outputs(plan))
        return self.exit_code(plan, results, rerun)


def check_out(out: Path | None) -> None:
    """--out is a folder, or one that can be made: a file in its place or above it, or a folder this process cannot
    write to, is a ConfigError naming --out (before any run, nothing made)."""
    if out is None:
        return
    existing = next(p for p in (out, *out.parents) if p.exists() or p == p.parent)
    if not existing.is_dir():
        where = "is a file" if existing == out else f"lies below the file {existing}"
        raise ConfigError(f"--out {out}: {where}, not a folder; choose a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: {existing} is not writable; choose another folder")


def make_out(out: Path | None) -> None:
    """Make --out (and the folders above it) before the runs; one that cannot be made is a ConfigError naming it."""
    if out is None:
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--out {out}: cannot be made ({err.strerror or err}); choose another folder") from None


def _refused(err: Exception) -> int:
    print(f"error: {err}", file=sys.stderr)
    return 2


def _unwritten(err: OSError, rerun: str) -> int:
    """One line for a study file that could not be written (a full disk), or another OSError after the runs began:
    what, why, and how to continue."""
    what = f"cannot write {err.filename} ({err.strerror or err})" if err.filename else f"{type(err).__name__}: {err}"
    print(f"error: {what}; the runs' folders are kept: make room and rerun to write it: {rerun}", file=sys.stderr)
    return 1
