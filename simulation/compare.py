"""Run several algorithms on one setting (same data, partition, seed and cohorts) and write a comparison.

    python -m simulation.compare --algorithms fedavg,scaffold,fedspeed -c "num-server-rounds=30" --out docs/comparison

Each algorithm is a real `flwr run` (through simulation.run; `--engine inprocess`: the same strategy and clients
in one process, no Ray) into <out>/runs/<algorithm>/; then
<out>/comparison.md (table), comparison.csv and comparison.png (accuracy vs round, all algorithms) are written.
A failed run is reported in the table and makes the command exit 1 after the others have run.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fedsuite.config.run_config import ALGORITHMS, ConfigError
from fedsuite.config.tuned import Tuned, with_tuned
from fedsuite.config.tuned import read as read_tuned
from fedsuite.results.folder import FINISHED
from simulation.experiment import report
from simulation.experiment.client_state import check_folders, own_folder
from simulation.experiment.engines import ENGINE_HELP, ENGINES
from simulation.experiment.flags import SET_BY_STUDY, Repeatable, parse_list, refuse_study_keys
from simulation.experiment.fresh_runs import refuse_resume
from simulation.experiment.jobs import Job, Outcome, described, resolved, validate
from simulation.experiment.runner import run_jobs
from simulation.experiment.study import Study
from simulation.launcher.overrides import parse_overrides
from simulation.launcher.preflight import preflight

if TYPE_CHECKING:
    from fedsuite.config.run_config import Config

# the keys a comparison sets for every run (the seed is the -c one, the same for every algorithm)
COMPARE_SETS = {key: flag for key, flag in SET_BY_STUDY.items() if key != "seed"}
# comparison.csv's columns; rounds_to stands for one column rounds_to_<t> per target
COLUMNS = ("algorithm", "final_acc", "best_acc", "final_rel_err", "rounds_to", "s_per_round",
           "client_compute_s_per_round", "vectors_per_client_round", "mb_per_client_round", "status",
           "final_fed_acc", "final_fed_worst10", "no_better_than_initial")  # fmt: skip


def jobs_for(algorithms: list[str], shared: dict, out: Path, tuned: Tuned | None = None) -> list[Job]:
    """One run per algorithm into <out>/runs/<algorithm>/, every other setting shared (a configured client-state-dir
    becomes each run's own subfolder, runs/<algorithm>); `tuned`: each algorithm's values from simulation.tune (the
    shared -c keys win)."""

    def job(a: str) -> Job:
        folder = out / "runs" / a
        settings = {**(shared if tuned is None else with_tuned(shared, tuned, a)), "algorithm": a}
        return Job(own_folder(settings, folder, out), folder, a, {"algorithm": a})

    return [job(a) for a in algorithms]


def result(outcome: Outcome, targets: list[float]) -> dict:
    """The table's row of one run: its summary, or its status and why it did not complete."""
    algorithm = outcome.job.keys["algorithm"]
    if not outcome.completed:
        return {"algorithm": algorithm, "status": f"{outcome.status}: {outcome.message}"}
    try:
        return {"algorithm": algorithm, **report.run_summary(outcome.job.folder, targets)}
    except report.DamagedRun as err:  # the table names it instead of its numbers
        return {"algorithm": algorithm, "status": f"damaged: {err}"}


def markdown(results: list[dict], targets: list[float], command: str) -> str:
    base = next((r for r in results if r["algorithm"] == "fedavg" and r.get("client_compute_s_per_round")), None)
    with_error = any(r.get("final_rel_err") is not None for r in results)
    federated = any(r.get("final_fed_acc") is not None for r in results)
    learned_nothing = any(r.get("no_better_than_initial") for r in results)  # a last column says which
    head = ["algorithm", "final acc", "best acc", *(["final fed acc", "fed worst 10 %"] if federated else []),
            *(["final ‖x−x*‖/‖x*‖"] if with_error else []),
            *[f"rounds to {t:g}" for t in targets], "s/round",
            "client compute s/round", "× FedAvg compute", "vectors/client/round", "MB/client/round",
            *([report.NO_BETTER] if learned_nothing else [])]  # fmt: skip
    lines = [f"Reproduce: `{command}`", "", *report.markdown_table(head, [])]
    for r in results:
        if r["status"] not in FINISHED:
            lines.append(f"| {r['algorithm']} | {r['status']} |" + " |" * (len(head) - 2))
            continue
        compute = r["client_compute_s_per_round"]
        ratio = compute / base["client_compute_s_per_round"] if base and compute is not None else None
        cells = [r["algorithm"], report.fmt(r["final_acc"], ".4f"), report.fmt(r["best_acc"], ".4f"),
                 *([report.fmt(r.get("final_fed_acc"), ".4f"), report.fmt(r.get("final_fed_worst10"), ".4f")]
                   if federated else []),
                 *([report.fmt(r["final_rel_err"], ".3e")] if with_error else []),
                 *[str(r["rounds_to"][f"{t:g}"] or "–") for t in targets], report.fmt(r["s_per_round"], ".2f"),
                 report.fmt(compute, ".2f"), f"{ratio:.2f}" if ratio else "–",
                 f"{r['vectors_per_client_round']:.1f}", f"{r['mb_per_client_round']:.2f}",
                 *(["yes" if r["no_better_than_initial"] else "no"] if learned_nothing else [])]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    if learned_nothing:
        lines += ["", report.NO_BETTER_NOTE]
    return "\n".join(lines) + "\n"


def csv_rows(results: list[dict], targets: list[float]) -> tuple[list[dict], list[str]]:
    """comparison.csv: the table's numbers, rounds to each target in a column of its own (`rounds_to_0.8`, empty
    where the run never reached it), as in sweep.csv."""
    columns = [f"rounds_to_{t:g}" for t in targets]
    fields = [c for name in COLUMNS for c in (columns if name == "rounds_to" else [name])]
    rows = [{**r, **{f"rounds_to_{t:g}": (r.get("rounds_to") or {}).get(f"{t:g}") for t in targets}}
            for r in results]  # fmt: skip
    return rows, fields


def outputs(out: Path) -> list[Path]:
    """The files a comparison writes in <out> (besides the runs)."""
    return [out / "comparison.md", out / "comparison.csv", out / "comparison.png"]


def write_report(out: Path, results: list[dict], targets: list[float], command: str, title: str) -> str:
    """<out>/comparison.md, comparison.csv and comparison.png; returns the markdown."""
    text = markdown(results, targets, command)
    report.write_text(out / "comparison.md", text)
    report.write_csv(out / "comparison.csv", *csv_rows(results, targets))
    error = any(r.get("curve_is_error") for r in results)
    lines = [report.Line(r["algorithm"], [r["curve"]]) for r in results if r.get("curve")]
    panel = report.Panel(lines, ylabel="‖x − x*‖ / ‖x*‖" if error else "test accuracy",
                         yscale="log" if error else "linear", title=title)  # fmt: skip
    report.plot(out / "comparison.png", [panel])
    return text


def print_result(r: dict) -> None:
    if r["status"] not in FINISHED:
        return
    quality = f"acc {report.fmt(r['final_acc'], '.4f')}" + (
        f", ‖x−x*‖/‖x*‖ {r['final_rel_err']:.3e}" if r["final_rel_err"] is not None else ""
    )
    if r.get("final_fed_acc") is not None:
        quality += f", fed acc {r['final_fed_acc']:.4f} (worst 10 % {report.fmt(r.get('final_fed_worst10'), '.4f')})"
    learned = f", {report.NO_BETTER} model" if r.get("no_better_than_initial") else ""
    print(f"   final {quality}, {report.fmt(r['s_per_round'], '.2f')} s/round{learned}", flush=True)


def compare(jobs: list[Job], targets: list[float], engine: str, reuse: bool) -> list[dict]:
    """Run the jobs (Interrupted stops them) and return the table's rows, printing each as it ends."""
    results: list[dict] = []

    def done(outcome: Outcome) -> None:
        results.append(result(outcome, targets))
        print_result(results[-1])

    run_jobs(jobs, engine, reuse=reuse, on_done=done)
    return results


@dataclass
class Plan:
    """A comparison, checked: its arguments, output folder, algorithms, shared -c keys, jobs and their config."""

    args: argparse.Namespace
    out: Path
    algorithms: list[str]
    shared: dict
    jobs: list[Job]
    cfg: Config


class Comparison(Study):
    module = "simulation.compare"
    bad_input = (ConfigError, FileNotFoundError, ValueError)  # a -c key, --tuned file or the data: exit 2, no run

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--algorithms", required=True, action=Repeatable,
                            help=f"comma-separated, from: {', '.join(ALGORITHMS)}")  # fmt: skip
        parser.add_argument("-c", "--run-config", action="append", default=[], help="shared key=value overrides")
        parser.add_argument("--out", default="results/compare", help="output folder")
        parser.add_argument("--title", default="", help="plot title")
        parser.add_argument("--tuned", default="", help="tuned.toml from simulation.tune: each algorithm's chosen "
                            "values (-c keys win)")  # fmt: skip
        parser.add_argument("--engine", choices=ENGINES, default="flwr", help=ENGINE_HELP)
        parser.add_argument("--skip-finished", action="store_true",
                            help="reuse runs in --out that completed (or diverged) with the same settings")  # fmt: skip

    def rerun_argv(self, argv: list[str]) -> list[str]:
        """The rerun reuses what completed before the stop, and runs the rest."""
        return argv + ([] if "--skip-finished" in argv else ["--skip-finished"])

    def plan(self, args: argparse.Namespace) -> Plan:
        out = Path(args.out).resolve()
        algorithms = parse_list(args.algorithms, "--algorithms")
        shared = parse_overrides(args.run_config)
        refuse_resume(shared, "simulation.compare", " with --skip-finished")
        refuse_study_keys(shared, "-c", "simulation.compare", COMPARE_SETS)
        jobs = jobs_for(algorithms, shared, out, read_tuned(args.tuned) if args.tuned else None)
        validate(jobs)  # every setting is checked before the first run starts
        check_folders(jobs)  # no run's client-state folder holds another run's state
        cfg = resolved(shared)
        print(described(cfg, shared), flush=True)
        preflight(cfg)
        return Plan(args, out, algorithms, shared, jobs, cfg)

    def outputs(self, plan: Plan) -> list[Path]:
        return outputs(plan.out)

    def run(self, plan: Plan) -> list[dict]:
        return compare(plan.jobs, plan.cfg.targets, plan.args.engine, plan.args.skip_finished)

    def reproduce(self, plan: Plan) -> str:
        args = plan.args
        command = "python -m simulation.compare --algorithms " + ",".join(plan.algorithms)
        command += " --engine inprocess" if args.engine == "inprocess" else ""
        command += "".join(f' -c "{c}"' for c in args.run_config) + (f" --tuned {args.tuned}" if args.tuned else "")
        return command + f" --out {args.out}"

    def report(self, plan: Plan, results: list[dict]) -> str:
        title = plan.args.title or f"{plan.cfg['dataset']}, {plan.cfg['num-clients']} clients"
        return write_report(plan.out, results, plan.cfg.targets, self.reproduce(plan), title)

    def exit_code(self, plan: Plan, results: list[dict], rerun: str) -> int:
        return 0 if all(r["status"] in FINISHED for r in results) else 1


main = Comparison(__doc__).main


if __name__ == "__main__":
    sys.exit(main())
