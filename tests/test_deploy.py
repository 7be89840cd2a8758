"""A real multi-host deployment (tests/deploy_testbed.py): a SuperLink and SuperNodes in separate network
namespaces, TLS and SuperNode authentication on, every daemon started through deploy/. Marked `deploy` (needs
root and iproute2; .ci/run runs these in its deployment stage).

Each SuperNode host has a table folder of its own (node config data-dir; different sizes and label mixes) and
nothing else; the SuperLink holds no dataset (server-data=false) and the nodes evaluate the global model on their
own test files (evaluation='federated'). Node 1's operator admits only models and loaders from `mylab` (node config
allowed-modules). The SuperLink keeps its state in a database file, so it can be killed and started again.

The stateful runs are checked against `run_inprocess` on the same run config and node configs: the deployment must
end exactly where an uninterrupted in-process federation ends (or one that lost the same replies), which it cannot
if a SuperNode restart lost its client state (the in-process negative control shows the comparison would notice)
or a resumed SuperLink did not continue from its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

from fedsuite.results import checkpoint
from fedsuite.run.inprocess import InProcessProxy, client_store, remove_client_state, run_inprocess
from fedsuite.state.files import read_arrays
from tests.deploy_testbed import DEPLOY, Testbed, available
from tests.observing import Rows

pytestmark = [pytest.mark.deploy, pytest.mark.skipif(available() is not None, reason=str(available()))]

LSQ = {"dataset": "synthetic-lsq", "algorithm": "scaffold", "num-clients": 2, "synthetic-dim": 10,
       "synthetic-samples": 30, "local-steps": 5, "batch-size": 10, "lr": 0.02, "eval-every": 1,
       "client-state": "disk"}  # fmt: skip
NODE_DATA = [(40, 10, (0, 1)), (60, 8, (1, 2))]  # per node: training rows, test rows, its labels
NODE_ONLY = {"dataset": "table", "model": "logreg", "label-column": "label", "server-data": False, "input-shape": "3",
             "num-classes": 3, "evaluation": "federated", "data-dir": "/nonexistent/no-data-on-the-superlink",
             "num-clients": 2, "local-steps": 5, "batch-size": 10, "lr": 0.05}  # fmt: skip
# seed 6 with 1 of 2 clients per round draws partitions 0, 1, 0: node 0 sits out round 2 (fedsuite.server.sampling)
# every federated evaluation is one more message per node (≈ 15 s here): only the last round of the longer runs
RESTART = {**NODE_ONLY, "algorithm": "scaffold", "client-state": "disk", "clients-per-round": 1,
           "num-server-rounds": 3, "eval-every": 3, "seed": 6}  # fmt: skip
ALLOWED = "mylab"  # node 1's allow-list; examples/ ships in the app bundle, so every node could import this model
# SCAFFOLD, its c_i on the nodes (client-state-dir), with an import-path model that node 1's allow-list refuses:
# node 0 trains alone (min-replies 0.5); checkpoint-every=1, as deployments with node-held state need
CRASH = {**NODE_ONLY, "algorithm": "scaffold", "client-state": "disk",
         "model": "examples.own_model.models:frozen_features", "model-args": "{hidden=8}", "min-replies": 0.5,
         "clients-per-round": 2, "num-server-rounds": 2, "eval-every": 2, "checkpoint-every": 1, "seed": 5}  # fmt: skip
MIDROUND = {**LSQ, "clients-per-round": 2, "num-server-rounds": 4, "min-replies": 0.5}
# above the first round (app install and imports, ≈ 25 s), below the SuperLink's heartbeat expiry (≈ 55-60 s)
TIMEOUT = {**MIDROUND, "num-server-rounds": 3, "round-timeout": 45.0}
# SCAFFOLD through SecAgg+ with client-level DP whose noise shares each node draws with its own dp-noise-secret:
# the server's rule gets only the cohort's noisy mean (docs/privacy-secagg.md); checkpoint-every=2 keeps the final
# model; the comparison with the in-process run needs noise both can draw again: dp-noise-source='seeded'
# (docs/privacy.md)
SECURE = {**NODE_ONLY, "algorithm": "scaffold", "client-state": "disk", "client-mapping": "fixed", "secagg": True,
          "dp": "clients", "dp-noise": 0.5, "dp-clip": 1.0, "clients-per-round": 2, "num-server-rounds": 2,
          "eval-every": 2, "checkpoint-every": 2, "seed": 3, "dp-noise-source": "seeded"}  # fmt: skip
NOISE_SECRETS = (90_210_573_311, 4_021_886_907)  # each node's own, unknown to the server (node config dp-noise-secret)


def write_node_data(root) -> list[dict]:
    """Each node's own table folder (train.csv, test.csv); returns the node configs of the in-process reference."""
    import pandas as pd

    rng = np.random.default_rng(0)
    configs = []
    for i, (train_rows, test_rows, labels) in enumerate(NODE_DATA):
        folder = root / f"node-data-{i}"
        folder.mkdir(parents=True, exist_ok=True)
        for split, n in (("train", train_rows), ("test", test_rows)):
            y = rng.choice(labels, n)
            x = rng.normal(size=(n, 3)) + y[:, None]
            frame = pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "label": y})
            frame.to_csv(folder / f"{split}.csv", index=False)
        configs.append(
            {"partition-id": i, "num-partitions": 2, "data-dir": str(folder), "dp-noise-secret": NOISE_SECRETS[i]}
        )
    configs[1]["allowed-modules"] = ALLOWED
    return configs


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    root = tmp_path_factory.mktemp("deploy")
    tb = Testbed(root, hosts=3)
    tb.node_configs = write_node_data(root)
    try:
        tb.up()
        tb.make_certs("node0", "node1", "rogue")
        tb.start_superlink("--database", str(root / "superlink.db"))
        tb.connect()
        tb.register("node0", "node1")  # not rogue
        for i in (0, 1):
            start_node(tb, i)
        tb.wait_online(2)
        yield tb
    finally:
        left = tb.down()
        assert not left, f"could not clean up: {left}"


