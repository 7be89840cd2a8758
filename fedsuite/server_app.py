"""Flower ServerApp: resolve the run config → build dataset, evaluator, sampler, results folder → strategy."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.common import Context
from flwr.server import History, Server, ServerApp, ServerAppComponents, ServerConfig
from flwr.server.client_manager import SimpleClientManager

from fedsuite import checkpoint, registry, state
from fedsuite.config import Config, resolve
from fedsuite.data import client_partition, load_dataset
from fedsuite.device import pick_device
from fedsuite.evaluation import Evaluator
from fedsuite.models import initial_vector
from fedsuite.results import RunRecorder, default_run_name
from fedsuite.sampling import Sampler
from strategies.base import RunAborted, RunPlan

log = logging.getLogger("flwr.fedsuite")


def initial_model(cfg: Config, dataset) -> np.ndarray:
    x0 = initial_vector(cfg.model, dataset.input_shape, dataset.num_classes, dataset.task, int(cfg["seed"]))
    return x0.numpy().astype(np.float32)


def results_folder(cfg: Config) -> Path:
    """out-dir/run-name, or the resumed run's folder (resume-from). A relative out-dir is taken from the
    ServerApp's working directory, which for the local simulation SuperLink is the folder `flwr run` first
    started it from (simulation.run passes an absolute path)."""
    if cfg["resume-from"]:
        return resume_folder(cfg)
    root = Path(str(cfg["out-dir"])).expanduser()
    if not root.is_absolute():
        root = Path(os.getcwd()) / root
    return root / (str(cfg["run-name"]) or default_run_name(str(cfg["algorithm"]), str(cfg["dataset"])))


def client_state_root(cfg: Config, dim: int, run_id: int) -> Path | None:
    """Where this run's client-state files are (clients compute the same from the run config), or None."""
    vectors = registry.ALGORITHMS[str(cfg["algorithm"])].client_state_vectors(cfg)
    if not vectors:
        return None
    where = state.choose_backend(str(cfg["client-state"]), int(cfg["num-clients"]), dim, vectors,
                                 float(cfg["client-state-budget-mb"]))  # fmt: skip
    return state.state_root(where, str(cfg["client-state-dir"]), run_id)


def build_plan(cfg: Config, record: bool = True, run_id: int = 0) -> RunPlan:
    resume = checkpoint.load(resume_folder(cfg)) if cfg["resume-from"] else None
    if resume is not None:
        checkpoint.check_compatible(resume, dict(cfg))
        log.info("fedsuite │ resuming from %s (after round %d)", resume.folder, resume.server_round)
    dataset = load_dataset(cfg)
    x0 = initial_model(cfg, dataset)
    parts = client_partition(cfg, dataset)
    sampler = Sampler(int(cfg["num-clients"]), str(cfg["sampling"]), int(cfg["clients-per-round"]),
                      float(cfg["participation"]), int(cfg["seed"]))  # fmt: skip
    device = pick_device(str(cfg["device"]))
    vectors = registry.ALGORITHMS[str(cfg["algorithm"])].client_state_vectors(cfg)
    if vectors:
        log.info("fedsuite │ %s", state.describe(str(cfg["client-state"]), int(cfg["num-clients"]), x0.size, vectors,
                                                  float(cfg["client-state-budget-mb"])))  # fmt: skip
    state_root = client_state_root(cfg, x0.size, run_id)
    recorder = None
    if record:
        folder = results_folder(cfg)
        meta = run_meta(cfg, dataset, parts, x0, device)
        meta.update(run_id=run_id, client_state_dir=str(state_root) if state_root else None)  # for the reaper
        recorder = RunRecorder(folder, dict(cfg), meta, cfg.targets,
                               int(cfg["num-server-rounds"]), bool(cfg["overwrite"]),
                               resume.rows if resume else None)  # fmt: skip
        log.info("fedsuite │ results → %s", folder)
    log.info(
        "fedsuite │ %s on %s │ model %s, d=%d │ %d clients, %s │ %s │ %d rounds │ device %s",
        cfg["algorithm"], cfg["dataset"], cfg.model, x0.size, cfg["num-clients"], _partition_text(cfg),
        _sampling_text(cfg), cfg["num-server-rounds"], device,
    )  # fmt: skip
    return RunPlan(
        initial_x=x0,
        sampler=sampler,
        num_rounds=int(cfg["num-server-rounds"]),
        lr=float(cfg["lr"]),
        lr_decay=float(cfg["lr-decay"]),
        weighting=str(cfg["weighting"]),
        agg_scale=str(cfg["agg-scale"]),
        eval_every=int(cfg["eval-every"]),
        evaluate=Evaluator(dataset, cfg.model, device, int(cfg["eval-batch-size"])),
        recorder=recorder,
        min_replies=float(cfg["min-replies"]),
        divergence_factor=float(cfg["divergence-factor"]),
        algorithm=str(cfg["algorithm"]),
        client_mapping=str(cfg["client-mapping"]),
        client_state_root=state_root,
        run_id=run_id,
        checkpoint_every=int(cfg["checkpoint-every"]),
        run_config=dict(cfg),
        start_round=resume.server_round if resume else 0,
        resume=resume,
    )


