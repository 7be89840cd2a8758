"""Flower ServerApp: resolve the run config → the suite's run plan (build_plan: dataset, x⁰ of the model the config
names, evaluator, sampler, results folder, client-state plan, a checkpoint to resume) → the composition root
(fedsuite/run/compose.py), which builds the algorithm's server rule, its round stages, the Flower strategy made from
them and the round loop. The in-process engine (fedsuite/run/inprocess.py) builds its runs the same way."""

from __future__ import annotations

import logging
import os
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.common import Context
from flwr.server import ServerApp, ServerAppComponents

from fedsuite.config.run_config import Config, ConfigError, resolve
from fedsuite.data import client_partition, server_dataset, with_data_clients
from fedsuite.evaluation.data_checks import check_evaluation_data
from fedsuite.evaluation.metrics import Evaluator, validation_evaluator
from fedsuite.local.device import pick_device
from fedsuite.models.networks import check_output, seeded_start
from fedsuite.privacy.model_checks import model_refusals
from fedsuite.results import checkpoint
from fedsuite.results.folder import default_run_name
from fedsuite.results.tracking import launch_group, tracking_observers
from fedsuite.run.compose import Engine, compose_run
from fedsuite.server.adapter import RuleStrategy
from fedsuite.server.compose import run_plan
from fedsuite.server.loop import StopAwareRecorder, watch_flower_exit
from fedsuite.server.observers import RoundObserver
from fedsuite.server.plan import RunPlan
from fedsuite.state import store as state
from fedsuite.state.host_memory import reuse_host_memory
from fedsuite.state.plan import StatePlan, state_plan

log = logging.getLogger("flwr.fedsuite")


def initial_model(cfg: Config, dataset) -> np.ndarray:
    """x^0: the model's trainable parameters, built under the run seed."""
    return initial_state(cfg, dataset)[0].copy()


def check_model(cfg: Config, dataset) -> None:
    """Before anything trains: the model builds, has trainable parameters and maps two test samples to outputs
    that fit the data (ModelError, one line naming `model`, otherwise)."""
    initial_state(cfg, dataset)


_CHECKED: list[tuple] = []  # the run config whose model was last checked in this process


def initial_state(cfg: Config, dataset) -> tuple[np.ndarray, np.ndarray]:
    """(x^0, the initial buffers) as read-only float32 arrays, made by the one function every client makes them with
    (fedsuite.models.networks.seeded_start, once per process); the model checked first (check_model) when this run
    config's was not the last one checked."""
    ds = dataset
    key = (cfg.model, cfg.model_args, ds.name, ds.input_shape, ds.num_classes, ds.task, cfg.seed,
           cfg.privacy.mode, cfg["buffers"], cfg["dp-sgd"])  # fmt: skip
    inspect = None if key in _CHECKED else partial(_check_built, cfg, ds)
    x0, buffers = seeded_start(cfg.model, ds.input_shape, ds.num_classes, ds.task, cfg.seed, cfg.model_args, inspect)
    _CHECKED[:] = [key]
    return _read_only(x0.numpy()), _read_only(buffers.numpy())


def _check_built(cfg: Config, dataset, net) -> None:
    """ModelError unless `net` maps two test samples to outputs that fit the data; ConfigError for privacy this
    model cannot serve (docs/privacy.md)."""
    source = dataset.test if len(dataset.test) else dataset.train  # a dataset without a test set (federated evaluation)
    sample = dataset.features(source, np.arange(min(2, len(source))), "cpu")
    check_output(net, sample, dataset.num_classes, dataset.task, cfg.model)
    if refusals := model_refusals(cfg, net):
        raise ConfigError("; ".join(refusals))


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def results_folder(cfg: Config) -> Path:
    """out-dir/run-name, or the resumed run's folder (resume-from). A relative out-dir is taken from the
    ServerApp's working directory, which for the local simulation SuperLink is the folder `flwr run` first
    started it from (simulation.run passes an absolute path)."""
    if cfg.run_control.resume_from:
        return resume_folder(cfg)
    root = Path(cfg.output.out_dir).expanduser()
    if not root.is_absolute():
        root = Path(os.getcwd()) / root
    return root / (cfg.output.run_name or default_run_name(cfg.algorithm, cfg.dataset))