def start_node(tb: Testbed, i: int) -> subprocess.Popen:
    state, own = tb.root / f"state-{i}", tb.node_configs[i]
    allow = f" allowed-modules='{own['allowed-modules']}'" if "allowed-modules" in own else ""
    node_config = (f"partition-id={i} num-partitions=2 client-state-dir='{state}' data-dir='{own['data-dir']}'"
                   f" dp-noise-secret={own['dp-noise-secret']}{allow}")  # fmt: skip
    return tb.start_supernode(f"node{i}", tb.hosts[i], node_config, f"node{i}")


def start_run(tb: Testbed, config: dict, name: str, role: str | None = None) -> subprocess.Popen:
    overrides = {**config, "out-dir": str(tb.root / "results"), "run-name": name}
    text = " ".join(f"{k}={json.dumps(v)}" for k, v in overrides.items())
    return tb.spawn(role or f"run-{name}", tb.link, str(DEPLOY / "run"), "testbed", "-c", text, home=tb.cli_home)


def rows(tb: Testbed, name: str) -> list[dict]:
    path = tb.root / "results" / name / "rounds.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(predicate, proc: subprocess.Popen, tb: Testbed, role: str, timeout: float = 240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        assert proc.poll() is None, f"the run ended early:\n{tb.log(role)[-4000:]}"
        time.sleep(0.2)
    raise AssertionError(f"timed out:\n{tb.log(role)[-4000:]}")


def finish(tb: Testbed, proc: subprocess.Popen, name: str, timeout: float = 300, role: str | None = None) -> dict:
    proc.wait(timeout=timeout)
    log = tb.log(role or f"run-{name}")
    assert proc.returncode == 0, log[-4000:]
    assert "finished:completed" in log
    summary = json.loads((tb.root / "results" / name / "summary.json").read_text())
    assert summary["status"] == "completed", summary
    return summary


