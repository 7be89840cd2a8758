"""Algorithms × seeds × a small grid, in one results folder, with mean ± std over seeds.

    python -m simulation.sweep --algorithms fedavg,scaffold --seeds 0,1,2 --grid "lr=0.01,0.05" \\
        -c "num-server-rounds=150 partition-alpha=0.1" --out docs/sweep --engine inprocess --parallel 2

Every run goes to <out>/runs/<algorithm>/<grid point>/seed-<s>/ (a normal results folder). The sweep is resumable:
a run that completed (or diverged) with the same settings is reused, an unfinished one is redone. Runs go through
the Ray simulation (`--engine flwr`, as `simulation.run`) or the same strategy and clients in one process
(`--engine inprocess`); `--parallel K` runs K of them at once as separate processes (for spare cores or a GPU).
Then <out>/sweep.md and sweep.csv (per algorithm and grid point: final and best accuracy, rounds and MB to each
target, s/round, communication per client per round, each as the mean over seeds with its 95 % interval), the
paired differences against --baseline (fedavg by default, when it runs) in sweep.md and sweep-paired.csv, and
<out>/sweep.png (accuracy vs round, the mean with its 95 % interval over seeds) are written
(docs/running/compare-and-sweep.md). Exit 1 if a run did not complete (the others still run).
With `-c "tensorboard=true"` / `-c "wandb-mode='offline'"` the runs are tracked as one group: `tensorboard --logdir
<out>` shows them all, and their W&B runs carry the group <out>'s name.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fedsuite.config.run_config import ALGORITHMS, ConfigError
from fedsuite.config.tuned import Tuned, with_tuned
from fedsuite.config.tuned import read as read_tuned
from fedsuite.results.folder import FINISHED
from simulation.experiment import paired, report
from simulation.experiment.client_state import check_folders, own_folder
from simulation.experiment.engines import ENGINES
from simulation.experiment.flags import Repeatable, grid_tag, parse_grid, parse_list, refuse_study_keys
from simulation.experiment.fresh_runs import refuse_resume
from simulation.experiment.intervals import Interval, format_interval
from simulation.experiment.jobs import SETTLED, Job, resolved, reusable, validate
from simulation.experiment.runner import run_jobs
from simulation.experiment.study import Study
from simulation.launcher.overrides import parse_overrides
from simulation.launcher.preflight import preflight

if TYPE_CHECKING:
    from fedsuite.config.run_config import Config
    from simulation.experiment.jobs import Outcome

METRICS = ("final_acc", "best_acc", "s_per_round", "mb_per_client_round")
# sweep.csv's columns per target after the means and the metrics' interval bounds ({t}: the target, e.g. 0.8)
TARGET_COLUMNS = ("rounds_to_{t}_ci_low", "rounds_to_{t}_ci_high", "reached_{t}", "mb_to_{t}_mean", "mb_to_{t}_ci_low",
                  "mb_to_{t}_ci_high")  # fmt: skip


def jobs_for(algorithms: list[str], points: list, seeds: list[int], shared: dict, out: Path,
             tuned: Tuned | None = None, group: str | None = None,
             state_base: Path | None = None) -> list[Job]:  # fmt: skip
    """Algorithms × grid points × seeds, each into <out>/runs/<algorithm>/<grid point>/seed-<s>/, tracked in
    `group`, by default named after <out> (TensorBoard: `tensorboard --logdir <out>` shows every run; W&B: the
    runs' group). `tuned`: each algorithm's values from simulation.tune (the shared -c keys win). A configured
    client-state-dir becomes each run's own subfolder, its results folder relative to `state_base` (default <out>;
    simulation/experiment/client_state.py)."""

    def settings(a: str) -> dict:
        return shared if tuned is None else with_tuned(shared, tuned, a)

    def job(a: str, point: tuple, s: int) -> Job:
        folder = out / "runs" / a / grid_tag(point) / f"seed-{s}"
        chosen = own_folder({**settings(a), **dict(point), "algorithm": a, "seed": s}, folder, state_base or out)
        return Job(chosen, folder, f"{a} {grid_tag(point)} seed {s}", {"algorithm": a, "grid": grid_tag(point),
                   "seed": s}, group=group or out.name)  # fmt: skip

    return [job(a, point, s) for a, point, s in itertools.product(algorithms, points, seeds)]


def aggregate(jobs: list[Job], targets: list[float]) -> list[dict]:
    """One row per (algorithm, grid point): mean ± std and 95 % intervals over the seeds whose run completed (k/n),
    the completed runs kept by seed for the paired differences."""
    groups: dict[tuple, list[dict]] = {}
    for job in jobs:
        status = report.run_status(job.folder)
        try:
            run = report.run_summary(job.folder, targets) if status in FINISHED else {"status": status}
        except report.DamagedRun as err:  # counted as a seed that did not complete, and named
            print(f"   {job.label}: {err}", file=sys.stderr, flush=True)
            run = {"status": "damaged"}
        run["seed"] = job.keys["seed"]
        groups.setdefault((job.keys["algorithm"], job.keys["grid"]), []).append(run)
    return [{"algorithm": algorithm, "grid": tag, **report.over_seeds(runs, targets, METRICS)}
            for (algorithm, tag), runs in groups.items()]  # fmt: skip


def _to_target(value: Interval | None, spec: str, completed: int) -> str:
    """A to-target cell: the mean with its interval over the k seeds that reached the target (the value alone for
    one), and k/n."""
    if value is None:
        return "–"
    return f"{format_interval(value, spec) if value.n > 1 else format(value.mean, spec)} ({value.n}/{completed})"


def markdown(rows: list[dict], targets: list[float], command: str, baseline: str | None = None) -> str:
    """sweep.md: the means with their 95 % intervals, MB to each target, and (with a baseline) the paired
    differences against it; where a completed seed learned nothing, a last column counts such seeds per row."""
    learned_nothing = any(r["no_better_than_initial"] for r in rows)
    head = ["algorithm", "grid", "seeds", "final acc", "best acc", *(f"rounds to {t:g}" for t in targets),
            "s/round", "MB/client/round", *([report.NO_BETTER] if learned_nothing else [])]  # fmt: skip
    cells, to_target = [], []
    for r in rows:
        ci = r["intervals"]
        accuracy = [format_interval(ci[k], ".4f") for k in ("final_acc", "best_acc")]
        completed = int(r["seeds"].split("/")[0])
        rounds = [_to_target(ci[f"rounds_to_{t:g}"], ".1f", completed) for t in targets]
        costs = [format_interval(ci[k], ".2f") for k in ("s_per_round", "mb_per_client_round")]
        nothing = [f"{r['no_better_than_initial']}/{completed}"] if learned_nothing else []
        cells.append([r["algorithm"], r["grid"], r["seeds"], *accuracy, *rounds, *costs, *nothing])
        to_target.append([r["algorithm"], r["grid"], *(_to_target(ci[f"mb_to_{t:g}"], ".3g", completed)
                                                       for t in targets)])  # fmt: skip
    lines = [f"Reproduce: `{command}`", "",
             "Mean over the seeds that completed, with its 95 % interval [low, high] (Student's t over the seeds; "
             "(n = 1): one seed, no interval); rounds to a target over the seeds that reached it (k/n).", "",
             *report.markdown_table(head, cells)]  # fmt: skip
    if learned_nothing:
        lines += ["", report.NO_BETTER_NOTE]
    if targets:
        head = ["algorithm", "grid", *(f"MB to {t:g}" for t in targets)]
        lines += ["", "MB one participating client sent and received until it reached each target (down + up), "
                  "over the seeds that reached it (k/n):", "", *report.markdown_table(head, to_target)]  # fmt: skip
    differences = paired.paired_rows(rows, targets, baseline) if baseline else []
    if differences:
        lines += ["", *paired.markdown(differences, targets, baseline)]
    return "\n".join(lines) + "\n"


def csv_rows(rows: list[dict], targets: list[float]) -> tuple[list[dict], list[str]]:
    """sweep.csv: means and stds as numbers (empty where no seed completed), then the 95 % interval bounds (empty
    with one seed), how many seeds reached each target and the MB to it, and how many completed seeds learned
    nothing (no_better_than_initial)."""

    def part(value, i):
        return None if value is None else value[i]

    def bounds(key: str, ci) -> dict:
        return {f"{key}_ci_low": ci and ci.low, f"{key}_ci_high": ci and ci.high}

    fields = ["algorithm", "grid", "seeds", "final_acc_mean", "final_acc_std", "best_acc_mean", "best_acc_std",
              "s_per_round_mean", "mb_per_client_round_mean", *(f"rounds_to_{t:g}_mean" for t in targets),
              *(f"{k}_ci_{side}" for k in METRICS for side in ("low", "high")),
              *(f.format(t=f"{t:g}") for t in targets for f in TARGET_COLUMNS), "no_better_than_initial"]  # fmt: skip
    out = []
    for r in rows:
        ci = r["intervals"]
        line = {"algorithm": r["algorithm"], "grid": r["grid"], "seeds": r["seeds"],
                "no_better_than_initial": r["no_better_than_initial"],
                "final_acc_mean": part(r["final_acc"], 0), "final_acc_std": part(r["final_acc"], 1),
                "best_acc_mean": part(r["best_acc"], 0), "best_acc_std": part(r["best_acc"], 1),
                "s_per_round_mean": part(r["s_per_round"], 0),
                "mb_per_client_round_mean": part(r["mb_per_client_round"], 0),
                **{f"rounds_to_{t:g}_mean": part(r[f"rounds_to_{t:g}"][0], 0) for t in targets}}  # fmt: skip
        for key in METRICS:
            line |= bounds(key, ci[key])
        for t in targets:
            sent = ci[f"mb_to_{t:g}"]
            line |= {**bounds(f"rounds_to_{t:g}", ci[f"rounds_to_{t:g}"]), f"reached_{t:g}": r[f"rounds_to_{t:g}"][1],
                     f"mb_to_{t:g}_mean": sent and sent.mean, **bounds(f"mb_to_{t:g}", sent)}  # fmt: skip
        out.append(line)
    return out, fields


def outputs(out: Path) -> list[Path]:
    """The files a sweep writes in <out> (besides the runs)."""
    return [out / "sweep.md", out / "sweep.csv", out / "sweep-paired.csv", out / "sweep.png"]


def write_report(out: Path, rows: list[dict], targets: list[float], command: str, title: str,
                 baseline: str | None = None) -> str:  # fmt: skip
    """<out>/sweep.md, sweep.csv, sweep-paired.csv (with a baseline: `baseline`, else fedavg when it is among the
    rows) and sweep.png (the mean accuracy over seeds with its 95 % interval)."""
    baseline = baseline or paired.choose_baseline([r["algorithm"] for r in rows], None)
    text = markdown(rows, targets, command, baseline)
    report.write_text(out / "sweep.md", text)
    report.write_csv(out / "sweep.csv", *csv_rows(rows, targets))
    differences = paired.paired_rows(rows, targets, baseline) if baseline else []
    if differences:
        report.write_csv(out / "sweep-paired.csv", *paired.csv_rows(differences, targets, baseline))
    lines = [report.Line(r["algorithm"] + ("" if r["grid"] == "default" else f" {r['grid']}")
                         + f" ({sum(1 for c in r['curves'] if c)} seeds)", r["curves"], band="interval")
             for r in rows]  # fmt: skip
    report.plot(out / "sweep.png", [report.Panel(lines, title=title, legend_size=7)])
    return text


@dataclass
class Plan:
    """A sweep, checked: its arguments, output folder, algorithms, jobs and the shared settings' config."""

    args: argparse.Namespace
    out: Path
    algorithms: list[str]
    jobs: list[Job]
    cfg: Config