def client_plan(cfg: Config, dataset) -> StatePlan:
    """The run's client-state plan (fedsuite.state.plan): the same the clients and the launcher compute."""
    x0, buffers = initial_state(cfg, dataset)
    return state_plan(cfg, int(x0.size), int(buffers.size))


def claim_client_state(root: Path, state_key: int, results: Path | None) -> None:
    """Refuse a client-state folder holding another run's vectors (a ConfigError naming it), before training and
    before a resume restores any file; then record this run as its owner, with its results folder, where the server
    can write there (a deployment's folder may exist on the nodes only: the clients check it, and record the owner
    with their first write, fedsuite.state.file_tier.FileTier)."""
    try:
        try:
            state.claim(root, state_key, str(results) if results else None)
        except OSError:
            state.check_owner(root, state_key)
    except state.StateFolderTaken as err:
        raise ConfigError(str(err)) from None


def build_plan(cfg: Config, record: bool = True, run_id: int = 0) -> RunPlan:
    """The suite's plan of a run of `cfg` (the composition root, fedsuite/run/compose.py, builds the rest): x⁰ of the
    model the config names, checked first; the dataset's central evaluation; with `record`, the results folder; the
    run's client-state folder, claimed for it; the checkpoint to resume from."""
    run = cfg.run_control
    reuse_host_memory(run.reuse_host_memory)  # the server's process (in process: the clients' too)
    resume = checkpoint.load(resume_folder(cfg)) if run.resume_from else None
    if resume is not None:
        checkpoint.check_compatible(resume, dict(cfg))
        log.info("fedsuite │ resuming from %s (after round %d)", resume.folder, resume.server_round)
    dataset = server_dataset(cfg)  # server-data=false: shapes only, no file read
    x0 = initial_model(cfg, dataset)  # checked first (check_model)
    parts = client_partition(cfg, dataset) if cfg.data.on_server else None
    check_evaluation_data(cfg, dataset)  # a validation split or federated test that no client holds: say so now
    device = pick_device(run.device)
    state_root, state_key = client_state_folder(cfg, dataset, run_id, resume, record)
    recorder = None
    if record:
        meta = run_meta(cfg, dataset, parts, x0, device)
        meta.update(run_id=run_id, client_state_dir=str(state_root) if state_root else None)  # for the reaper
        recorder = StopAwareRecorder(results_folder(cfg), dict(cfg), meta, cfg.targets, run.num_rounds,
                                     cfg.output.overwrite, resume.rows if resume else None,
                                     cfg.evaluation.target_column, initial_model=x0)  # fmt: skip
        log.info("fedsuite │ results → %s", recorder.folder)
    log.info(
        "fedsuite │ %s on %s │ model %s, d=%d │ %d clients, %s │ %s │ %d rounds │ device %s",
        cfg["algorithm"], cfg["dataset"], cfg.model, x0.size, cfg["num-clients"], _partition_text(cfg),
        _sampling_text(cfg), cfg["num-server-rounds"], device,
    )  # fmt: skip
    return run_plan(cfg, x0, initial_state(cfg, dataset)[1], evaluate=central_evaluator(cfg, dataset, device),
                    validate=validation_evaluator(cfg, dataset, device), recorder=recorder,
                    client_state_root=state_root, run_id=run_id, state_key=state_key,
                    start_round=resume.server_round if resume else 0, resume=resume)  # fmt: skip


def client_state_folder(cfg: Config, dataset, run_id: int, resume, record: bool) -> tuple[Path | None, int]:
    """(the run's client-state folder or None, its state key): claimed for this run before a resume restores any
    file, and a resume's node-held state checked before the recorder drops the rows past the checkpoint."""
    client_state = client_plan(cfg, dataset)
    if client_state.holds:
        log.info("fedsuite │ %s", client_state.describe())
    state_root = client_state.root(run_id)
    state_key = resume.state_key if resume is not None and resume.state_key is not None else run_id
    if state_root is not None:  # a run uses only its own client state
        claim_client_state(state_root, state_key, results_folder(cfg) if record else None)
    if resume is not None and state_root is not None:
        checkpoint.check_node_held_state(resume, checkpoint.recorded_rounds(resume_folder(cfg)))
    return state_root, state_key


