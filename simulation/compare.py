"""Run several algorithms on one setting (same data, partition, seed and cohorts) and write a comparison.

    python -m simulation.compare --algorithms fedavg,scaffold,fedspeed -c "num-server-rounds=30" --out docs/comparison

Each algorithm is a real `flwr run` (through simulation.run; `--engine inprocess`: the same strategy and clients
in one process, no Ray) into <out>/runs/<algorithm>/; then
<out>/comparison.md (table), comparison.csv and comparison.png (accuracy vs round, all algorithms) are written.
A failed run is reported in the table and makes the command exit 1 after the others have run.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from fedsuite.config import ALGORITHMS, ConfigError, resolve
from simulation.presets import describe as describe_config
from simulation.presets import expand as expand_preset
from simulation.run import Interrupted, RunFailed, parse_overrides, preflight, pyproject_defaults, run

COLUMNS = ("algorithm", "final_acc", "best_acc", "final_rel_err", "rounds_to", "s_per_round",
           "client_compute_s_per_round", "vectors_per_client_round", "mb_per_client_round", "status")  # fmt: skip


def summarize(algorithm: str, folder: Path, targets: list[float]) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    rows = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
    trained = [r for r in rows if r["round"] > 0]
    steady = trained[1:] or trained
    median = lambda xs: sorted(xs)[len(xs) // 2] if xs else None  # noqa: E731
    return {
        "algorithm": algorithm,
        "final_acc": summary["final_accuracy"],
        "best_acc": summary["best_accuracy"],
        "final_rel_err": summary.get("final_relative_error"),  # synthetic federations: ‖x − x*‖/‖x*‖
        "rounds_to": {f"{t:g}": summary["rounds_to_target"].get(f"{t:g}") for t in targets},
        "s_per_round": median([r["round_seconds"] for r in steady]),
        "client_compute_s_per_round": median([r["client_compute_seconds"] for r in steady]),
        "vectors_per_client_round": summary["communication_vectors_per_client"] / max(len(trained), 1),
        "mb_per_client_round": summary["communication_bytes_per_client"] / max(len(trained), 1) / 1e6,
        "status": summary["status"],
        "curve": [(r["round"], r["accuracy"]) for r in rows if r.get("accuracy") is not None]
        or [(r["round"], r["relative_error"]) for r in rows if r.get("relative_error") is not None],
        "curve_is_error": all(r.get("accuracy") is None for r in rows),
    }


def run_in_process(overrides: dict, quiet: bool = True, check_data: bool = False) -> Path:
    """One run of the ServerApp's strategy with the ClientApp's clients in this process (`fedsuite.inprocess`),
    recorded to the same results folder as a `flwr run`; a run that does not complete raises RunFailed."""
    import logging

    from fedsuite.inprocess import run_inprocess
    from fedsuite.server_app import results_folder

    overrides, _ = expand_preset(overrides)  # the explicit keys win over a preset (simulation.presets)
    cfg = {**pyproject_defaults(), **overrides}
    folder = results_folder(resolve(cfg))
    logging.getLogger("flwr").setLevel(logging.WARNING if quiet else logging.INFO)
    try:
        run_inprocess(cfg, record=True)
    except Exception as err:  # the recorder has written the status (RecordingServer, RunAborted)
        status = json.loads((folder / "summary.json").read_text()).get("status", "failed")
        raise RunFailed(f"{type(err).__name__}: {err}", status if status != "running" else "failed", folder) from err
    return folder


def finished(folder: Path, explicit: dict) -> bool:
    """The run in `folder` completed, and every setting given explicitly now is the one it ran with."""
    try:
        status = json.loads((folder / "summary.json").read_text())["status"]
        ran = json.loads((folder / "config.json").read_text())["run_config"]
    except (OSError, ValueError, KeyError):
        return False
    return status == "completed" and all(ran.get(k) == v for k, v in explicit.items())


def _fmt(value, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def markdown(results: list[dict], targets: list[float], command: str) -> str:
    base = next((r for r in results if r["algorithm"] == "fedavg" and r.get("s_per_round")), None)
    with_error = any(r.get("final_rel_err") is not None for r in results)
    head = ["algorithm", "final acc", "best acc", *(["final ‖x−x*‖/‖x*‖"] if with_error else []),
            *[f"rounds to {t:g}" for t in targets], "s/round",
            "client compute s/round", "× FedAvg compute", "vectors/client/round", "MB/client/round"]  # fmt: skip
    lines = [f"Reproduce: `{command}`", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        if r["status"] != "completed":
            lines.append(f"| {r['algorithm']} | {r['status']} |" + " |" * (len(head) - 2))
            continue
        ratio = r["client_compute_s_per_round"] / base["client_compute_s_per_round"] if base else None
        cells = [r["algorithm"], _fmt(r["final_acc"], ".4f"), _fmt(r["best_acc"], ".4f"),
                 *([_fmt(r["final_rel_err"], ".3e")] if with_error else []),
                 *[str(r["rounds_to"][f"{t:g}"] or "–") for t in targets], f"{r['s_per_round']:.2f}",
                 f"{r['client_compute_s_per_round']:.2f}", f"{ratio:.2f}" if ratio else "–",
                 f"{r['vectors_per_client_round']:.1f}", f"{r['mb_per_client_round']:.2f}"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for r in results:
        if r.get("curve"):
            ax.plot(*zip(*r["curve"], strict=True), label=r["algorithm"], linewidth=1.4)
    error = any(r.get("curve_is_error") for r in results)
    ax.set(xlabel="round", ylabel="‖x − x*‖ / ‖x*‖" if error else "test accuracy", title=title)
    if error:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # runs without evaluation draw no curve
        ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", required=True, help=f"comma-separated, from: {', '.join(ALGORITHMS)}")
    parser.add_argument("-c", "--run-config", action="append", default=[], help="shared key=value overrides")
    parser.add_argument("--out", default="results/compare", help="output folder")
    parser.add_argument("--title", default="", help="plot title")
    parser.add_argument("--engine", choices=("flwr", "inprocess"), default="flwr",
                        help="flwr: every run is a real `flwr run` simulation; inprocess: the same strategy and "
                        "clients called in this process, one client at a time (no Ray, no SuperLink; fast for "
                        "small models)")  # fmt: skip
    parser.add_argument("--skip-finished", action="store_true",
                        help="reuse runs in --out that completed with the same explicit settings")  # fmt: skip
    args = parser.parse_args(argv)
    algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    out = Path(args.out).resolve()
    try:
        shared = parse_overrides(args.run_config)
        for algorithm in algorithms:  # every setting is checked before the first run starts
            resolve({**pyproject_defaults(), **expand_preset({**shared, "algorithm": algorithm})[0]})
        expanded, from_preset = expand_preset(shared)
        cfg = resolve({**pyproject_defaults(), **expanded})
        print(describe_config(cfg, from_preset, shared), flush=True)
        preflight(cfg)
    except (ConfigError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    results, failed = [], False
    for algorithm in algorithms:
        overrides = {**shared, "algorithm": algorithm, "out-dir": str(out / "runs"), "run-name": algorithm,
                     "overwrite": True}  # fmt: skip
        print(f"── {algorithm} ──", flush=True)
        try:
            folder = out / "runs" / algorithm
            settings = expand_preset({**shared, "algorithm": algorithm})[0]  # the preset's keys count too
            if not (args.skip_finished and finished(folder, settings)):
                folder = (run if args.engine == "flwr" else run_in_process)(overrides, quiet=True, check_data=False)
            else:
                print("   finished earlier with the same settings: reused", flush=True)
            results.append(summarize(algorithm, folder, cfg.targets))
            r = results[-1]
            quality = f"acc {_fmt(r['final_acc'], '.4f')}" + (
                f", ‖x−x*‖/‖x*‖ {r['final_rel_err']:.3e}" if r["final_rel_err"] is not None else ""
            )
            print(f"   final {quality}, {r['s_per_round']:.2f} s/round", flush=True)
        except RunFailed as err:
            failed = True
            results.append({"algorithm": algorithm, "status": f"{err.status}: {err}"})
            print(f"   {err.status}: {err}", flush=True)
        except Interrupted as err:
            print(f"interrupted ({err}); the comparison stops here", file=sys.stderr)
            return err.exit_code
    command = "python -m simulation.compare --algorithms " + ",".join(algorithms)
    command += " --engine inprocess" if args.engine == "inprocess" else ""
    command += "".join(f' -c "{c}"' for c in args.run_config) + f" --out {args.out}"
    (out / "comparison.md").write_text(markdown(results, cfg.targets, command))
    with open(out / "comparison.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in results:
            writer.writerow({**r, "rounds_to": json.dumps(r.get("rounds_to"))})
    plot(results, out / "comparison.png", args.title or f"{cfg['dataset']}, {cfg['num-clients']} clients")
    print((out / "comparison.md").read_text())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