def inprocess(config: dict, state_dir, keep_client_state: bool = False):
    """The same federation in this process (client state in a fresh folder of its own, kept after the run if
    asked)."""
    return run_inprocess({**config, "client-state-dir": str(state_dir)}, keep_client_state=keep_client_state)


def inprocess_nodes(config: dict, node_configs: list[dict], state_dir, **keys) -> tuple:
    """The same node-only federation in this process, one node per node config (the deployment's data-dir and
    allow-list); returns the strategy and its rows."""
    rows = Rows()
    run = {**config, "client-mapping": "fixed", "client-state-dir": str(state_dir), **keys}
    return run_inprocess(run, observers=[rows], node_configs=node_configs), rows.rows


def untimed(rows: list[dict]) -> list[dict]:
    """Rows without their wall-clock columns (round_seconds, elapsed_seconds, client_compute_seconds, …: the only
    ones that may differ), after a JSON round trip as rounds.jsonl holds them."""
    return [{k: v for k, v in json.loads(json.dumps(r)).items() if not k.endswith("seconds")} for r in rows]


def error_of(strategy) -> float:
    return strategy.plan.evaluate(strategy.x)["relative_error"]


def final_error(tb: Testbed, name: str) -> float:
    return rows(tb, name)[-1]["relative_error"]


def test_unregistered_and_plain_text_supernodes_are_refused(bed):
    rogue = bed.start_supernode("rogue", bed.hosts[2], "partition-id=0 num-partitions=2", "rogue")
    rogue.wait(timeout=90)
    assert rogue.returncode != 0 and "Failed to activate SuperNode" in bed.log("rogue")
    plain = bed.start_supernode("plain", bed.hosts[2], "partition-id=0 num-partitions=2", None, "--insecure", "--",
                                "--max-retries", "2", "--max-wait-time", "20")  # fmt: skip
    plain.wait(timeout=90)
    assert plain.returncode != 0 and "WARNING: this SuperNode runs WITHOUT TLS" in bed.log("plain")
    assert "Failed to initialize the connection to the SuperLink" in bed.log("plain")
    nodes = bed.nodes()
    assert len(nodes) == 2 and all(n["status"] == "online" for n in nodes)  # nobody else got in


def test_supernode_restart_between_rounds_keeps_its_client_state(bed):
    """Node-only data (server-data=false, each node its own table, federated evaluation), SCAFFOLD: node 0 trains in
    round 1, is stopped (SIGTERM) and restarted while round 2 runs on node 1 alone, and trains again in round 3 with
    the c_i it wrote in round 1: the run ends exactly where the in-process one does, the nodes' test metrics
    included."""
    started = time.monotonic()
    proc = start_run(bed, RESTART, "restart")
    wait_for(lambda: len(rows(bed, "restart")) >= 2, proc, bed, "run-restart")  # rows 0 and 1: round 2 started
    (state_file,) = (bed.root / "state-0").glob("run-*/partition-000000.state")  # one subfolder per run
    before = read_arrays(state_file)
    assert np.abs(before["c_i"]).sum() > 0  # SCAFFOLD wrote a non-zero control variate in round 1
    old = bed.processes("node0")
    assert old and not bed.stop("node0")
    start_node(bed, 0)
    assert not set(old) & set(bed.processes("node0"))
    after = read_arrays(state_file)
    assert after.keys() == before.keys() and all(np.array_equal(after[k], before[k]) for k in before)
    finish(bed, proc, "restart")
    got = rows(bed, "restart")
    assert [r["replies"] for r in got[1:]] == [1, 1, 1] and got[-1]["failures"] == 0
    assert sorted(got[-1]["fed_client_accuracy"]) == ["0"] and got[-1]["fed_failures"] == 0  # node 0 evaluated
    assert state_file.stat().st_mtime > time.time() - 120  # node 0 wrote its state again in round 3
    meta = json.loads((bed.root / "results" / "restart" / "config.json").read_text())
    assert "client_sizes" not in meta  # the server saw no data
    _, reference = inprocess_nodes(RESTART, bed.node_configs, bed.root / "ref-restart")
    assert untimed(got) == untimed(reference)
    print(f"node-only SCAFFOLD run with a node restart: {time.monotonic() - started:.0f} s")


