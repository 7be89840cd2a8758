"""The LoSAC paper's Table II protocol (docs/losac/index.md): LoSAC vs SCAFFOLD vs FedAvg vs FedSaga on a
sort-by-label federation, for every (M, T) of a grid, in the paper's form: rounds to the target accuracy, loss and
accuracy at the last round, and LoSAC's speed-up over SCAFFOLD with the same M and T.

    python -m simulation.studies.losac_table2 --out docs/losac --blocks 2,5 --steps 2,6 --rounds 200 --engine inprocess

Each (M, T) is one `simulation.compare` into <out>/M<M>-T<T>/ (same data, blocks, cohorts for every algorithm;
runs that completed with the same settings are reused); then <out>/table2.md and table2.csv are written.
Several seeds: one such folder per seed (`-c "seed=<s>"`), then

    python -m simulation.studies.losac_table2 --combine docs/losac docs/losac-seeds/seed2 … --out docs/losac-seeds

writes <out>/seeds.md and seeds.csv: mean ± std over the folders of each cell (rounds to target over the seeds
that reached it, with how many did; the speed-up over SCAFFOLD is taken per seed, then averaged).
Setting (docs/algorithms/losac.md, docs/reference/papers.md): N = 100, S = 10, 2NN, partition='shards' (stable sort
by label, N equal contiguous shards), every local step on one of the M fixed blocks (`local-batches='blocks'` for the
baselines too), sum-reduced block loss with the paper's η = 1e-4, no weight decay; override any of it with -c.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

from fedsuite.config.run_config import ConfigError
from simulation import compare
from simulation.experiment import report
from simulation.experiment.engines import ENGINES
from simulation.experiment.flags import Repeatable, parse_list
from simulation.experiment.jobs import Job, described, resolved, validate
from simulation.experiment.progress import print_written
from simulation.experiment.study import Study
from simulation.launcher.overrides import parse_overrides
from simulation.launcher.preflight import preflight

SETTING = ("dataset='mnist' model='2nn' partition='shards' num-clients=100 clients-per-round=10 "
           "local-batches='blocks' loss-reduction='sum' lr=0.0001 weight-decay=0.0 eval-every=2")  # fmt: skip


def toml_pairs(values: dict) -> str:
    """{key: value} → `key=value …` with TOML values, as `-c` takes them."""

    def value(v):
        return ("true" if v else "false") if isinstance(v, bool) else repr(v) if isinstance(v, str) else str(v)

    return " ".join(f"{k}={value(v)}" for k, v in values.items())


def cell_keys(blocks: int, steps: int, rounds: int, target: float) -> dict:
    """The run-config keys one (M, T) cell sets."""
    return {"losac-blocks": blocks, "local-steps": steps, "num-server-rounds": rounds, "targets": f"{target:g}"}


def rows_for(jobs: list[Job], blocks: int, steps: int, target: float) -> list[dict]:
    """The paper's row of every run of one cell that left a summary (a failed or diverged run with its status)."""
    rows = []
    for job in jobs:
        if not (job.folder / "summary.json").is_file():
            continue
        summary = report.read_summary(job.folder)
        rows.append({
            "algorithm": job.keys["algorithm"], "M": blocks, "T": steps, "status": summary["status"],
            "rounds": summary["rounds_completed"],
            "rounds_to_target": summary["rounds_to_target"].get(f"{target:g}"),
            "final_loss": summary["final_loss"], "final_accuracy": summary["final_accuracy"],
        })  # fmt: skip
    scaffold = next((r for r in rows if r["algorithm"] == "scaffold"), None)
    for row in rows:
        fast, slow = row["rounds_to_target"], scaffold and scaffold["rounds_to_target"]
        row["speedup_vs_scaffold"] = round(slow / fast, 2) if fast and slow else None
    return rows


