"""The LoSAC paper's DLG leakage study (§V-D; docs/dlg/index.md): attack the message each algorithm
really reveals, on binary logistic regression.

    python -m simulation.studies.dlg --out docs/dlg --dataset fashion-mnist
    python -m simulation.studies.dlg --out docs/dlg --dataset synthetic --algorithms dsgd,fedavg --iterations 20

Every algorithm of `fedsuite.dlg.messages.MESSAGES` trains in process (real strategy and clients) with N = S
(full participation), the full local batch per step (M = 1) and no weight decay, for `--round` rounds; client
`--client`'s message of the last round is attacked (`fedsuite.dlg.attack`) and ‖X̂ − X‖_F is recorded per iteration.
Writes <out>/<name or dataset>/: table.md, table.csv, errors.png, rows.csv (per-iteration errors), settings.json.
An algorithm missing from this checkout's registry is listed with a note instead of failing the study.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import torch

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.data import load_dataset
from fedsuite.dlg import attack as dlg
from fedsuite.dlg.messages import MESSAGES, Captured, available, capture, run_config_for
from fedsuite.models.networks import build_model
from fedsuite.node.holdings import ClientNode
from fedsuite.server.app import quiet_flower_logs
from simulation.experiment.flags import Repeatable, parse_list
from simulation.experiment.jobs import Job, Outcome, validate
from simulation.experiment.progress import print_written
from simulation.experiment.runner import run_jobs
from simulation.launcher.overrides import parse_overrides
from simulation.studies.dlg_report import StudyRow, write_all

# Binary logistic regression per dataset (Fashion-MNIST label ≤ 4 → 0, else 1; docs/reference/protocol.md).
# Training η for a mean-reduced loss, tuned to η·L < 1 (client 1's L ≈ 151 on standardised Fashion-MNIST,
# ≈ 0.2 on the synthetic set); the sum-reduced default is the paper's η = 1e-4 (docs/dlg/index.md).
MEAN_LR = {"fashion-mnist": 0.005, "synthetic": 1.0}
SUM_LR = 1e-4
DATASETS = {
    "fashion-mnist": {"dataset": "fashion-mnist", "model": "logreg", "label-transform": "binary", "partition": "iid"},
    "synthetic": {"dataset": "synthetic-logistic", "synthetic-samples": 50, "synthetic-dim": 20},
}


def base_config(args) -> dict:
    cfg = {
        **DATASETS[args.dataset],
        "num-clients": args.clients,
        "clients-per-round": args.clients,
        "sampling": "fixed",
        "local-steps": args.local_steps,
        "batch-size": 0,
        "lr": args.lr,
        "lr-decay": 1.0,
        "weight-decay": 0.0,
        "clip-norm": 0.0,
        "eval-every": 10_000,
        "min-replies": 1.0,
        "seed": args.seed,
        "device": "cpu",
    }
    cfg["loss-reduction"] = args.loss_reduction
    return {**cfg, **args.overrides}


def attack(captured: Captured, run_config: dict, args) -> StudyRow:
    """The attack on client `args.client`'s batch, as the attacker sees it (model, message, batch shape)."""
    cfg = resolve(run_config)
    ds = load_dataset(cfg)
    node = ClientNode(cfg, args.client, int(cfg["num-clients"]))
    inputs, targets = node.data.inputs.cpu(), node.data.targets.cpu()
    forward = dlg.flat_forward(build_model(cfg.model, ds.input_shape, ds.num_classes, ds.task))
    loss = dlg.soft_loss(ds.task, args.attack_reduction)
    x = torch.from_numpy(captured.x).double()
    # The captured message is the mean-loss gradient; a sum-reduced attacker matches n_1 times it.
    observed = torch.from_numpy(captured.gradient).double() * (len(targets) if args.attack_reduction == "sum" else 1)
    hard = dlg.hard_probabilities(ds.task, targets, ds.num_classes)
    true_distance = float((dlg.model_gradient(forward, loss, x, inputs.double(), hard) - observed).pow(2).sum())
    trace = dlg.dlg_attack(
        forward, loss, ds.task, x, observed, inputs, dlg.label_shape(ds.task, len(targets), ds.num_classes),
        iterations=args.iterations, lr=args.attack_lr, optimizer=args.optimizer, seed=args.seed,
    )  # fmt: skip
    reveals = MESSAGES[captured.name].reveals
    return StudyRow(captured.name, reveals, captured.num_examples, captured.steps, captured.lr, trace.errors,
                    trace.distances, true_distance)  # fmt: skip


def settings_text(args, run_config: dict) -> str:
    keys = ("dataset", "num-clients", "local-steps", "lr", "loss-reduction", "label-transform", "partition")
    shown = ", ".join(f"{k}={run_config[k]}" for k in keys if k in run_config)
    return (
        f"Settings: {shown}; attack client {args.client}'s message of round {args.round}; attacker "
        f"{args.optimizer} step {args.attack_lr:g}, {args.iterations} iterations, {args.attack_reduction}-reduced "
        f"matching loss, seed {args.seed}. DSGD = FedAvg with local-steps=1."
    )


