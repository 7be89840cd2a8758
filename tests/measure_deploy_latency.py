"""Round latency of a real deployment (SuperLink + 2 SuperNodes in network namespaces, TLS + node auth), at zero
compute and at real compute, with Flower's default polling and with the one interval Flower lets you set
(FLWR_SUPEREXEC_TASK_POLL_INTERVAL). Needs root and iproute2, like tests/test_deploy.py. Prints one JSON line per run.

    python -m tests.measure_deploy_latency [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from tests.deploy_testbed import Testbed
from tests.test_deploy import finish, rows, start_run

ZERO = {"dataset": "synthetic-lsq", "algorithm": "scaffold", "num-clients": 2, "clients-per-round": 2,
        "local-steps": 1, "batch-size": 10, "client-state": "disk"}  # fmt: skip
REAL = {"dataset": "fashion-mnist", "model": "2nn", "algorithm": "scaffold", "num-clients": 2,
        "clients-per-round": 2, "local-epochs": 1, "client-state": "disk"}  # fmt: skip


def measure(root: Path, poll: str | None, runs: dict[str, dict], rounds: int) -> list[dict]:
    env = {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": poll} if poll else {}
    tb = Testbed(root, hosts=2)
    out = []
    try:
        tb.up()
        tb.make_certs("node0", "node1")
        tb.spawn("superlink", tb.link, *_superlink_cmd(tb), **env)
        tb.connect()
        tb.register("node0", "node1")
        for i in (0, 1):
            state = root / f"state-{i}"
            tb.start_supernode(f"node{i}", tb.hosts[i], f"partition-id={i} num-partitions=2 "
                               f"client-state-dir='{state}'", f"node{i}", **env)  # fmt: skip
        tb.wait_online(2)
        for name, config in runs.items():
            proc = start_run(tb, {**config, "num-server-rounds": rounds}, name)
            finish(tb, proc, name, timeout=1200)
            got = rows(tb, name)[1:]
            secs = [r["round_seconds"] for r in got]
            out.append({"run": name, "poll_interval": poll or "default (1.0)", "round_seconds": secs,
                        "steady_median": statistics.median(secs[1:]),
                        "client_compute_max": [round(r["client_compute_max_seconds"], 2) for r in got]})  # fmt: skip
            print(json.dumps(out[-1]), flush=True)
    finally:
        left = tb.down()
        assert not left, left
    return out


def _superlink_cmd(tb: Testbed) -> list[str]:
    from tests.deploy_testbed import DEPLOY, PORT

    return [str(DEPLOY / "superlink"), "--certs", str(tb.certs), "--host", tb.link_addr, "--port", str(PORT)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fedsuite-latency-") as tmp:
        measure(Path(tmp) / "default", None, {"zero-compute": ZERO, "real-compute": REAL}, args.rounds)
        measure(Path(tmp) / "fast", "0.1", {"zero-compute-poll-0.1": ZERO}, args.rounds)


if __name__ == "__main__":
    main()