def markdown(rows: list[dict], target: float, command: str) -> str:
    lines = [
        f"Rounds to {target:.0%} (speed-up over SCAFFOLD with the same M, T) / test loss / test accuracy at the "
        "last round, as in the LoSAC paper's Table II.",
        "",
        f"Reproduce: `{command}`",
        "",
        "| method | M | T | rounds to target (× SCAFFOLD) | loss | accuracy | rounds | status |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        reached = "–" if r["rounds_to_target"] is None else str(r["rounds_to_target"])
        if r["speedup_vs_scaffold"] is not None and r["algorithm"] != "scaffold":
            reached += f" ({r['speedup_vs_scaffold']:.2f}×)"
        lines.append(f"| {r['algorithm']} | {r['M']} | {r['T']} | {reached} | {report.fmt(r['final_loss'], '.4f')} | "
                     f"{report.fmt(r['final_accuracy'], '.4f')} | {r['rounds']} | {r['status']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def combine(folders: list[Path], target: float) -> tuple[list[dict], str]:
    """Rows of every folder's table2.csv (one seed each) → one row per (algorithm, M, T) with mean ± std (sample
    std) over the seeds whose run completed (a failed or diverged run is counted, never averaged in), and the
    markdown table of them."""
    cells: dict[tuple, list[dict]] = {}
    for folder in folders:
        table = folder / "table2.csv"
        if not table.is_file():
            raise FileNotFoundError(f"{table}: not found (run simulation.studies.losac_table2 --out {folder} first)")
        with open(table, newline="") as f:
            for row in csv.DictReader(f):
                cells.setdefault((row["algorithm"], int(row["M"]), int(row["T"])), []).append(row)
    combined = []
    for (algorithm, blocks, steps), all_rows in cells.items():
        rows = [r for r in all_rows if r["status"] == "completed"]
        reached = [float(r["rounds_to_target"]) for r in rows if r["rounds_to_target"]]
        speedups = [float(r["speedup_vs_scaffold"]) for r in rows if r["speedup_vs_scaffold"]]
        combined.append({
            "algorithm": algorithm, "M": blocks, "T": steps, "seeds": len(all_rows), "completed": len(rows),
            "reached": len(reached), "rounds_to_target": report.spread(reached, ".1f"),
            "rounds_to_target_each": " ".join(r["rounds_to_target"] or "–" for r in rows),
            "speedup_vs_scaffold": report.spread(speedups, ".2f") if algorithm != "scaffold" else "",
            "final_loss": report.spread([float(r["final_loss"]) for r in rows], ".4f"),
            "final_accuracy": report.spread([float(r["final_accuracy"]) for r in rows], ".4f"),
        })  # fmt: skip
    lines = [
        f"Rounds to {target:.0%} / × SCAFFOLD (per seed, then averaged) / test loss / test accuracy at the last "
        f"round: mean ± std over {len(folders)} seed folder(s) ({', '.join(str(f) for f in folders)}).",
        "",
        "| method | M | T | completed | rounds to target | each seed | × SCAFFOLD | loss | accuracy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in combined:
        reached = r["rounds_to_target"] + (
            "" if r["reached"] == r["completed"] else f" ({r['reached']}/{r['completed']})"
        )
        lines.append(f"| {r['algorithm']} | {r['M']} | {r['T']} | {r['completed']}/{r['seeds']} | {reached} | "
                     f"{r['rounds_to_target_each']} | "
                     f"{r['speedup_vs_scaffold']} | {r['final_loss']} | {r['final_accuracy']} |")  # fmt: skip
    return combined, "\n".join(lines) + "\n"


def write_combined(folders: list[Path], out: Path, target: float) -> int:
    try:
        rows, text = combine(folders, target)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    (out / "seeds.md").write_text(text)
    report.write_csv(out / "seeds.csv", rows)
    print(text)
    print_written([out / "seeds.md", out / "seeds.csv"])
    return 0


def cells(args, setting: dict, algorithms: list[str]) -> list[tuple[int, int, Path, dict, list[Job]]]:
    """Every (M, T) of the grid: its folder, shared settings and one job per algorithm (compare's layout)."""
    out = []
    for blocks in parse_list(args.blocks, "--blocks", int):
        for steps in parse_list(args.steps, "--steps", int):
            folder = args.out.resolve() / f"M{blocks}-T{steps}"
            shared = {**setting, **cell_keys(blocks, steps, args.rounds, args.target)}
            out.append((blocks, steps, folder, shared, compare.jobs_for(algorithms, shared, folder)))
    return out


@dataclass
class Plan:
    """Table II, checked: its arguments, algorithms, the shared setting and every (M, T) cell with its jobs."""

    args: argparse.Namespace
    algorithms: list[str]
    setting: dict
    grid: list[tuple[int, int, Path, dict, list[Job]]]


class TableTwo(Study):
    module = "simulation.studies.losac_table2"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--out", required=True, type=Path)
        parser.add_argument("--combine", nargs="+", type=Path, metavar="FOLDER",
                            help="only combine these table2 folders (one seed each) into "
                            "<out>/seeds.md|csv")  # fmt: skip
        parser.add_argument("--algorithms", action=Repeatable, default="losac,scaffold,fedavg,fedsaga")
        parser.add_argument("--blocks", action=Repeatable, default="2,5", help="M values")
        parser.add_argument("--steps", action=Repeatable, default="2,6", help="T values (local steps)")
        parser.add_argument("--rounds", type=int, default=500)
        parser.add_argument("--target", type=float, default=0.85)
        parser.add_argument("--engine", choices=ENGINES, default="flwr")
        parser.add_argument("-c", "--run-config", action="append", default=[], help="overrides of the setting")

    def answer_at_once(self, args: argparse.Namespace) -> int | None:
        return write_combined(args.combine, args.out, args.target) if args.combine else None

    def plan(self, args: argparse.Namespace) -> Plan:
        algorithms = parse_list(args.algorithms, "--algorithms")  # each once (ConfigError naming a duplicate)
        setting = {**parse_overrides([SETTING]), **parse_overrides(args.run_config)}
        taken = sorted(set(parse_overrides(args.run_config)) & set(cell_keys(0, 0, 0, 0.0)))
        if taken:
            raise ConfigError(f"-c: {', '.join(taken)} are set by --blocks, --steps, --rounds and --target")
        grid = cells(args, setting, algorithms)
        for *_, shared, jobs in grid:  # every cell is checked before the first run starts
            validate(jobs)
            preflight(resolved(shared))
        return Plan(args, algorithms, setting, grid)

    def outputs(self, plan: Plan) -> list[Path]:
        return [plan.args.out / "table2.md", plan.args.out / "table2.csv"]

    def stale(self, plan: Plan) -> list[Path]:
        return []  # the table of the cells so far stays until a new one replaces it

    def run(self, plan: Plan) -> tuple[list[dict], bool]:
        """Every cell as a comparison with its own report; the paper's rows of all cells, and whether a run failed."""
        rows, failed = [], False
        for blocks, steps, folder, shared, jobs in plan.grid:
            print(f"══ M = {blocks}, T = {steps} ══", flush=True)
            cfg = resolved(shared)
            print(described(cfg, shared), flush=True)
            results = compare.compare(jobs, cfg.targets, plan.args.engine, reuse=True)
            print(compare.write_report(folder, results, cfg.targets, cell_command(plan, blocks, steps, folder),
                                       f"{cfg['dataset']}, {cfg['num-clients']} clients"))  # fmt: skip
            failed |= any(r["status"] != "completed" for r in results)
            rows += rows_for(jobs, blocks, steps, plan.args.target)
        return rows, failed

    def reproduce(self, plan: Plan) -> str:
        args = plan.args
        return (f"python -m simulation.studies.losac_table2 --out {args.out} --algorithms {','.join(plan.algorithms)} "
                f"--blocks {args.blocks} --steps {args.steps} --rounds {args.rounds} --engine {args.engine}"
                + "".join(f' -c "{c}"' for c in args.run_config))  # fmt: skip

    def report(self, plan: Plan, results: tuple[list[dict], bool]) -> str:
        out = plan.args.out
        out.mkdir(parents=True, exist_ok=True)
        (out / "table2.md").write_text(markdown(results[0], plan.args.target, self.reproduce(plan)))
        report.write_csv(out / "table2.csv", results[0])
        return (out / "table2.md").read_text()

    def exit_code(self, plan: Plan, results: tuple[list[dict], bool], rerun: str) -> int:
        return 1 if results[1] else 0


def cell_command(plan: Plan, blocks: int, steps: int, folder: Path) -> str:
    """The `simulation.compare` command that reproduces one (M, T) cell (its comparison.md's Reproduce line)."""
    args = plan.args
    grid_keys = toml_pairs(cell_keys(blocks, steps, args.rounds, args.target))
    return (f"python -m simulation.compare --algorithms {','.join(plan.algorithms)}"
            + (" --engine inprocess" if args.engine == "inprocess" else "")
            + f' -c "{toml_pairs(plan.setting)}" -c "{grid_keys}" --out {args.out / folder.name}')  # fmt: skip


main = TableTwo(__doc__).main


if __name__ == "__main__":
    sys.exit(main())