def build_strategy(cfg: Config, plan: RunPlan):
    """The algorithm's strategy for `plan`, set to the checkpoint's state when the run resumes."""
    strategy = registry.build_strategy(cfg, plan)
    if plan.resume is not None:
        checkpoint.restore(strategy, plan.resume, plan.client_state_root)
    return strategy


def resume_folder(cfg: Config) -> Path:
    folder = Path(str(cfg["resume-from"])).expanduser()
    return folder if folder.is_absolute() else Path(os.getcwd()) / folder


def run_meta(cfg: Config, dataset, parts: list[np.ndarray], x0: np.ndarray, device) -> dict[str, Any]:
    import flwr

    sizes = np.array([len(p) for p in parts])
    meta: dict[str, Any] = {
        "model": cfg.model,
        "num_parameters": int(x0.size),
        "device": str(device),
        "versions": {"flwr": flwr.__version__, "torch": torch.__version__, "numpy": np.__version__},
        "client_sizes": {"min": int(sizes.min()), "median": float(np.median(sizes)), "max": int(sizes.max())},
    }
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
    if cfg.is_synthetic:
        return f"synthetic d={cfg['synthetic-dim']}, heterogeneity {cfg['synthetic-heterogeneity']:g}"
    if cfg["partition"] == "dirichlet":
        kind = "balanced" if cfg["partition-balanced"] else "unbalanced"
        return f"dirichlet α={cfg['partition-alpha']:g} ({kind})"
    return str(cfg["partition"])


def _sampling_text(cfg: Config) -> str:
    if cfg["sampling"] == "fixed":
        return f"{cfg['clients-per-round']} clients/round"
    return f"bernoulli p={cfg['participation']:g}"


def quiet_flower_logs() -> None:
    """One progress line per round instead of Flower's per-round INFO lines: Flower's own records below
    WARNING are dropped, fedsuite's (logger flwr.fedsuite, same handlers) still pass."""
    logging.getLogger("flwr").setLevel(logging.WARNING)
    logging.getLogger("flwr.fedsuite").setLevel(logging.INFO)


class RecordingServer(Server):
    """Flower's round loop, plus: whatever ends the run early is written to summary.json before it propagates
    (a strategy's RunAborted has written its own status; any other exception is `failed`, an interruption
    `interrupted`), so a results folder never says `running` about a run that has stopped."""

    def __init__(self, strategy, recorder, remove_client_state: bool = True):
        super().__init__(client_manager=SimpleClientManager(), strategy=strategy)
        self.recorder = recorder
        self.remove_client_state = remove_client_state

    def fit(self, num_rounds: int, timeout: float | None):
        try:
            return self._rounds(num_rounds, timeout)
        except RunAborted:
            raise
        except (KeyboardInterrupt, SystemExit) as err:
            self._finish("interrupted", f"the ServerApp was stopped ({type(err).__name__})")
            raise
        except BaseException as err:
            self._finish("failed", f"{type(err).__name__}: {err}")
            raise
        finally:
            self._remove_run_state()

    def _remove_run_state(self) -> None:
        """A per-run client-state folder (in RAM for client-state memory) goes with the run; checkpoints hold
        their own copies. A configured client-state-dir is the user's and stays."""
        plan = self.strategy.plan
        root = plan.client_state_root
        if self.remove_client_state and root is not None and state.is_run_scoped(root, plan.run_id):
            shutil.rmtree(root, ignore_errors=True)

    def _rounds(self, num_rounds: int, timeout: float | None):
        """Flower's round loop (fit, then the strategy's centralised evaluation; clients do not evaluate, §2.7),
        starting after the checkpoint's round when the run resumes."""
        start = self.strategy.plan.start_round
        self.parameters = self.strategy.initialize_parameters(self.client_manager())
        started = time.perf_counter()
        if start == 0:
            self.strategy.evaluate(0, self.parameters)
        for server_round in range(start + 1, num_rounds + 1):
            res = self.fit_round(server_round, timeout)
            if res is not None and res[0] is not None:
                self.parameters = res[0]
            self.strategy.evaluate(server_round, self.parameters)
        return History(), time.perf_counter() - started

    def _finish(self, status: str, reason: str) -> None:
        if self.recorder is not None:
            log.error("fedsuite │ %s: %s", status, reason)
            if self.recorder.resume_command:
                log.error("fedsuite │ resume from the last checkpoint with: %s", self.recorder.resume_command)
            self.recorder.finish(status, reason)


def server_fn(context: Context) -> ServerAppComponents:
    quiet_flower_logs()
    cfg = resolve(context.run_config)
    plan = build_plan(cfg, run_id=int(context.run_id))
    strategy = build_strategy(cfg, plan)
    return ServerAppComponents(
        server=RecordingServer(strategy, plan.recorder),
        config=ServerConfig(
            num_rounds=int(cfg["num-server-rounds"]), round_timeout=float(cfg["round-timeout"]) or None
        ),
    )


app = ServerApp(server_fn=server_fn)
