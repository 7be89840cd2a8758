"""The privacy–utility study's report (docs/privacy-study/index.md): final accuracy against the privacy budget ε for
each algorithm, from two sweeps run with the same protocol, one without privacy and one with client-level DP over a
grid of noise multipliers; and the paired test of whether control variates help under DP (SCAFFOLD and the other
drift-corrected methods against FedAvg, seed by seed: same partition, same cohorts).

    python -m simulation.studies.privacy_utility --plain docs/privacy-study/plain --dp docs/privacy-study/dp \\
        --out docs/privacy-study

Writes table.md / table.csv (accuracy per algorithm and σ, with ε), gaps.md (the paired differences against the
baseline) and accuracy-vs-epsilon.png. Reads only finished runs; a run that did not complete is counted, never
averaged.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from simulation.experiment import report

BASELINE = "fedavg"
PLAIN = "no DP"


def runs(folder: Path) -> list[dict]:
    """One record per run under folder/runs: algorithm, σ (None without DP), seed, status, final accuracy, ε."""
    out = []
    for summary_file in sorted((folder / "runs").glob("*/*/seed-*/summary.json")):
        run = summary_file.parent
        config = json.loads((run / "config.json").read_text())["run_config"]
        summary = report.read_summary(run)
        rows = report.read_rows(run)
        epsilons = [r["dp_epsilon"] for r in rows if "dp_epsilon" in r]
        private = config.get("dp", "off") != "off"
        out.append(
            {
                "algorithm": config["algorithm"],
                "sigma": float(config["dp-noise"]) if private else None,
                "seed": int(config["seed"]),
                "status": summary.get("status"),
                "accuracy": summary.get("final_accuracy"),
                "epsilon": (math.inf if epsilons and epsilons[-1] is None else epsilons[-1]) if epsilons else None,
            }
        )
    return out


def _setting(sigma: float | None) -> str:
    return PLAIN if sigma is None else f"σ={sigma:g}"


def table(records: list[dict]) -> tuple[list[str], list[dict], list[str]]:
    """Markdown lines, CSV rows and the settings in order: accuracy mean ± std over seeds per algorithm and setting,
    and the ε each setting spent (the same for every algorithm: it depends on σ, the sampling and the rounds)."""
    settings = sorted({r["sigma"] for r in records}, key=lambda s: -1.0 if s is None else s)
    names = [_setting(s) for s in settings]
    epsilon = {}
    for s in settings:
        spent = {r["epsilon"] for r in records if r["sigma"] == s and r["status"] == "completed"}
        epsilon[s] = spent.pop() if len(spent) == 1 else None
    head = ["algorithm"] + [
        name if s is None else f"{name} (ε={_eps(epsilon[s])})" for s, name in zip(settings, names, strict=True)
    ]
    lines, rows = [], []
    for algorithm in sorted({r["algorithm"] for r in records}, key=_order):
        cells, row = [algorithm], {"algorithm": algorithm}
        for s, name in zip(settings, names, strict=True):
            done = [r for r in records if r["algorithm"] == algorithm and r["sigma"] == s]
            values = [r["accuracy"] for r in done if r["status"] == "completed" and r["accuracy"] is not None]
            stats = report.mean_std(values)
            note = "" if len(values) == len(done) else f" ({len(done) - len(values)} of {len(done)} did not complete)"
            cells.append(report.format_mean_std(stats, ".4f") + note)
            row[f"{name} mean"], row[f"{name} std"] = stats if stats else (None, None)
            row[f"{name} epsilon"] = epsilon[s]
        lines.append(cells)
        rows.append(row)
    return report.markdown_table(head, lines), rows, names


def gaps(records: list[dict]) -> list[str]:
    """Each method minus FedAvg, paired by seed, per setting: the mean ± std of the paired differences and the
    verdict (every seed above: helps; every seed below: hurts; otherwise: not shown)."""
    by = {(r["algorithm"], r["sigma"], r["seed"]): r for r in records if r["status"] == "completed"}
    settings = sorted({r["sigma"] for r in records}, key=lambda s: -1.0 if s is None else s)
    others = [a for a in sorted({r["algorithm"] for r in records}, key=_order) if a != BASELINE]
    head = ["algorithm − fedavg"] + [_setting(s) for s in settings]
    lines = []
    for algorithm in others:
        cells = [algorithm]
        for s in settings:
            seeds = sorted(k[2] for k in by if k[:2] == (algorithm, s) and (BASELINE, s, k[2]) in by)
            diffs = [by[(algorithm, s, seed)]["accuracy"] - by[(BASELINE, s, seed)]["accuracy"] for seed in seeds]
            stats = report.mean_std(diffs)
            verdict = "helps" if diffs and min(diffs) > 0 else "hurts" if diffs and max(diffs) < 0 else "not shown"
            shown = "–" if stats is None else f"{stats[0]:+.4f} ± {stats[1]:.4f}"
            cells.append(f"{shown} ({verdict}, {len(diffs)} seed{'' if len(diffs) == 1 else 's'})")
        lines.append(cells)
    return report.markdown_table(head, lines)


def plot(path: Path, records: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    by_algorithm = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["status"] == "completed" and r["accuracy"] is not None:
            by_algorithm[r["algorithm"]][r["sigma"]].append(r)
    for algorithm in sorted(by_algorithm, key=_order):
        finite = {s: rs for s, rs in by_algorithm[algorithm].items() if s is not None and _finite(rs[0]["epsilon"])}
        points = sorted((rs[0]["epsilon"], sum(x["accuracy"] for x in rs) / len(rs)) for rs in finite.values())
        line = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=algorithm)[0]
        plain = by_algorithm[algorithm].get(None)
        if plain:
            ax.axhline(sum(x["accuracy"] for x in plain) / len(plain), color=line.get_color(), ls="--", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("ε after the last round (δ = dp-delta); dashed: the same algorithm without DP")
    ax.set_ylabel("final test accuracy (mean over seeds)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _eps(value: float | None) -> str:
    if value is None:
        return "?"
    return "∞" if not math.isfinite(value) else f"{value:.3g}"


def _order(algorithm: str) -> tuple[int, str]:
    return (0 if algorithm == BASELINE else 1, algorithm)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulation.studies.privacy_utility", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--plain", type=Path, required=True, help="the sweep folder without privacy")
    parser.add_argument("--dp", type=Path, required=True, help="the sweep folder with client-level DP")
    parser.add_argument("--out", type=Path, required=True, help="where the tables and the plot go")
    args = parser.parse_args(argv)
    for flag, folder in (("--plain", args.plain), ("--dp", args.dp)):
        if not (folder / "runs").is_dir():
            print(
                f"{flag} {folder}: no runs/ folder (run the sweep of docs/privacy-study/index.md first)",
                file=sys.stderr,
            )
            return 2
    records = runs(args.plain) + runs(args.dp)
    args.out.mkdir(parents=True, exist_ok=True)
    lines, rows, names = table(records)
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    report.write_csv(args.out / "table.csv", rows)
    (args.out / "gaps.md").write_text("\n".join(gaps(records)) + "\n")
    plot(args.out / "accuracy-vs-epsilon.png", records)
    print("\n".join(lines))
    print()
    print("\n".join(gaps(records)))
    files = ("table.md", "table.csv", "gaps.md", "accuracy-vs-epsilon.png")
    print(f"wrote: {', '.join(str(args.out / name) for name in files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
