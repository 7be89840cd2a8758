"""One job as a child process of a study (`--parallel K`): it runs the job, ends with its study, and exits with
the run's status.

    python -m simulation.experiment.child --run-one '<overrides as JSON>' --engine inprocess
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from simulation.experiment.engines import ENGINES, launch
from simulation.experiment.signals import as_interrupted, ignore_signals, mark_interrupted, stop_on_signals
from simulation.launcher.outcome import Interrupted, RunFailed


def end_with_parent() -> None:
    """This child gets SIGTERM when the process that started it ends, even by SIGKILL (Linux's parent-death
    signal), so no run goes on writing after its study has gone."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.experiment.child", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-one", required=True, help="one run's overrides as JSON")
    parser.add_argument("--engine", choices=ENGINES, default="flwr")
    parser.add_argument("--group", default=None, help="experiment tracking group (a sweep's name)")
    args = parser.parse_args(argv)
    end_with_parent()
    overrides = json.loads(args.run_one)
    folder = Path(overrides["out-dir"]) / overrides["run-name"] if "run-name" in overrides else None
    with stop_on_signals():
        try:
            launch(overrides, args.engine, args.group)
            return 0
        except RunFailed as err:
            return err.exit_code
        except (Interrupted, KeyboardInterrupt) as err:
            ignore_signals()
            err = as_interrupted(err)
            mark_interrupted(folder, str(err))
            return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
