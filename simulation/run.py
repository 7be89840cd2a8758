"""Run one experiment through `flwr run` (Ray simulation), stop it when told, and say truthfully how it ended.

    python -m simulation.run -c "algorithm='fedprox' prox-mu=0.01 num-server-rounds=20"

What it adds to a bare `flwr run . --stream`:
- the run config is validated first, the results folder and any client-state folder are checked writable,
  and the dataset is decoded and partitioned once (preflight), so a bad key, a corrupt file, an unwritable
  folder or an infeasible partition stop in seconds with exit code 2, not after Ray's cold start;
- the results folder is claimed before anything starts: an existing run is never overwritten unless
  `overwrite=true`, and default names are unique per launch;
- the federation is sized for parallelism, not for N: as many SuperNodes as client workers fit the machine
  (CPU cores / --cpus-per-client, or GPU shares), each training whichever partitions the server names
  (client-mapping='logical'); with client-mapping='fixed' one SuperNode per client;
- every process of the launch (the local SuperLink, SuperExec, `flwr-simulation`, Ray) carries a token in its
  environment and gets a private FLWR_HOME and ports, so Ctrl-C or SIGTERM stops all of them within seconds,
  the end of the run stops the SuperLink, and a reaper process does the same if this command is killed;
- the exit code is the run's status from summary.json (`flwr run --stream` exits 0 on a failed run):
  0 completed, 1 failed, 3 diverged, 130/143 interrupted (SIGINT/SIGTERM), 2 bad input;
- Flower's output goes to the console and to `flwr.log` in the results folder (over-long lines are cut on the
  console only); Flower's telemetry, update check and runtime dependency installation are switched off.
Prints the results folder as its last line.
"""

from __future__ import annotations

import argparse
import sys

from fedsuite.config.run_config import ConfigError
from fedsuite.results.folder import read_closing_line
from simulation.launcher.launch import checked_config, run
from simulation.launcher.outcome import Interrupted, RunFailed, ended_before_the_signal
from simulation.launcher.overrides import parse_overrides
from simulation.launcher.preflight import preflight
from simulation.launcher.resume import print_resume_hint


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m simulation.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("-c", "--run-config", action="append", default=[], help="key=value overrides (TOML values)")
    parser.add_argument("--cpus-per-client", type=float, default=1.0, help="Ray CPUs per virtual client")
    parser.add_argument("--gpus-per-client", type=float, default=None, help="GPU share per client (0.25 if CUDA)")
    parser.add_argument(
        "--supernodes",
        type=int,
        default=None,
        help="simulated SuperNodes (default: as many as client workers run at once)",
    )
    parser.add_argument("--check", action="store_true", help="only validate the run config, folders, data, partition")
    parser.add_argument("--no-preflight", action="store_true", help="skip loading data/partition before the run")
    return parser


def check_only(overrides: dict) -> int:
    """`--check`: the run config, folders, data and partition (and a resumed run's checkpoint), nothing started."""
    cfg, _ = checked_config(overrides)
    preflight(cfg)
    print("run config, folders, data and partition OK" + (", checkpoint whole" if cfg["resume-from"] else ""))
    return 0


def unfinished(err: RunFailed | Interrupted) -> int:
    """Say how a run that did not complete ended, where its results are and how to resume it; its exit code."""
    if isinstance(err, Interrupted) and (status := ended_before_the_signal(err)) is not None:
        print(f"\nthe signal ({err}) came after the run had ended {status}; every process of it was stopped",
              file=sys.stderr)  # fmt: skip
        print(read_closing_line(err.folder))
        return 0
    if isinstance(err, Interrupted):
        print(f"\ninterrupted ({err}); every process of the run was stopped", file=sys.stderr)
    else:
        print(f"error: {err}", file=sys.stderr)
    if err.folder is not None:
        print(f"results so far: {err.folder}", file=sys.stderr)
    print_resume_hint(err.folder)
    return err.exit_code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        overrides = parse_overrides(args.run_config)
        if args.check:
            return check_only(overrides)
        folder = run(
            overrides,
            args.cpus_per_client,
            args.gpus_per_client,
            check_data=not args.no_preflight,
            supernodes=args.supernodes,
        )
    except (ConfigError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (RunFailed, Interrupted) as err:
        return unfinished(err)
    except KeyboardInterrupt:  # before the run started
        print("\ninterrupted before the run started", file=sys.stderr)
        return 130
    print(read_closing_line(folder))  # status, accuracy, rounds, lost replies, the results folder
    return 0


if __name__ == "__main__":
    sys.exit(main())
