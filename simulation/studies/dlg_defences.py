"""The DLG study re-run against each privacy defence (docs/dlg/defences.md): reconstruct one client's training
record from what a curious server observes of its upload, with no defence, client-level DP and SecAgg+.

    python -m simulation.studies.dlg_defences --out docs/dlg/defences
    python -m simulation.studies.dlg_defences --out /tmp/d --defences none,secagg --rounds 1 --seeds 1

Setting: softmax regression with a bias (`model='logreg'`) on Fashion-MNIST, N = S clients in every round, each
taking one local step on a batch of one record, so an undefended upload is the gradient of one record. Every
defence of `fedsuite.dlg.defences.DEFENCES` trains in process (real strategy, clients, DP and SecAgg+ code); what
the server's rule received for client `--client` in rounds 1..`--rounds` is attacked with DLG (L-BFGS with a
line search, `--seeds` dummy draws) and with the closed form x = ∇W_k/∇b_k (fedsuite.dlg.analytic). The error is
‖X̂ − X‖/‖X‖ against the client's record (also at the best scale of X̂), and its best match over the records of the
round's cohort.
Writes <out>/: table.md, table.csv, errors.png, records.png, rows.csv (per-iteration errors), settings.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import numpy as np
import torch

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.data import load_dataset
from fedsuite.dlg import analytic as dlg_analytic
from fedsuite.dlg import attack as dlg
from fedsuite.dlg.defences import DEFENCES, Observation, capture, run_config_for, unknown
from fedsuite.local.loop import minibatches
from fedsuite.models.networks import build_model
from fedsuite.node.holdings import ClientNode
from fedsuite.server.app import quiet_flower_logs
from simulation.experiment.flags import Repeatable, parse_list
from simulation.experiment.jobs import Job, Outcome, validate
from simulation.experiment.progress import print_written
from simulation.experiment.runner import run_jobs
from simulation.launcher.overrides import parse_overrides
from simulation.studies.dlg_defences_report import FILES, Attack, DefenceResult, write_all

LINE_SEARCH = "strong_wolfe"  # without it L-BFGS at lr 1 overshoots into softmax saturation here and stalls


def base_config(args) -> dict:
    cfg = {
        "dataset": "fashion-mnist",
        "model": "logreg",
        "label-transform": "none",
        "partition": "iid",
        "num-clients": args.clients,
        "clients-per-round": args.clients,
        "sampling": "fixed",
        "client-mapping": "fixed",  # SecAgg+ runs one SuperNode per client; the same for every row
        "local-steps": 1,
        "batch-size": args.batch_size,
        "lr": args.lr,
        "lr-decay": 1.0,
        "weight-decay": 0.0,
        "clip-norm": 0.0,
        "dp-clip": args.dp_clip,
        "eval-every": 10_000,
        "min-replies": 1.0,
        "seed": args.seed,
        "device": "cpu",
    }
    return {**cfg, **args.overrides}


def relative_error(estimate: np.ndarray, record: np.ndarray) -> float:
    return float(np.linalg.norm(estimate - record) / np.linalg.norm(record))


def scale_free_error(estimate: np.ndarray, record: np.ndarray) -> float:
    """min over s of ‖s·X̂ − X‖/‖X‖ = the sine of the angle between them: the error of the shape alone."""
    cosine = float(np.dot(estimate.ravel(), record.ravel()) / (np.linalg.norm(estimate) * np.linalg.norm(record)))
    return float(np.sqrt(max(0.0, 1.0 - cosine**2))) if np.isfinite(cosine) else float("nan")


def best_match(estimates: np.ndarray, records: np.ndarray) -> float:
    """The smallest relative error of any estimate (row) against any record (row)."""
    return min(relative_error(e, r) for e in estimates for r in records)


def round_records(run_config: dict, server_round: int, cohort: list[int]) -> dict[int, torch.Tensor]:
    """The batch each cohort client trained on in `server_round`: its own minibatch draw (fedsuite.local.loop), from the
    same generator of (seed, round, partition) its client uses."""
    cfg = resolve(run_config)
    records = {}
    for partition in cohort:
        node = ClientNode(cfg, partition, int(cfg["num-clients"]))
        steps, batch = int(cfg["local-steps"]), int(cfg["batch-size"])
        inputs, _ = next(minibatches(node.data, 0, steps, batch, node.generator(server_round)))
        records[partition] = inputs.cpu().double()
    return records


def attack_observation(obs: Observation, run_config: dict, args) -> tuple[list[Attack], float, float, np.ndarray]:
    """DLG (one restart per dummy seed; the attacker keeps the one with the smallest D, which it can see) and the
    closed form against one observation; errors against client `args.client`'s record and the best over the
    cohort's records."""
    cfg = resolve(run_config)
    ds = load_dataset(cfg)
    records = round_records(run_config, obs.server_round, obs.cohort)
    truth = records[args.client]
    flat_truth = truth.reshape(len(truth), -1).numpy()
    cohort = np.concatenate([r.reshape(len(r), -1).numpy() for r in records.values()])
    forward = dlg.flat_forward(build_model(cfg.model, ds.input_shape, ds.num_classes, ds.task))
    loss = dlg.soft_loss(ds.task, "mean")
    x, observed = torch.from_numpy(obs.x).double(), torch.from_numpy(obs.gradient).double()
    attacks = []
    for seed in range(args.seeds):
        trace = dlg.dlg_attack(
            forward, loss, ds.task, x, observed, truth, dlg.label_shape(ds.task, len(truth), ds.num_classes),
            iterations=args.iterations, lr=args.attack_lr, optimizer="lbfgs", seed=seed, line_search=LINE_SEARCH,
        )  # fmt: skip
        estimate = trace.inputs.reshape(len(truth), -1).cpu().numpy()
        norm = float(np.linalg.norm(flat_truth))
        errors = [e / norm for e in trace.errors]
        client, best = relative_error(estimate, flat_truth), best_match(estimate, cohort)
        shape = scale_free_error(estimate, flat_truth)
        attacks.append(Attack(obs.server_round, seed, errors, trace.distances[-1], client, shape, best, estimate[0]))
    kept = min(attacks, key=lambda a: a.distance if np.isfinite(a.distance) else np.inf)
    kept.kept = True  # the attacker keeps the restart that matches best
    guess = dlg_analytic.reconstruct(obs.gradient, ds.num_classes)
    ratios = dlg_analytic.class_ratios(obs.gradient, ds.num_classes)
    return attacks, relative_error(guess, flat_truth[0]), best_match(ratios, cohort), guess


