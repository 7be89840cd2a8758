"""fedsuite against a plain Flower app doing the same federated training, side by side in one process.

    python -m simulation.benchmarks.peers                              # ResNet-18-GN, 10 clients × 50 steps of batch 50
    python -m simulation.benchmarks.peers --model cnn --clients 2 --steps 2 --rounds 2 --device cpu    # a check

The plain app is written the way Flower's PyTorch quickstart writes one: a `NumPyClient` whose get_parameters and
set_parameters go through the model's `state_dict`, a plain `torch.optim.SGD` loop over a `DataLoader` of the
client's partition (batches moved to the device one by one, the loss read with `.item()` every step), and Flower's
`FedAvg` strategy. Unlike the quickstart it keeps one model per process instead of building one per message, and
its SGD has no momentum, so that both sides make the same kind of step.

Both run the same workload: the same model and initial weights, the same CIFAR-10-shaped data (random files in a
temporary folder unless --data-dir is given) and partition, every client in every round, `--steps` SGD steps of
`--batch` samples per client (lr 0.01, weight decay 1e-3, no clipping), FedAvg; fedsuite also crops and flips each
batch, as it does for CIFAR. They run on the same engine, Flower's own round loop (`flwr.server.Server`) with
in-process client proxies and one client at a time: fedsuite through `fedsuite.run.inprocess.run_inprocess`, the plain
app through a `Server` of its own. A round is timed from the end of one aggregation to the end of the next; the
steady figure is the median of rounds 2..R. The plain app runs first, so it runs with the C library's own
allocator settings, as a plain app would; fedsuite then keeps freed host buffers for reuse (its run-config default
reuse-host-memory=true), or not with --host-memory return. Prints both and ends with `peers_ratio <x>` (fedsuite /
plain Flower); with --batched it also runs fedsuite with batch-clients=true and prints `peers_ratio_batched <x>`
before it.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
from flwr.client import NumPyClient
from flwr.common import Code, GetPropertiesRes, Status, ndarrays_to_parameters
from flwr.server import Server
from flwr.server.client_manager import SimpleClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg
from torch.utils.data import DataLoader, TensorDataset

from fedsuite.config.run_config import resolve
from fedsuite.config.schema import ConfigError
from fedsuite.data import client_partition, load_dataset
from fedsuite.models.networks import seeded_model
from simulation.benchmarks.fake_cifar import write_fake_cifar10
from simulation.benchmarks.gpu_round import (
    BATCHED,
    HOST_MEMORY,
    one_line,
    reference_config,
    steady,
    suite_path,
    sync,
    workload_arguments,
)

LR, WEIGHT_DECAY = 0.01, 1e-3


class PlainClient(NumPyClient):
    """The quickstart's client: parameters through the state_dict, an SGD loop over a DataLoader."""

    def __init__(self, net: torch.nn.Module, trainloader: DataLoader, steps: int, device: torch.device):
        self.net, self.trainloader, self.steps, self.device = net, trainloader, steps, device

    def get_parameters(self, config):
        return [val.cpu().numpy() for _, val in self.net.state_dict().items()]

    def set_parameters(self, parameters):
        params_dict = zip(self.net.state_dict().keys(), parameters, strict=True)
        state_dict = OrderedDict({k: torch.tensor(v) for k, v in params_dict})
        self.net.load_state_dict(state_dict, strict=True)

    def fit(self, parameters, config):
        self.set_parameters(parameters)
        train_loss = train(self.net, self.trainloader, self.steps, self.device)
        return self.get_parameters({}), len(self.trainloader.dataset), {"train_loss": train_loss}


def train(net: torch.nn.Module, trainloader: DataLoader, steps: int, device: torch.device) -> float:
    """`steps` SGD steps over the loader (reshuffled when it runs out); the mean training loss."""
    criterion = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    net.train()
    running_loss, done = 0.0, 0
    while done < steps:
        for images, labels in trainloader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = criterion(net(images), labels)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
            done += 1
            if done == steps:
                break
    return running_loss / max(done, 1)


class PlainApp:
    """What the plain app's processes hold: one model, and each partition's DataLoader once loaded."""

    def __init__(self, run_config: dict, device: torch.device):
        self.cfg, self.device = resolve(run_config), device
        self.dataset = load_dataset(self.cfg)
        self.parts = client_partition(self.cfg, self.dataset)
        ds = self.dataset
        self.net = seeded_model(self.cfg.model, ds.input_shape, ds.num_classes, ds.task, self.cfg.seed).to(device)
        self.initial = [val.detach().cpu().numpy().copy() for val in self.net.state_dict().values()]
        self.loaders: dict[int, DataLoader] = {}

    def client_fn(self, partition_id: int):
        if partition_id not in self.loaders:
            ds, rows = self.dataset, self.parts[partition_id]
            inputs = ds.features(ds.train, rows, "cpu")
            labels = ds.train.y[torch.as_tensor(rows, dtype=torch.long)]
            generator = torch.Generator().manual_seed(partition_id)
            self.loaders[partition_id] = DataLoader(TensorDataset(inputs, labels), batch_size=self.cfg.local.batch_size,
                                                    shuffle=True, generator=generator)  # fmt: skip
        return PlainClient(self.net, self.loaders[partition_id], self.cfg.local.steps, self.device).to_client()