def test_the_comparison_would_notice_a_lost_client_state(tmp_path):
    """Negative control for the test above: had node 0 lost its c_i in the restart, the end point would differ."""
    fit = InProcessProxy.fit

    def forgetful(self, ins, timeout, group_id):
        if int(ins.config["round"]) == 3:
            for path in (tmp_path / "forgetful").glob("partition-000000.state"):
                path.unlink()
        return fit(self, ins, timeout, group_id)

    nodes = write_node_data(tmp_path)
    _, reference = inprocess_nodes(RESTART, nodes, tmp_path / "reference")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(InProcessProxy, "fit", forgetful)
        _, lost = inprocess_nodes(RESTART, nodes, tmp_path / "forgetful")
    assert untimed(lost[:3]) == untimed(reference[:3])
    assert lost[-1]["fed_loss"] != pytest.approx(reference[-1]["fed_loss"], rel=1e-4)


def test_supernode_dying_mid_round_is_left_out_and_rejoins(bed):
    """Node 0 is killed (SIGKILL, as in a crash) while its round-2 ClientApp runs: round 2 completes with node 1
    (min-replies 0.5) once the SuperLink declares node 0 unavailable (a restart before that is refused), node 0 is
    started again and trains in the last round; the end point equals an in-process
    run that lost node 0's replies in the same rounds (so no client state ran ahead of the server's)."""
    proc = start_run(bed, MIDROUND, "midround")
    wait_for(lambda: len(rows(bed, "midround")) >= 2, proc, bed, "run-midround")
    wait_for(lambda: _clientapp_running(bed, "node0"), proc, bed, "run-midround")
    killed_at = time.monotonic()
    assert not bed.stop("node0", signal_first=False)
    # Started again at once, it is refused: the SuperLink still holds its old session until the heartbeat lapses.
    seen = len(bed.log("node0"))
    start_node(bed, 0).wait(timeout=60)
    assert bed.procs["node0"].returncode != 0 and "Failed to activate SuperNode" in bed.log("node0")[seen:]
    wait_for(lambda: len(rows(bed, "midround")) >= 3, proc, bed, "run-midround", timeout=180)
    round2_seconds = time.monotonic() - killed_at
    start_node(bed, 0)
    finish(bed, proc, "midround")
    got = rows(bed, "midround")
    assert got[2]["replies"] == 1 and got[2]["failures"] == 1
    assert got[-1]["replies"] == 2  # node 0 rejoined
    lost_rounds = {r["round"] for r in got[1:] if r["replies"] == 1}
    assert 2 in lost_rounds and 4 not in lost_rounds
    problems = (bed.root / "results" / "midround" / "clients.log").read_text()
    assert "round 2" in problems
    reference = _run_losing(MIDROUND, lost_rounds, bed.root / "ref-midround")
    assert final_error(bed, "midround") == pytest.approx(error_of(reference), rel=1e-6)
    print(f"round 2 took {round2_seconds:.1f} s after the kill (SuperLink heartbeat expiry)")


