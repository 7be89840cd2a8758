"""A multi-host deployment on one machine: Linux network namespaces joined by veth links to a bridge, one
namespace per host (the SuperLink's, one per SuperNode), each with its own address on a private subnet that only
these namespaces share. Every daemon is started through the deploy/ scripts, as a user would, and carries a
token of its own in its environment, so a test can kill exactly one host's processes (simulation.launcher.processes).

Needs root and iproute2; tests/test_deploy.py skips without them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from fedsuite.results.folder import RUN_TOKEN_ENV
from simulation.launcher.processes import stop_tagged, tagged_processes

PROJECT = Path(__file__).resolve().parent.parent
DEPLOY = PROJECT / "deploy"
SUBNET = "10.233.{}.{}"
PORT = 9093
QUIET = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}


def available() -> str | None:
    """Why the testbed cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not shutil.which("ip"):
        return "needs iproute2 (ip)"
    if not (shutil.which("openssl") and shutil.which("ssh-keygen")):
        return "needs openssl and ssh-keygen"
    return None


class Testbed:
    """Namespaces `<tag>-link` (SuperLink, also where the user's flwr CLI runs) and `<tag>-h<i>` (SuperNode hosts)."""

    __test__ = False  # not a test class, though pytest collects Test*

    def __init__(self, root: Path, hosts: int, net: int = 77):
        self.root = root
        self.tag = "fsd" + uuid.uuid4().hex[:6]
        self.link = f"{self.tag}-link"
        self.hosts = [f"{self.tag}-h{i}" for i in range(hosts)]
        self.link_addr = SUBNET.format(net, 1)
        self.addr = {h: SUBNET.format(net, 10 + i) for i, h in enumerate(self.hosts)}
        self.net = net
        self.tokens: dict[str, str] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.cli_home = root / "cli-home"
        self.certs = root / "certs"
        self.created: list[str] = []

    # ---- network ----------------------------------------------------------------------------------
    def up(self) -> None:
        sh = self._ip
        for ns in [self.link, *self.hosts]:
            sh("netns", "add", ns)
            self.created.append(ns)
            sh("-n", ns, "link", "set", "lo", "up")
        sh("-n", self.link, "link", "add", "br0", "type", "bridge")
        sh("-n", self.link, "addr", "add", f"{self.link_addr}/24", "dev", "br0")
        sh("-n", self.link, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts):
            sh("-n", self.link, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0", "netns", host)
            sh("-n", self.link, "link", "set", f"v{i}", "master", "br0")
            sh("-n", self.link, "link", "set", f"v{i}", "up")
            sh("-n", host, "addr", "add", f"{self.addr[host]}/24", "dev", "eth0")
            sh("-n", host, "link", "set", "eth0", "up")

    def down(self) -> list[str]:
        """Stop every process, remove the namespaces; returns what could not be cleaned up."""
        left = []
        for role in list(self.tokens):
            left += [f"{role}:{pid}" for pid in self.stop(role)]
        for ns in reversed(self.created):
            res = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)
            if res.returncode != 0:
                left.append(f"netns {ns}: {res.stderr.strip()}")
        self.created.clear()
        return left

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    # ---- processes --------------------------------------------------------------------------------
    def env(self, home: Path, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != RUN_TOKEN_ENV}
        env.update(QUIET)
        env["FLWR_HOME"] = str(home)
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        env.update(extra)
        return env

    def spawn(self, role: str, ns: str, *cmd: str, home: Path | None = None, **env: str) -> subprocess.Popen:
        """Start `cmd` in namespace `ns` with its own token and FLWR_HOME; output to <root>/<role>.log."""
        token = uuid.uuid4().hex
        self.tokens[role] = token
        home = home or self.root / f"{role}-home"
        log = open(self.root / f"{role}.log", "a")
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *cmd], stdout=log, stderr=subprocess.STDOUT,
                                env=self.env(home, **{RUN_TOKEN_ENV: token}, **env), cwd=self.root,
                                start_new_session=True)  # fmt: skip
        self.procs[role] = proc
        return proc

    def stop(self, role: str, signal_first: bool = True) -> list[int]:
        """Stop every process of `role` (SIGTERM, then SIGKILL after a grace period); returns survivors."""
        token = self.tokens.get(role)
        if token is None:
            return []
        left = stop_tagged(token, grace_seconds=3.0 if signal_first else 0.0)
        proc = self.procs.get(role)
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        return left

    def processes(self, role: str) -> list[int]:
        return tagged_processes(self.tokens[role]) if role in self.tokens else []

    def log(self, role: str) -> str:
        path = self.root / f"{role}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # ---- the deployment, through deploy/ ----------------------------------------------------------
    def make_certs(self, *nodes: str) -> None:
        subprocess.run([str(DEPLOY / "make-certs"), "--out", str(self.certs), "--san", self.link_addr, *nodes],
                       check=True, capture_output=True, text=True)  # fmt: skip

    def start_superlink(self, *flags: str) -> None:
        self.spawn("superlink", self.link, str(DEPLOY / "superlink"), "--certs", str(self.certs), "--host",
                   self.link_addr, "--port", str(PORT), *flags)  # fmt: skip

    def start_supernode(self, role: str, host: str, node_config: str, key: str | None, *flags: str, **env):
        cmd = [str(DEPLOY / "supernode"), "--superlink", f"{self.link_addr}:{PORT}", "--node-config", node_config]
        if key is not None:
            cmd += ["--ca", str(self.certs / "ca.crt"), "--key", str(self.certs / "supernodes" / key)]
        return self.spawn(role, host, *cmd, *flags, **env)

    def cli(self, *args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess:
        """A command of the user's, run in the SuperLink's namespace with the CLI's FLWR_HOME."""
        res = subprocess.run(["ip", "netns", "exec", self.link, *args], capture_output=True, text=True,
                             env=self.env(self.cli_home), cwd=PROJECT, timeout=timeout)  # fmt: skip
        if check and res.returncode != 0:
            raise AssertionError(f"{args} exited {res.returncode}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
        return res

    def connect(self, name: str = "testbed") -> None:
        self.cli(str(DEPLOY / "connect"), name, f"{self.link_addr}:{PORT}", "--ca", str(self.certs / "ca.crt"),
                 check=True)  # fmt: skip

    def register(self, *nodes: str, timeout: float = 60) -> str:
        """Register the nodes' public keys, retrying while the SuperLink is still starting."""
        deadline = time.monotonic() + timeout
        keys = [str(self.certs / "supernodes" / f"{n}.pub") for n in nodes]
        while True:
            res = self.cli(str(DEPLOY / "register-supernodes"), "testbed", *keys)
            if res.returncode == 0:
                return res.stdout
            if time.monotonic() > deadline:
                raise AssertionError(f"registration failed:\n{res.stdout}\n{res.stderr}\n{self.log('superlink')}")
            time.sleep(1.0)

    def nodes(self) -> list[dict]:
        res = self.cli("flwr", "supernode", "ls", "testbed", "--format", "json")
        try:
            return json.loads(res.stdout)["nodes"]
        except (ValueError, KeyError):
            return []

    def wait_online(self, count: int, timeout: float = 90) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            nodes = self.nodes()
            if sum(n.get("status") == "online" for n in nodes) >= count:
                return nodes
            time.sleep(2.0)
        raise AssertionError(f"fewer than {count} SuperNodes online: {self.nodes()}")