def build_strategy(cfg: Config, plan: RunPlan, observers: list[RoundObserver] | tuple = ()) -> RuleStrategy:
    """The algorithm's server rule as a Flower strategy for `plan` (the composition root's, without a round loop),
    set to the checkpoint's state when the run resumes; under secure aggregation (secagg=true) it takes every FitRes
    as holding the cohort's mean."""
    return compose_run(cfg, plan, Engine(), observers).strategy


def resume_folder(cfg: Config) -> Path:
    folder = Path(cfg.run_control.resume_from).expanduser()
    return folder if folder.is_absolute() else Path(os.getcwd()) / folder


def central_evaluator(cfg: Config, dataset, device) -> Evaluator | None:
    """The server's test-set evaluation (evaluation central/both), else None."""
    if not cfg.evaluation.central:
        return None
    return Evaluator(dataset, cfg.model, device, cfg.evaluation.eval_batch_size, cfg.seed, cfg.model_args)


def run_meta(cfg: Config, dataset, parts: list[np.ndarray] | None, x0: np.ndarray, device) -> dict[str, Any]:
    """What the run was: model, versions, and the partition's sizes and label mixes (or, with server-data=false,
    that the data is on the nodes)."""
    import flwr

    meta: dict[str, Any] = {
        "model": cfg.model,
        "num_parameters": int(x0.size),
        "device": str(device),
        "versions": {"flwr": flwr.__version__, "torch": torch.__version__, "numpy": np.__version__},
    }
    if parts is None:
        meta["data"] = "on the nodes (server-data=false)"
        return meta
    sizes = np.array([len(p) for p in parts])
    meta["client_sizes"] = {"min": int(sizes.min()), "median": float(np.median(sizes)), "max": int(sizes.max())}
    if dataset.task == "classification":
        labels = dataset.train.y.numpy()
        classes = [len(np.unique(labels[p])) for p in parts]
        meta["classes_per_client"] = {
            "min": int(min(classes)),
            "mean": float(np.mean(classes)),
            "max": int(max(classes)),
        }
    return meta


def _partition_text(cfg: Config) -> str:
    if not cfg.data.on_server:
        return "data on the nodes (server-data=false)"
    if cfg.is_synthetic:
        return f"synthetic d={cfg['synthetic-dim']}, heterogeneity {cfg['synthetic-heterogeneity']:g}"
    if cfg["partition"] == "dirichlet":
        kind = "balanced" if cfg["partition-balanced"] else "unbalanced"
        return f"dirichlet α={cfg['partition-alpha']:g} ({kind})"
    return cfg.partitioning.scheme


def _sampling_text(cfg: Config) -> str:
    if cfg["sampling"] == "fixed":
        return f"{cfg['clients-per-round']} clients/round"
    return f"bernoulli p={cfg['participation']:g}"


def quiet_flower_logs() -> None:
    """One progress line per round instead of Flower's per-round INFO lines: Flower's own records below
    WARNING are dropped, fedsuite's (logger flwr.fedsuite, same handlers) still pass."""
    logging.getLogger("flwr").setLevel(logging.WARNING)
    logging.getLogger("flwr.fedsuite").setLevel(logging.INFO)


def server_fn(context: Context) -> ServerAppComponents:
    quiet_flower_logs()
    cfg = with_data_clients(resolve(context.run_config))
    plan = build_plan(cfg, run_id=int(context.run_id))
    watch_flower_exit(plan.recorder)  # `flwr stop`, a signal: recorded, though no exception reaches this thread
    # trackers here, not in build_strategy: in-process runs (simulation.experiment) add their own
    trackers = tracking_observers(cfg, plan.recorder.folder, launch_group())
    return compose_run(cfg, plan, Engine(context=context), trackers).components()


app = ServerApp(server_fn=server_fn)