def test_round_timeout_ends_a_round_waiting_on_a_frozen_supernode(bed):
    """`round-timeout` bounds a round: every process of node 0 is frozen (SIGSTOP) while its round-2 ClientApp
    runs, so neither its reply nor its heartbeat comes. Round 2 ends with node 1's reply when the messages expire,
    before the SuperLink would declare node 0 gone; thawed, node 0 trains in round 3 from the state the server
    accepted (its unconfirmed round-2 training is discarded), so the end point equals an in-process run that lost
    node 0's round-2 reply."""
    proc = start_run(bed, TIMEOUT, "timeout")
    wait_for(lambda: len(rows(bed, "timeout")) >= 2, proc, bed, "run-timeout")
    wait_for(lambda: _clientapp_running(bed, "node0"), proc, bed, "run-timeout")
    frozen = bed.processes("node0")
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: len(rows(bed, "timeout")) >= 3, proc, bed, "run-timeout", timeout=120)
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    finish(bed, proc, "timeout")
    got = rows(bed, "timeout")
    assert got[1]["replies"] == 2, "round 1 took longer than round-timeout"
    assert got[2]["replies"] == 1 and got[2]["failures"] == 1
    assert got[2]["round_seconds"] < TIMEOUT["round-timeout"] + 8  # the timeout ended it, not the heartbeat
    assert got[3]["replies"] == 2  # node 0 thawed before the SuperLink gave it up
    reference = _run_losing(TIMEOUT, {2}, bed.root / "ref-timeout")
    assert final_error(bed, "timeout") == pytest.approx(error_of(reference), rel=1e-6)
    print(f"round 2 took {got[2]['round_seconds']:.1f} s (round-timeout {TIMEOUT['round-timeout']} s)")


def test_slow_supernode_misses_the_round_deadline_and_rejoins_consistent(bed):
    """A slow SuperNode under `round-timeout`: every ClientApp process of node 0 is held (SIGSTOP on those processes
    only, each new one as its SuperExec starts it) while round 2 runs, so the SuperNode stays connected and keeps
    its heartbeat but its work does not arrive in time. Round 2 ends at the timeout with node 1's reply alone.
    Released, the held ClientApps find their task given up (Flower revokes a task whose ClientApp stopped
    answering), so whatever they did, nothing of round 2 counts. In round 3 node 0 trains from the state the server
    accepted (round 1's), so both the end point and node 0's final control variate equal those of an in-process run
    that lost node 0's round-2 reply (docs/running/systems.md)."""
    name, node_state = "slow", bed.root / "state-0"
    before = set(node_state.glob("run-*"))
    proc = start_run(bed, TIMEOUT, name)
    wait_for(lambda: len(rows(bed, name)) >= 2, proc, bed, f"run-{name}")
    held: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while len(rows(bed, name)) < 3:  # hold every ClientApp of node 0 until round 2 is recorded
            assert time.monotonic() < deadline and proc.poll() is None, bed.log(f"run-{name}")[-4000:]
            for pid in set(_clientapps(bed, "node0")) - held:
                os.kill(pid, signal.SIGSTOP)
                held.add(pid)
            time.sleep(0.05)
        assert held and all(pid in held or _running(pid) for pid in bed.processes("node0"))  # the SuperNode went on
    finally:
        for pid in held:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    finish(bed, proc, name)
    got = rows(bed, name)
    assert got[1]["replies"] == 2, "round 1 took longer than round-timeout"
    assert got[2]["replies"] == 1 and got[2]["failures"] == 1
    assert got[2]["round_seconds"] < TIMEOUT["round-timeout"] + 8  # the deadline ended the round
    assert got[3]["replies"] == 2 and got[3]["failures"] == 0  # node 0 is back
    reference = _run_losing(TIMEOUT, {2}, bed.root / "ref-slow", keep_client_state=True)
    assert final_error(bed, name) == pytest.approx(error_of(reference), rel=1e-6)
    (run_folder,) = set(node_state.glob("run-*")) - before
    node_c = read_arrays(run_folder / "partition-000000.state")["c_i"]
    reference_c = client_store(reference, 0)["c_i"]
    assert np.allclose(node_c, reference_c, rtol=1e-5, atol=1e-7), np.abs(node_c - reference_c).max()
    remove_client_state(reference)
    print(f"round 2 took {got[2]['round_seconds']:.1f} s (round-timeout {TIMEOUT['round-timeout']} s), "
          f"{len(held)} ClientApp processes held")  # fmt: skip