def captured_attack(name: str, run_config: dict, args) -> StudyRow:
    """Train `name` in process, capture client `args.client`'s message of round `args.round` and attack it."""
    captured = capture(name, run_config, args.round, args.client)
    return attack(captured, run_config_for(name, run_config, args.round), args)


def jobs_for(args, run_config: dict) -> list[Job]:
    """One in-process job per message of the study that can run in this checkout."""
    return [
        Job(run_config_for(name, run_config, args.round), label=name, keys={"algorithm": name},
            work=partial(captured_attack, name, run_config, args))
        for name in args.algorithms if not available(name)
    ]  # fmt: skip


def study_row(name: str, outcome: Outcome | None) -> StudyRow:
    """The table's row: the attack, or a note why there is none (not in this checkout, or the run failed)."""
    if outcome is not None and outcome.completed:
        return outcome.value
    note = f"skipped: {available(name)}" if outcome is None else f"{outcome.status}: {outcome.message}"
    reveals = MESSAGES[name].reveals if name in MESSAGES else ""
    return StudyRow(name, reveals, 0, 0, 0.0, [], [], float("nan"), note)


def print_row(outcome: Outcome) -> None:
    name, row = outcome.job.label, outcome.value
    if outcome.completed:
        print(f"dlg │ {name}: ‖X̂ − X‖ {row.errors[0]:.4g} → {row.errors[-1]:.4g}, D at the true batch "
              f"{row.true_distance:.3g}", file=sys.stderr)  # fmt: skip


def study(args) -> list[StudyRow]:
    run_config = base_config(args)
    quiet_flower_logs()
    for name in args.algorithms:
        if available(name):
            print(f"dlg │ {name}: skipped ({available(name)})", file=sys.stderr)
    jobs = jobs_for(args, run_config)
    validate(jobs)  # a bad key stops here, before any training
    outcomes = {o.job.label: o for o in run_jobs(jobs, on_done=print_row)}
    rows = [study_row(name, outcomes.get(name)) for name in args.algorithms]
    out = Path(args.out) / (args.name or args.dataset)
    write_all(
        out, rows, args.iterations, f"{args.dataset}, binary logistic regression", settings_text(args, run_config)
    )
    settings = {**vars(args), "run_config": run_config}
    (out / "settings.json").write_text(json.dumps(settings, indent=2, default=str) + "\n")
    print_written([out / name for name in ("table.md", "table.csv", "errors.png", "rows.csv", "settings.json")])
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True, help="output root; files go to <out>/<name>/")
    p.add_argument("--name", default="", help="sub-folder of --out; default: the dataset")
    p.add_argument("--dataset", choices=tuple(DATASETS), default="fashion-mnist")
    p.add_argument("--algorithms", action=Repeatable, default=",".join(MESSAGES),
                   help=f"comma-separated, of {', '.join(MESSAGES)}")  # fmt: skip
    p.add_argument("--clients", type=int, default=100, help="N = S (full participation)")
    p.add_argument("--round", type=int, default=5, help="the attacked round (1-based)")
    p.add_argument("--client", type=int, default=1, help="the attacked client (partition id)")
    p.add_argument("--local-steps", type=int, default=5, help="T, full-batch local steps (DSGD always 1)")
    p.add_argument("--lr", type=float, default=None, help=f"training η; default {MEAN_LR} (mean), {SUM_LR:g} (sum)")
    p.add_argument(
        "--loss-reduction",
        choices=("mean", "sum"),
        default="mean",
        help="training loss; sum with the paper's η = 1e-4 is unstable on standardised features (docs/dlg/index.md)",
    )
    p.add_argument("--attack-lr", type=float, default=1e-3, help="attacker step (L-BFGS: its lr)")
    p.add_argument("--iterations", type=int, default=100, help="attack iterations")
    p.add_argument("--optimizer", choices=dlg.OPTIMIZERS, default="gd")
    p.add_argument("--attack-reduction", choices=("mean", "sum"), default="sum",
                   help="the attacker's matching loss: sum (the paper's loss scale, which its step 1e-3 assumes; the "
                   "message is then n_1 × the mean-loss gradient) or mean")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "-c", "--config", action="append", default=[], help="extra run-config, e.g. -c \"partition='shards'\""
    )
    args = p.parse_args(argv)
    args.algorithms = parse_list(args.algorithms, "--algorithms")  # each once (ConfigError naming a duplicate)
    if args.lr is None:
        args.lr = SUM_LR if args.loss_reduction == "sum" else MEAN_LR[args.dataset]
    args.overrides = parse_overrides(args.config)
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        rows = study(args)
    except ConfigError as err:
        print(f"dlg │ {err}", file=sys.stderr)
        return 2
    return 1 if any(row.note and not row.note.startswith("skipped") for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
