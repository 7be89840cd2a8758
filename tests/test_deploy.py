"""A real multi-host deployment (tests/deploy_testbed.py): a SuperLink and SuperNodes in separate network
namespaces, TLS and SuperNode authentication on, every daemon started through deploy/. Marked `deploy` (needs
root and iproute2; .ci/run runs these in its deployment stage).

The stateful runs are checked against `run_inprocess` on the same run config: the deployment must end exactly
where an uninterrupted in-process federation ends (or one that lost the same replies), which it cannot if a
SuperNode restart lost its client state (the in-process negative control shows the comparison would notice)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

from fedsuite.inprocess import InProcessProxy, run_inprocess
from tests.deploy_testbed import DEPLOY, Testbed, available

pytestmark = [pytest.mark.deploy, pytest.mark.skipif(available() is not None, reason=str(available()))]

LSQ = {"dataset": "synthetic-lsq", "algorithm": "scaffold", "num-clients": 2, "synthetic-dim": 10,
       "synthetic-samples": 30, "local-steps": 5, "batch-size": 10, "lr": 0.02, "eval-every": 1,
       "client-state": "disk"}  # fmt: skip
# seed 6 with 1 of 2 clients per round draws partitions 0, 1, 0: node 0 sits out round 2 (fedsuite.sampling)
RESTART = {**LSQ, "clients-per-round": 1, "num-server-rounds": 3, "seed": 6}
MIDROUND = {**LSQ, "clients-per-round": 2, "num-server-rounds": 4, "min-replies": 0.5}
# above the first round (app install and imports, ≈ 25 s), below the SuperLink's heartbeat expiry (≈ 55-60 s)
TIMEOUT = {**MIDROUND, "num-server-rounds": 3, "round-timeout": 45.0}


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    root = tmp_path_factory.mktemp("deploy")
    tb = Testbed(root, hosts=3)
    try:
        tb.up()
        tb.make_certs("node0", "node1", "rogue")
        tb.start_superlink()
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
    state = tb.root / f"state-{i}"
    return tb.start_supernode(f"node{i}", tb.hosts[i], f"partition-id={i} num-partitions=2 client-state-dir='{state}'",
                       f"node{i}")  # fmt: skip


def start_run(tb: Testbed, config: dict, name: str) -> subprocess.Popen:
    overrides = {**config, "out-dir": str(tb.root / "results"), "run-name": name}
    text = " ".join(f"{k}={json.dumps(v)}" for k, v in overrides.items())
    return tb.spawn(f"run-{name}", tb.link, str(DEPLOY / "run"), "testbed", "-c", text, home=tb.cli_home)


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


def finish(tb: Testbed, proc: subprocess.Popen, name: str, timeout: float = 300) -> dict:
    proc.wait(timeout=timeout)
    log = tb.log(f"run-{name}")
    assert proc.returncode == 0, log[-4000:]
    assert "finished:completed" in log
    summary = json.loads((tb.root / "results" / name / "summary.json").read_text())
    assert summary["status"] == "completed", summary
    return summary


def inprocess(config: dict, state_dir):
    """The same federation in this process (client state in a fresh folder of its own)."""
    return run_inprocess({**config, "client-state-dir": str(state_dir)})


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
    """Node 0 trains in round 1, is stopped (SIGTERM) and restarted while round 2 runs on node 1 alone, and trains
    again in round 3 with the c_i it wrote in round 1: the run ends exactly where the in-process one does."""
    proc = start_run(bed, RESTART, "restart")
    wait_for(lambda: len(rows(bed, "restart")) >= 2, proc, bed, "run-restart")  # rows 0 and 1: round 2 started
    (state_file,) = (bed.root / "state-0").glob("run-*/partition-000000.npz")  # one subfolder per run
    before = dict(np.load(state_file))
    assert np.abs(before["c_i"]).sum() > 0  # SCAFFOLD wrote a non-zero control variate in round 1
    old = bed.processes("node0")
    assert old and not bed.stop("node0")
    start_node(bed, 0)
    assert not set(old) & set(bed.processes("node0"))
    after = dict(np.load(state_file))
    assert after.keys() == before.keys() and all(np.array_equal(after[k], before[k]) for k in before)
    finish(bed, proc, "restart")
    got = rows(bed, "restart")
    assert [r["replies"] for r in got[1:]] == [1, 1, 1] and got[-1]["failures"] == 0
    assert state_file.stat().st_mtime > time.time() - 120  # node 0 wrote its state again in round 3
    assert final_error(bed, "restart") == pytest.approx(error_of(inprocess(RESTART, bed.root / "ref")), rel=1e-6)


def test_the_comparison_would_notice_a_lost_client_state(tmp_path):
    """Negative control for the test above: had node 0 lost its c_i in the restart, the end point would differ."""
    fit = InProcessProxy.fit

    def forgetful(self, ins, timeout, group_id):
        if int(ins.config["round"]) == 3:
            for path in (tmp_path / "forgetful").glob("partition-000000.npz"):
                path.unlink()
        return fit(self, ins, timeout, group_id)

    reference = inprocess(RESTART, tmp_path / "reference")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(InProcessProxy, "fit", forgetful)
        lost = inprocess(RESTART, tmp_path / "forgetful")
    assert error_of(lost) != pytest.approx(error_of(reference), rel=1e-4)


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


def _clientapp_running(tb: Testbed, role: str) -> int | None:
    """The PID of `role`'s running flwr-clientapp process, if any."""
    for pid in tb.processes(role):
        try:
            if b"flwr-clientapp" in open(f"/proc/{pid}/cmdline", "rb").read():
                return pid
        except OSError:
            pass
    return None


def _run_losing(config: dict, lost_rounds: set[int], state_dir):
    """In-process run in which partition 0's reply never arrives in `lost_rounds` (it did not train)."""
    fit = InProcessProxy.fit

    def lossy(self, ins, timeout, group_id):
        if int(self.context.node_config["partition-id"]) == 0 and int(ins.config["round"]) in lost_rounds:
            return FitRes(Status(Code.OK, ""), ndarrays_to_parameters([]), 0, {"partition-id": 0, "error": "lost"})
        return fit(self, ins, timeout, group_id)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(InProcessProxy, "fit", lossy)
        return inprocess(config, state_dir)