def _clientapps(tb: Testbed, role: str) -> list[int]:
    """The PIDs of `role`'s flwr-clientapp processes (one per message it handles)."""
    found = []
    for pid in tb.processes(role):
        try:
            if b"flwr-clientapp" in open(f"/proc/{pid}/cmdline", "rb").read():
                found.append(pid)
        except OSError:
            pass
    return found


def _running(pid: int) -> bool:
    """Whether process `pid` is running (not stopped, not a zombie)."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("T", "t", "Z")


def test_scaffold_with_secagg_and_node_noise_equals_the_inprocess_run(bed):
    """SCAFFOLD with SecAgg+ and client-level DP, each node adding its noise share drawn with its own
    dp-noise-secret, over TLS with node authentication: the rows and the final model bytes equal the in-process run
    of SecAgg+'s arithmetic with the same node configs. Two negative controls (in process) show the comparison
    would notice the protocol missing (the plain sum ends elsewhere, by the quantisation) and a server that guessed
    the nodes' noise without their secrets."""
    name, started = "secure", time.monotonic()
    proc = start_run(bed, SECURE, name)
    finish(bed, proc, name)
    got = rows(bed, name)
    assert [r["replies"] for r in got[1:]] == [2, 2] and all(r["failures"] == 0 for r in got[1:])
    assert all(r["dp_epsilon"] > 0 and r["train_loss"] is None for r in got[1:])  # private clients report no loss
    reference, reference_rows = inprocess_nodes(SECURE, bed.node_configs, bed.root / "ref-secure")
    assert untimed(got) == untimed(reference_rows)
    final = np.asarray(checkpoint.load(bed.root / "results" / name).state["rule"]["x"])
    assert final.tobytes() == reference.x.tobytes()
    plain, _ = inprocess_nodes({**SECURE, "secagg": False}, bed.node_configs, bed.root / "ref-secure-plain")
    assert plain.x.tobytes() != final.tobytes()
    secretless = [{k: v for k, v in c.items() if k != "dp-noise-secret"} for c in bed.node_configs]
    guessed, _ = inprocess_nodes(SECURE, secretless, bed.root / "ref-secure-guessed")
    assert not np.allclose(guessed.x, final, atol=1e-3)
    print(f"SCAFFOLD with SecAgg+ and node noise: {time.monotonic() - started:.0f} s")


def _clientapp_running(tb: Testbed, role: str) -> int | None:
    """The PID of `role`'s running flwr-clientapp process, if any."""
    for pid in tb.processes(role):
        try:
            if b"flwr-clientapp" in open(f"/proc/{pid}/cmdline", "rb").read():
                return pid
        except OSError:
            pass
    return None


def _run_losing(config: dict, lost_rounds: set[int], state_dir, keep_client_state: bool = False):
    """In-process run in which partition 0's reply never arrives in `lost_rounds` (it did not train)."""
    fit = InProcessProxy.fit

    def lossy(self, ins, timeout, group_id):
        if int(self.context.node_config["partition-id"]) == 0 and int(ins.config["round"]) in lost_rounds:
            return FitRes(Status(Code.OK, ""), ndarrays_to_parameters([]), 0, {"partition-id": 0, "error": "lost"})
        return fit(self, ins, timeout, group_id)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(InProcessProxy, "fit", lossy)
        return inprocess(config, state_dir, keep_client_state)