def defence_result(name: str, run_config: dict, args) -> DefenceResult:
    """Train under defence `name`, capture client `args.client`'s observed uploads and attack each."""
    observations = capture(name, run_config, range(1, args.rounds + 1), args.client)
    result = DefenceResult(name, DEFENCES[name].observes)
    for obs in observations:
        attacks, closed, closed_best, guess = attack_observation(obs, run_config, args)
        result.attacks += attacks
        result.closed_form.append(closed)
        result.closed_form_best.append(closed_best)
        result.observed_norms.append(float(np.linalg.norm(obs.delta.astype(np.float64))))
        if obs.server_round == 1:
            result.image_dlg = next(a for a in attacks if a.kept).reconstruction
            result.image_closed_form = guess
    return result


def jobs_for(args, run_config: dict) -> list[Job]:
    return [
        Job(run_config_for(name, run_config, args.rounds), label=name, keys={"defence": name},
            work=partial(defence_result, name, run_config, args))
        for name in args.defences
    ]  # fmt: skip


def study_result(name: str, outcome: Outcome) -> DefenceResult:
    if outcome.completed:
        return outcome.value
    return DefenceResult(name, DEFENCES[name].observes, note=f"{outcome.status}: {outcome.message}")


def print_result(outcome: Outcome) -> None:
    if outcome.completed:
        r = outcome.value
        print(f"dlg-defences │ {r.name}: DLG ‖X̂ − X‖/‖X‖ median {np.median([a.client for a in r.kept()]):.3g}, "
              f"closed form {np.median(r.closed_form):.3g}", file=sys.stderr)  # fmt: skip