class Sweep(Study):
    module = "simulation.sweep"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--algorithms", action=Repeatable,
                            help=f"comma-separated, from: {', '.join(ALGORITHMS)}")  # fmt: skip
        parser.add_argument("--seeds", default="0,1,2", action=Repeatable, help="comma-separated run seeds")
        parser.add_argument("--grid", default="", action=Repeatable, separator=" ",
                            help='e.g. "lr=0.01,0.05 local-epochs=2,5" (cartesian product)')  # fmt: skip
        parser.add_argument("-c", "--run-config", action="append", default=[], help="shared key=value overrides")
        parser.add_argument("--out", default="results/sweep")
        parser.add_argument("--engine", choices=ENGINES, default="flwr")
        parser.add_argument("--parallel", type=int, default=1, help="runs at once (separate processes)")
        parser.add_argument("--title", default="")
        parser.add_argument("--baseline", help="the algorithm the others are compared with, seed by seed (default: "
                            "fedavg when it is among --algorithms)")  # fmt: skip
        parser.add_argument("--tuned", default="", help="tuned.toml from simulation.tune: each algorithm's chosen "
                            "values (-c keys win)")  # fmt: skip

    def plan(self, args: argparse.Namespace) -> Plan:
        out = Path(args.out).resolve()
        if not args.algorithms:
            raise ConfigError("--algorithms: give at least one")
        algorithms = parse_list(args.algorithms, "--algorithms")
        seeds = parse_list(args.seeds, "--seeds", int)
        paired.choose_baseline(algorithms, args.baseline)  # a --baseline not among them: exit 2 before any run
        if args.parallel < 1:
            raise ConfigError(f"--parallel {args.parallel}: give at least 1")
        shared = parse_overrides(args.run_config)
        points = parse_grid(args.grid)
        grid_keys = [key for key, _ in points[0]]
        refuse_resume([*shared, *grid_keys], "simulation.sweep", "")
        refuse_study_keys(shared, "-c", "simulation.sweep")
        refuse_study_keys(grid_keys, "--grid", "simulation.sweep")
        tuned = read_tuned(args.tuned) if args.tuned else None
        jobs = jobs_for(algorithms, points, seeds, shared, out, tuned)
        validate(jobs)  # every setting checked before any run
        check_folders(jobs)  # no run's client-state folder holds another run's state
        cfg = resolved(shared)
        preflight(cfg)
        return Plan(args, out, algorithms, jobs, cfg)

    def announce(self, plan: Plan) -> None:
        reused = sum(1 for job in plan.jobs if reusable(job))
        print(f"sweep: {len(plan.jobs)} runs, {reused} ended earlier (completed or diverged) and reused", flush=True)

    def outputs(self, plan: Plan) -> list[Path]:
        return outputs(plan.out)

    def run(self, plan: Plan) -> list[Outcome]:
        return run_jobs(plan.jobs, plan.args.engine, plan.args.parallel, reuse=True)

    def reproduce(self, plan: Plan) -> str:
        args = plan.args
        return (f"python -m simulation.sweep --algorithms {','.join(plan.algorithms)} --seeds {args.seeds}"
                + (f' --grid "{args.grid}"' if args.grid else "") + "".join(f' -c "{c}"' for c in args.run_config)
                + (f" --tuned {args.tuned}" if args.tuned else "")
                + (f" --baseline {args.baseline}" if args.baseline else "")
                + f" --engine {args.engine} --out {args.out}")  # fmt: skip

    def report(self, plan: Plan, outcomes: list[Outcome]) -> str:
        cfg = plan.cfg
        title = plan.args.title or f"{cfg['dataset']}, {cfg['num-clients']} clients"
        rows = aggregate(plan.jobs, cfg.targets)
        baseline = paired.choose_baseline(plan.algorithms, plan.args.baseline)
        return write_report(plan.out, rows, cfg.targets, self.reproduce(plan), title, baseline)

    def exit_code(self, plan: Plan, outcomes: list[Outcome], rerun: str) -> int:
        if any(o.status not in SETTLED for o in outcomes):  # a diverged run is reused as it is
            print(f"rerun to try the failed runs again: {rerun}", file=sys.stderr)
        return 0 if all(o.completed for o in outcomes) else 1


main = Sweep(__doc__).main


if __name__ == "__main__":
    sys.exit(main())