def test_superlink_killed_mid_run_resumes_from_its_checkpoint(bed):
    """The SuperLink (and its ServerApp) is killed with SIGKILL while round 2 runs; started again on the same
    database, the SuperNodes reconnect by themselves, and the operator submits the same run config plus
    resume-from: the run ends with the same final model bytes and the same rows as an uninterrupted run. The run
    is SCAFFOLD with its client state (c_i) only on the nodes: the resumed run (a new Flower run id) sends the first
    run's id as the state key and node 0 trains round 2 from its round-1 c_i (its round-2 write, if the kill came
    after it, is undone). Runs last: the SuperLink it leaves behind is a new process.

    The same run shows node 1's allow-list at work: the run names an import-path model from examples/ (shipped in
    the app bundle, so node 1 could import it), node 1 admits only mylab, so it refuses every fit and evaluation
    (nothing imported) with a reason that reaches the server's log and clients.log, and node 0 trains alone."""
    name, started = "crash", time.monotonic()
    node_state = bed.root / "state-0"
    before = set(node_state.glob("run-*"))
    proc = start_run(bed, CRASH, name)
    wait_for(lambda: len(rows(bed, name)) >= 2, proc, bed, f"run-{name}")  # round 1 recorded and checkpointed
    wait_for(lambda: _clientapp_running(bed, "node0"), proc, bed, f"run-{name}")  # round 2 under way
    for pid in bed.processes("superlink"):  # the SuperLink and its ServerApp, as in a crash of its host
        os.kill(pid, signal.SIGKILL)
    assert not bed.stop("superlink", signal_first=False)  # nothing of it is left
    proc.wait(timeout=60)
    assert proc.returncode != 0  # deploy/run says the run did not complete
    folder = bed.root / "results" / name
    assert checkpoint.load(folder).server_round == 1 and len(rows(bed, name)) == 2
    killed = time.monotonic()
    bed.start_superlink("--database", str(bed.root / "superlink.db"))  # the operator's steps (docs/deployment/index.md)
    bed.wait_online(2)
    resumed = start_run(bed, {**CRASH, "resume-from": str(folder)}, name, role="run-crash-resumed")
    finish(bed, resumed, name, role="run-crash-resumed")
    assert "resuming from" in bed.log("run-crash-resumed")
    got = rows(bed, name)
    assert [r["round"] for r in got] == [0, 1, 2] and all(r["replies"] == 1 and r["rejected"] == 1 for r in got[1:])
    reason = (f"rejected: NodeRefused: this node runs only models and loaders from {ALLOWED} (node config "
              f"allowed-modules), each named 'module:callable' with a plain callable name; the run names "
              f"model='{CRASH['model']}'")  # fmt: skip
    # The server's log, streamed by flwr run: only the resumed run's stream is whole. Flower's stream polls the
    # SuperLink, so the killed run's last lines (round 1's refusal among them) may never have been pulled; round 1
    # is checked in clients.log, which the server writes before the round's row.
    resumed_log = bed.log("run-crash-resumed")
    assert f"round 2: client 1 {reason}" in resumed_log and f"round 2: client 1 evaluate {reason}" in resumed_log
    problems = (folder / "clients.log").read_text()
    assert f"=== round 1 │ client 1 │ {reason}" in problems and f"=== round 2 │ client 1 │ {reason}" in problems
    reference, reference_rows = inprocess_nodes(CRASH, bed.node_configs, bed.root / "ref-crash")
    assert untimed(got) == untimed(reference_rows)
    final = checkpoint.load(folder)
    assert final.server_round == 2 and sorted(got[-1]["fed_client_accuracy"]) == ["0"]  # node 0 tested it
    assert got[-1]["fed_failures"] == 1  # node 1 refused to evaluate
    assert np.asarray(final.state["rule"]["x"]).tobytes() == reference.x.tobytes()
    assert len(set(node_state.glob("run-*")) - before) == 1  # both runs used node 0's one state folder
    print(f"SuperLink crash: {killed - started:.0f} s to the kill, {time.monotonic() - killed:.0f} s to resume and "
          "finish")  # fmt: skip