class PlainProxy(ClientProxy):
    """A client of the plain app called in this process, through Flower's NumPyClient wrapper."""

    def __init__(self, cid: str, app: PlainApp):
        super().__init__(cid)
        self.app = app

    def get_properties(self, ins, timeout, group_id):
        return GetPropertiesRes(Status(Code.OK, ""), {})

    def get_parameters(self, ins, timeout, group_id):
        return self.app.client_fn(int(self.cid)).get_parameters(ins)

    def fit(self, ins, timeout, group_id):
        return self.app.client_fn(int(self.cid)).fit(ins)

    def evaluate(self, ins, timeout, group_id):
        return self.app.client_fn(int(self.cid)).evaluate(ins)

    def reconnect(self, ins, timeout, group_id):
        return GetPropertiesRes(Status(Code.OK, ""), {})


class TimedFedAvg(FedAvg):
    """Flower's FedAvg, noting when each round's aggregation ends."""

    def __init__(self, device: torch.device, **kwargs):
        super().__init__(**kwargs)
        self.device, self.seconds, self._last = device, [], time.perf_counter()

    def aggregate_fit(self, server_round, results, failures):
        out = super().aggregate_fit(server_round, results, failures)
        sync(self.device)
        now = time.perf_counter()
        self.seconds.append(now - self._last)
        self._last = now
        return out


def weighted_train_loss(metrics: list[tuple[int, dict]]) -> dict:
    """The cohort's training loss, weighted by the clients' examples."""
    total = sum(n for n, _ in metrics)
    return {"train_loss": sum(n * float(m["train_loss"]) for n, m in metrics) / max(total, 1)}


def plain_path(run_config: dict, rounds: int, device: torch.device) -> dict:
    app = PlainApp(run_config, device)
    count = app.cfg.num_clients
    strategy = TimedFedAvg(device, fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=count,
                           min_evaluate_clients=0, min_available_clients=count,
                           initial_parameters=ndarrays_to_parameters(app.initial),
                           fit_metrics_aggregation_fn=weighted_train_loss)  # fmt: skip
    server = Server(client_manager=SimpleClientManager(), strategy=strategy)
    server.set_max_workers(1)  # one client at a time, as fedsuite's in-process runs
    for pid in range(count):
        server.client_manager().register(PlainProxy(str(pid), app))
    strategy._last = time.perf_counter()
    server.fit(num_rounds=rounds, timeout=None)
    return {"seconds": strategy.seconds, "steady_s": steady(strategy.seconds)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.benchmarks.peers", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--batched",
        action="store_true",
        help="also fedsuite with batch-clients=true (prints peers_ratio_batched before peers_ratio)",
    )
    args = workload_arguments(parser, argv, "side")
    device = torch.device(args.device)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        data_dir = args.data_dir or str(write_fake_cifar10(Path(tmp), args.clients * args.samples, 1000))
        run_config = {**reference_config(args, "fedavg", data_dir), "clip-norm": 0.0, "lr": LR,
                      "weight-decay": WEIGHT_DECAY}  # fmt: skip
        try:
            resolve(run_config)
        except ConfigError as err:
            parser.error(one_line(err))
        card = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        print(f"device {card}, torch {torch.__version__}; model {args.model}, {args.clients} clients × {args.steps} "
              f"steps of batch {args.batch}, FedAvg, {args.rounds} rounds (steady: median of rounds 2..{args.rounds})"
              f"; freed host buffers {HOST_MEMORY[args.host_memory]} in fedsuite (the plain app runs first, with "
              f"the C library's defaults)", flush=True)  # fmt: skip
        plain = plain_path(run_config, args.rounds, device)  # first: fedsuite's allocator setting is the process's
        print(f"plain Flower (quickstart-style NumPyClient): {plain['steady_s']:.3f} s/round", flush=True)
        suite = suite_path(run_config, device)
        print(f"fedsuite: {suite['steady_s']:.3f} s/round", flush=True)
        batched = suite_path({**run_config, **BATCHED}, device) if args.batched else None
        if batched is not None:
            fell = f" (fell back: {'; '.join(batched['fell_back'])})" if batched["fell_back"] else ""
            print(f"fedsuite, batch-clients=true: {batched['steady_s']:.3f} s/round{fell}", flush=True)
    ratio = suite["steady_s"] / plain["steady_s"]
    if batched is not None:
        print(f"peers_ratio_batched {batched['steady_s'] / plain['steady_s']:.3f}")
    if args.json:
        report = {"device": card, "torch": torch.__version__, "model": args.model, "clients": args.clients,
                  "steps": args.steps, "batch": args.batch, "rounds": args.rounds, "fedsuite": suite,
                  "plain_flower": plain, "peers_ratio": ratio, "host_memory": args.host_memory}  # fmt: skip
        if batched is not None:
            report.update(fedsuite_batched=batched, peers_ratio_batched=batched["steady_s"] / plain["steady_s"])
        Path(args.json).write_text(json.dumps(report, indent=2, default=lambda v: np.asarray(v).tolist()))
    print(f"peers_ratio {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
