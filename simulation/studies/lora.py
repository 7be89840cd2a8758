"""The FAdamET paper's App. C experiment (its Table 2; docs/lora-study/index.md) in shape, on a 2-core CPU: LoRA
adapters on a small randomly initialised GPT-2, fine-tuned in FL for topic classification of Debian's `fortunes`
texts; LocalAdam, FAdamET, FAdamGT and FedAvg, several seeds; rounds to a target accuracy and communication per
client to that target (bytes, from the suite's per-round accounting), mean ± std over seeds, as in Table 2.

    python -m simulation.studies.lora --out docs/lora-study

Every run is a normal results folder <out>/runs/<algorithm>/seed-<s>/ made by the experiment layer (reused when it
completed with the same settings: rerun the same command to continue an interrupted study); then <out>/table.md,
table.csv and accuracy.png are written. Setting (App. C "FedIT" shape): tracking set Y = S, one local epoch,
the three Adam methods share one local lr, FedAvg (local SGD) has its own; override any key with -c.
This is the shape of the paper's experiment, not its numbers.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fedsuite.config.run_config import ConfigError
from simulation.experiment import report
from simulation.experiment.engines import ENGINE_HELP, ENGINES
from simulation.experiment.flags import Repeatable, parse_list
from simulation.experiment.jobs import Job, Outcome, resolved, validate
from simulation.experiment.runner import run_jobs
from simulation.experiment.study import Study
from simulation.launcher.overrides import parse_overrides
from simulation.launcher.preflight import preflight

ALGORITHMS = ("localadam", "fadamet", "fadamgt", "fedavg")
NAMES = {"localadam": "LocalAdam", "fadamet": "FAdamET", "fadamgt": "FAdamGT", "fedavg": "FedAvg"}
SETTING = ("dataset='fedsuite.data.fortunes:topics' model='fedsuite.models.text:gpt2_lora' model-args='{width=64}' "
           "num-clients=20 clients-per-round=5 tracking-clients=5 partition='dirichlet' partition-alpha=0.5 "
           "local-epochs=1 batch-size=16 eval-every=2 device='cpu' client-threads=1")  # fmt: skip
LEARNING_RATES = {"localadam": 0.01, "fadamet": 0.01, "fadamgt": 0.01, "fedavg": 1.0}
LABEL = "the shape of the paper's experiment, not its numbers"
# The paper's orderings in rounds to target (Table 2; FedAvg from Table 1, it is not in Table 2): (faster, slower).
PAPER_ORDERINGS = (("fadamgt", "localadam"), ("fadamgt", "fadamet"), ("fadamet", "localadam"),
                   ("localadam", "fedavg"))  # fmt: skip


def jobs_for(algorithms: list[str], seeds: list[int], shared: dict, out: Path) -> list[Job]:
    """Algorithms × seeds into <out>/runs/<algorithm>/seed-<s>/, each algorithm with its own local lr."""
    return [Job({"lr": LEARNING_RATES[a], **shared, "algorithm": a, "seed": s},
                out / "runs" / a / f"seed-{s}", f"{a} seed {s}", {"algorithm": a, "seed": s})
            for a in algorithms for s in seeds]  # fmt: skip


def to_target(folder: Path, target: float) -> tuple[int | None, float | None]:
    """Rounds to `target` (the summary's) and the bytes one participating client sent and received up to and
    including that round (the rows' accounting, down + up); (None, None) when the run never reached it."""
    rounds = report.read_summary(folder)["rounds_to_target"].get(f"{target:g}")
    if rounds is None:
        return None, None
    rows = [r for r in report.read_rows(folder) if 0 < r["round"] <= rounds]
    return rounds, sum(r.get("bytes_down_per_client", 0.0) + r.get("bytes_up_per_client", 0.0) for r in rows)


def run_row(job: Job, target: float) -> dict:
    """One run in numbers: status, rounds and bytes to target, final/best accuracy, wall time, the curve."""
    status = report.run_status(job.folder)
    if status != "completed":
        return {"status": status}
    summary = report.run_summary(job.folder, [target])
    rounds, sent = to_target(job.folder, target)
    return {**summary, "rounds_to_target": rounds, "bytes_to_target": sent,
            "seconds": report.read_summary(job.folder).get("total_seconds")}  # fmt: skip


def aggregate(jobs: list[Job], target: float) -> list[dict]:
    """Per algorithm: mean ± std over the seeds whose run completed (rounds and bytes over those that reached the
    target, k/n), final and best accuracy, d-vectors per client-round, run seconds, and the curves."""
    runs: dict[str, list[dict]] = {}
    for job in jobs:
        runs.setdefault(job.keys["algorithm"], []).append(run_row(job, target))
    rows = []
    for algorithm, group in runs.items():
        done = [r for r in group if r["status"] == "completed"]
        reached = [r for r in done if r["rounds_to_target"] is not None]
        rows.append({
            "algorithm": algorithm, "target": target, "completed": len(done), "seeds": len(group),
            "reached": len(reached),
            "rounds_to_target": report.mean_std([r["rounds_to_target"] for r in reached]),
            "mb_to_target": report.mean_std([r["bytes_to_target"] / 1e6 for r in reached]),
            "rounds_each": [r["rounds_to_target"] for r in done],
            "final_acc": report.mean_std([r["final_acc"] for r in done]),
            "best_acc": report.mean_std([r["best_acc"] for r in done]),
            "vectors_per_client_round": report.mean_std([r["vectors_per_client_round"] for r in done]),
            "seconds": report.mean_std([r["seconds"] for r in done if r["seconds"] is not None]),
            "seconds_total": sum(r["seconds"] or 0.0 for r in done),
            "curves": [r["curve"] for r in done],
        })  # fmt: skip
    return rows


def orderings(rows: list[dict]) -> list[dict]:
    """The paper's orderings in mean rounds to target: reproduced (True/False), or None when neither side reached
    the target in every completed seed (one that did not counts as slower than one that did); `gap` is the
    difference of the means in rounds and `spread` the larger of the two seeds' stds (None where undefined)."""
    by = {r["algorithm"]: r for r in rows}
    out = []
    for fast, slow in PAPER_ORDERINGS:
        if fast not in by or slow not in by:
            continue

        def stats(name):
            row = by[name]
            # every seed completed and reached the target: a method that failed a seed is not compared on the rest
            full = row["completed"] == row["seeds"] > 0 and row["reached"] == row["completed"]
            return row["rounds_to_target"] if full else (float("inf"), None)

        (a, std_a), (b, std_b) = stats(fast), stats(slow)
        finite = a != float("inf") and b != float("inf")
        out.append({"faster": fast, "slower": slow, "reproduced": None if a == b == float("inf") else a < b,
                    "gap": b - a if finite else None, "spread": max(std_a, std_b) if finite else None})  # fmt: skip
    return out


def verdict(ordering: dict) -> str:
    """'reproduces' / 'does not reproduce' with the gap against the seeds' spread."""
    if ordering["reproduced"] is None:
        return "undecided (neither reached the target in every seed)"
    text = "reproduces" if ordering["reproduced"] else "does not reproduce"
    if ordering["gap"] is None:
        return text + " (one side did not reach the target in every seed)"
    gap, spread = abs(ordering["gap"]), ordering["spread"]
    return text + f" ({gap:.1f} rounds apart, {'within' if gap <= spread else 'beyond'} the seeds' std {spread:.1f})"


def target_section(rows: list[dict], target: float) -> list[str]:
    """The table for one target and the paper's orderings checked on it."""
    head = ["method", "completed", f"rounds to {target:.0%}", "each seed", f"MB per client to {target:.0%}",
            "d-vectors per client-round", "final acc", "best acc", "s per run"]  # fmt: skip
    cells = []
    for r in rows:
        rounds = report.format_mean_std(r["rounds_to_target"], ".1f")
        if r["reached"] < r["completed"]:
            rounds += f" ({r['reached']}/{r['completed']} reached)"
        cells.append([NAMES.get(r["algorithm"], r["algorithm"]), f"{r['completed']}/{r['seeds']}", rounds,
                      " ".join("–" if v is None else str(v) for v in r["rounds_each"]),
                      report.format_mean_std(r["mb_to_target"], ".3f"),
                      report.format_mean_std(r["vectors_per_client_round"], ".2f"),
                      report.format_mean_std(r["final_acc"], ".4f"), report.format_mean_std(r["best_acc"], ".4f"),
                      report.format_mean_std(r["seconds"], ".0f")])  # fmt: skip
    checks = [f"- {NAMES[o['faster']]} faster than {NAMES[o['slower']]}: {verdict(o)}" for o in orderings(rows)]
    return [
        f"### Target {target:.0%}",
        "",
        *report.markdown_table(head, cells),
        "",
        "The paper's orderings in rounds to target (Table 2; FedAvg slowest is Table 1's):",
        "",
        *checks,
        "",
    ]


def markdown(tables: dict[float, list[dict]], command: str, wall_seconds: float) -> str:
    lines = [
        f"**{LABEL.capitalize()}.** Rounds to a target test accuracy and communication per participating client "
        "up to that round (down + up bytes from the per-round accounting), mean ± std over the seeds that reached "
        "it (sample std), as in the FAdamET paper's Table 2.",
        "",
        f"Reproduce: `{command}`",
        "",
        f"Wall time of the runs: {wall_seconds / 60:.1f} min in all.",
        "",
    ]
    for target, rows in tables.items():
        lines += target_section(rows, target)
    return "\n".join(lines)


def write_report(out: Path, tables: dict[float, list[dict]], command: str, wall_seconds: float, title: str) -> str:
    """<out>/table.md, table.csv (one line per method and target) and accuracy.png (mean accuracy per round over
    the seeds, min–max band)."""
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(tables, command, wall_seconds)
    (out / "table.md").write_text(text)

    def part(value, i):
        return None if value is None else round(value[i], 6)

    report.write_csv(out / "table.csv", [{
        "algorithm": r["algorithm"], "target": r["target"], "completed": r["completed"], "seeds": r["seeds"],
        "reached": r["reached"], "rounds_to_target_mean": part(r["rounds_to_target"], 0),
        "rounds_to_target_std": part(r["rounds_to_target"], 1), "mb_to_target_mean": part(r["mb_to_target"], 0),
        "mb_to_target_std": part(r["mb_to_target"], 1), "final_acc_mean": part(r["final_acc"], 0),
        "final_acc_std": part(r["final_acc"], 1), "vectors_per_client_round": part(r["vectors_per_client_round"], 0),
    } for rows in tables.values() for r in rows])  # fmt: skip
    rows = next(iter(tables.values()))
    lines = [report.Line(f"{NAMES.get(r['algorithm'], r['algorithm'])} ({r['completed']} seeds)", r["curves"])
             for r in rows]  # fmt: skip
    report.plot(out / "accuracy.png", [report.Panel(lines, title=f"{title}\n{LABEL}", title_size=9)])
    return text


def numbers(text: str, kind: type, flag: str, allowed: str) -> list:
    """`"0,1,2"` → [0, 1, 2]; anything else is a one-line ConfigError naming the flag and what it allows."""
    try:
        values = [kind(v) for v in text.split(",")]
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: allowed are {allowed}") from None
    for i, value in enumerate(values):
        if value in values[:i]:  # the same run twice into one folder
            raise ConfigError(f"{flag} {text!r}: {value} is given twice; give each once")
    return values


@dataclass
class Plan:
    """The study, checked: its arguments, output folder, algorithms, seeds, targets, shared settings and jobs."""

    args: argparse.Namespace
    out: Path
    algorithms: list[str]
    seeds: list[int]
    targets: list[float]
    shared: dict
    jobs: list[Job]


class LoraStudy(Study):
    module = "simulation.studies.lora"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--out", default="docs/lora-study", type=Path)
        parser.add_argument("--algorithms", action=Repeatable, default=",".join(ALGORITHMS))
        parser.add_argument("--seeds", action=Repeatable, default="0,1,2")
        parser.add_argument("--rounds", type=int, default=60)
        parser.add_argument("--targets", action=Repeatable, default="0.4,0.45", help="comma-separated accuracy targets")
        parser.add_argument("--engine", choices=ENGINES, default="inprocess", help=ENGINE_HELP)
        parser.add_argument("--parallel", type=int, default=1, help="runs at once (separate processes)")
        parser.add_argument("-c", "--run-config", action="append", default=[], help="overrides of the setting")

    def plan(self, args: argparse.Namespace) -> Plan:
        out = args.out.resolve()
        algorithms = parse_list(args.algorithms, "--algorithms")  # each once (ConfigError naming a duplicate)
        unknown = sorted(set(algorithms) - set(NAMES))
        if unknown:
            raise ConfigError(f"--algorithms: {', '.join(unknown)} not in the study; allowed: {', '.join(NAMES)}")
        seeds = numbers(args.seeds, int, "--seeds", "comma-separated integers ≥ 0")
        targets = numbers(args.targets, float, "--targets", "comma-separated accuracies in (0, 1]")
        if any(s < 0 for s in seeds) or not all(0 < t <= 1 for t in targets):
            raise ConfigError(f"--seeds {args.seeds!r} / --targets {args.targets!r}: seeds are integers ≥ 0, "
                              "targets accuracies in (0, 1]")  # fmt: skip
        shared = {**parse_overrides([SETTING]), "num-server-rounds": args.rounds, "targets": args.targets,
                  **parse_overrides(args.run_config)}  # fmt: skip
        jobs = jobs_for(algorithms, seeds, shared, out)
        validate(jobs)  # every setting checked before the first run
        preflight(resolved(jobs[0].settings), quiet=True)
        return Plan(args, out, algorithms, seeds, targets, shared, jobs)

    def outputs(self, plan: Plan) -> list[Path]:
        return [plan.out / name for name in ("table.md", "table.csv", "accuracy.png")]

    def stale(self, plan: Plan) -> list[Path]:
        return []  # the tables of the runs so far stay until new ones replace them

    def run(self, plan: Plan) -> tuple[list[Outcome], float]:
        started = time.monotonic()
        outcomes = run_jobs(plan.jobs, plan.args.engine, plan.args.parallel, reuse=True)
        return outcomes, time.monotonic() - started

    def reproduce(self, plan: Plan) -> str:
        args = plan.args
        return (f"python -m simulation.studies.lora --out {args.out} --algorithms {','.join(plan.algorithms)} "
                f"--seeds {args.seeds} --rounds {args.rounds} --targets {args.targets} --engine {args.engine}"
                + "".join(f' -c "{c}"' for c in args.run_config))  # fmt: skip

    def report(self, plan: Plan, results: tuple[list[Outcome], float]) -> str:
        tables = {t: aggregate(plan.jobs, t) for t in plan.targets}
        wall = sum(r["seconds_total"] for r in tables[plan.targets[0]]) or results[1]
        title = f"GPT-2 + LoRA on fortunes topics, {plan.shared['num-clients']} clients, {len(plan.seeds)} seed(s)"
        return write_report(plan.out, tables, self.reproduce(plan), wall, title)

    def exit_code(self, plan: Plan, results: tuple[list[Outcome], float], rerun: str) -> int:
        return 0 if all(o.completed for o in results[0]) else 1


main = LoraStudy(__doc__).main


if __name__ == "__main__":
    sys.exit(main())