def true_record(run_config: dict, client: int) -> np.ndarray:
    return round_records(run_config, 1, [client])[client][0].reshape(-1).numpy()


def settings_text(args) -> str:
    return (
        f"Settings: Fashion-MNIST, softmax regression with bias (model='logreg'), N = S = {args.clients}, one local "
        f"step on a batch of {args.batch_size} record(s), lr {args.lr:g}, DP clip C = {args.dp_clip:g}, seed "
        f"{args.seed}; client {args.client}'s upload in rounds 1–{args.rounds}, DLG L-BFGS (strong Wolfe line "
        f"search, lr {args.attack_lr:g}, {args.iterations} iterations, {args.seeds} restarts from seeded dummies, "
        f"the one with the smallest D kept)."
    )


def study(args) -> list[DefenceResult]:
    run_config = base_config(args)
    quiet_flower_logs()
    jobs = jobs_for(args, run_config)
    validate(jobs)  # a bad key stops here, before any training
    outcomes = run_jobs(jobs, on_done=print_result)
    results = [study_result(name, o) for name, o in zip(args.defences, outcomes, strict=True)]
    out = Path(args.out)
    write_all(out, results, true_record(run_config, args.client), settings_text(args))
    settings = {**vars(args), "run_config": run_config, "line_search": LINE_SEARCH,
                "defences_run_config": {n: DEFENCES[n].overrides for n in args.defences}}  # fmt: skip
    (out / "settings.json").write_text(json.dumps(settings, indent=2, default=str) + "\n")
    print_written([out / name for name in (*FILES, "settings.json")])
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--defences", action=Repeatable, default=",".join(DEFENCES),
                   help=f"comma-separated, of {', '.join(DEFENCES)}")  # fmt: skip
    p.add_argument("--clients", type=int, default=3, help="N = S, every client in every round (SecAgg+: ≥ 3)")
    p.add_argument("--client", type=int, default=1, help="the attacked client (partition id)")
    p.add_argument("--rounds", type=int, default=5, help="attack the uploads of rounds 1..R (one record each)")
    p.add_argument("--batch-size", type=int, default=1, help="records per client step (1: DLG succeeds undefended)")
    p.add_argument("--lr", type=float, default=0.01, help="training η (the attacker reads −Δ/η)")
    p.add_argument("--dp-clip", type=float, default=0.05, help="C of client-level DP")
    p.add_argument("--attack-lr", type=float, default=1.0, help="L-BFGS lr")
    p.add_argument("--iterations", type=int, default=30, help="L-BFGS iterations")
    p.add_argument("--seeds", type=int, default=4, help="DLG restarts per attacked upload (the smallest D is kept)")
    p.add_argument("--seed", type=int, default=0, help="the run seed")
    p.add_argument(
        "-c", "--config", action="append", default=[], help="extra run-config, e.g. -c \"partition='shards'\""
    )
    args = p.parse_args(argv)
    args.defences = parse_list(args.defences, "--defences")
    reason = unknown(args.defences)
    if reason:
        raise ConfigError(f"--defences: {reason}")
    if not 0 <= args.client < args.clients:
        raise ConfigError(f"--client {args.client}: must be a partition id in 0..{args.clients - 1} (--clients)")
    for flag, value in (("--rounds", args.rounds), ("--seeds", args.seeds), ("--iterations", args.iterations)):
        if value < 1:
            raise ConfigError(f"{flag} {value}: must be at least 1")
    args.overrides = parse_overrides(args.config)
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        results = study(args)
    except ConfigError as err:
        print(f"dlg-defences │ {err}", file=sys.stderr)
        return 2
    return 1 if any(r.note for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
