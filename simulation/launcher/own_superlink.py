"""A local SuperLink of your own for plain `flwr run` on a shared machine (docs/running/run.md#plain-flwr-run).

    eval "$(python -m simulation.launcher.own_superlink)"   # then: flwr run . --stream …
    python -m simulation.launcher.own_superlink --stop     # stop this FLWR_HOME's local SuperLink, by its PID

Flower's CLI starts its local SuperLink on fixed ports (127.0.0.1:39091, and 39093 for the Control API) whatever
FLWR_HOME says, and joins whichever SuperLink answers there first: on a shared machine another user's or another
checkout's, which then runs your run in its own Python environment and working folder. Flower takes the ports
from FLWR_LOCAL_SUPERLINK_HTTP_API_PORT and FLWR_LOCAL_CONTROL_API_PORT. This prints the `export` lines that give
a FLWR_HOME ports of its own:

- FLWR_HOME: the one set in the environment, else one per checkout (~/.flwr/fedsuite/<folder>-<hash>), never
  Flower's default ~/.flwr that every checkout of the user shares;
- the ports recorded for that FLWR_HOME (fedsuite-ports.json in it) while they are free or held by its own local
  SuperLink; the ports of its local SuperLink where one runs elsewhere; else two fresh free ports, recorded. When
  the recorded ports are held by a process that is not this FLWR_HOME's SuperLink, one line on stderr says which,
  and fresh ports are used: a later `flwr run` never joins it;
- Flower's telemetry, update check and runtime dependency installation switched off.

A local SuperLink of this FLWR_HOME that listens on Flower's default ports is refused in one line (exit 2): every
plain `flwr run` without these lines would join it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fedsuite.results.folder import write_atomic
from simulation.launcher.flower import QUIET_FLOWER
from simulation.launcher.processes import PROC, descendants, process_table
from simulation.launcher.project import PROJECT

FLOWER_DEFAULT_PORTS = (39091, 39093)  # flwr.cli.constant: LOCAL_SUPERLINK_HTTP_API_PORT, LOCAL_CONTROL_API_PORT
PORT_VARIABLES = ("FLWR_LOCAL_SUPERLINK_HTTP_API_PORT", "FLWR_LOCAL_CONTROL_API_PORT")
PORTS_FILE = "fedsuite-ports.json"
QUIET_KEYS = ("FLWR_TELEMETRY_ENABLED", "FLWR_DISABLE_UPDATE_CHECK", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION")


class Refused(Exception):
    """One line saying why no ports are given, and what to do."""


@dataclass(frozen=True)
class LocalSuperLink:
    """A running local SuperLink that Flower's CLI started for some FLWR_HOME."""

    pid: int
    ports: tuple[int, int]


def default_flwr_home(project: Path = PROJECT) -> Path:
    """One FLWR_HOME per checkout, outside it (Flower bundles the project folder)."""
    tag = hashlib.sha256(str(project).encode()).hexdigest()[:8]
    return Path.home() / ".flwr" / "fedsuite" / f"{project.name}-{tag}"


def flwr_home(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    given = env.get("FLWR_HOME")
    return Path(given).expanduser().resolve() if given else default_flwr_home()


def own_superlinks(home: Path) -> list[LocalSuperLink]:
    """The running local SuperLinks of `home`: Flower starts them with their log file in <home>/local-superlink/."""
    log_file = home / "local-superlink" / "superlink.log"
    found = []
    for pid in sorted(process_table()):
        argv = command_line(pid)
        if not any(Path(arg).name == "flower-superlink" for arg in argv[:2]) or "--log-file" not in argv:
            continue
        logged = argv[argv.index("--log-file") + 1] if argv.index("--log-file") + 1 < len(argv) else ""
        if logged and Path(logged).resolve() == log_file.resolve():
            found.append(LocalSuperLink(pid, superlink_ports(argv)))
    return found


def command_line(pid: int) -> list[str]:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def superlink_ports(argv: list[str]) -> tuple[int, int]:
    """(HTTP port, Control API port) of a local SuperLink's command line (Flower passes both)."""

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else ""

    http, control = value("--port"), value("--control-api-address").rpartition(":")[2]
    http_port = int(http) if http.isdigit() else 0
    return http_port, int(control) if control.isdigit() else http_port


def is_free(port: int) -> bool:
    """True if a listening socket could be bound to 127.0.0.1:port now."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def fresh_ports() -> tuple[int, int]:
    """Two ports free now (both held until both are picked), never Flower's defaults."""
    while True:
        socks = [socket.socket() for _ in range(2)]
        try:
            for sock in socks:
                sock.bind(("127.0.0.1", 0))
            ports = tuple(sock.getsockname()[1] for sock in socks)
        finally:
            for sock in socks:
                sock.close()
        if not set(ports) & set(FLOWER_DEFAULT_PORTS):
            return ports  # type: ignore[return-value]


def recorded_ports(home: Path) -> tuple[int, int] | None:
    try:
        data = json.loads((home / PORTS_FILE).read_text())
        return int(data["http"]), int(data["control"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record_ports(home: Path, ports: tuple[int, int]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    write_atomic(home / PORTS_FILE, json.dumps({"http": ports[0], "control": ports[1]}))


def listener(port: int) -> str:
    """Who listens on 127.0.0.1:port, as far as /proc tells (another user's process shows no PID)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    for pid in process_table():
        try:
            fds = os.scandir(PROC / str(pid) / "fd")
        except OSError:
            continue
        with fds:
            for fd in fds:
                try:
                    if os.readlink(fd.path) in inodes:
                        return f"pid {pid}: {' '.join(command_line(pid))[:120].strip()}"
                except OSError:
                    continue
    return "a process this user cannot see"


def ports_for(home: Path, say=print) -> tuple[int, int]:
    """The ports `home`'s local SuperLink uses (module docstring); records them. Raises Refused."""
    running = own_superlinks(home)
    if running:
        ports = running[0].ports
        if set(ports) & set(FLOWER_DEFAULT_PORTS) or not all(ports):
            raise Refused(
                f"the local SuperLink of FLWR_HOME={home} (pid {running[0].pid}) listens on Flower's "
                "default ports, which every plain `flwr run` on this machine joins; stop it once its runs "
                "are done (python -m simulation.launcher.own_superlink --stop), then run this again"
            )
        record_ports(home, ports)
        return ports
    recorded = recorded_ports(home)
    if recorded is not None and all(is_free(port) for port in recorded):
        return recorded
    ports = fresh_ports()
    if recorded is not None:
        held = next(port for port in recorded if not is_free(port))
        say(f"fedsuite: port {held}, recorded for FLWR_HOME={home}, is held by another process ({listener(held)}), "
            f"not this FLWR_HOME's SuperLink; this FLWR_HOME now uses ports {ports[0]} and {ports[1]}")  # fmt: skip
    record_ports(home, ports)
    return ports


def export_lines(home: Path, ports: tuple[int, int]) -> str:
    quiet = " ".join(f"{key}={QUIET_FLOWER[key]}" for key in QUIET_KEYS)
    return (f"export FLWR_HOME={shlex.quote(str(home))}\n"
            f"export {PORT_VARIABLES[0]}={ports[0]} {PORT_VARIABLES[1]}={ports[1]}\n"
            f"export {quiet}\n")  # fmt: skip


def stop(home: Path, grace_seconds: float = 5.0) -> tuple[list[int], list[int]]:
    """SIGTERM each local SuperLink of `home` and every process below it (its SuperExec, the runs in it),
    SIGKILL what is left after `grace_seconds`; returns the SuperLinks' PIDs and those of the processes still
    running after it all (a process this user may not signal)."""
    running = own_superlinks(home)
    if not running:
        return [], []
    table = process_table()
    tree = {pid: table[pid][1] for pid in descendants({link.pid for link in running}, table)}
    for signum, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 2.0)):
        for pid in alive(tree):
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while alive(tree) and time.monotonic() < deadline:
            time.sleep(0.1)
    return [link.pid for link in running], alive(tree)


def alive(tree: dict[int, int]) -> list[int]:
    """The processes of `tree` ({pid: start time}) still running (a recycled PID is not one of them)."""
    table = process_table()
    return [pid for pid, start in tree.items() if table.get(pid, (0, None))[1] == start]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.launcher.own_superlink",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--stop", action="store_true", help="stop this FLWR_HOME's local SuperLink (by its PID)")
    args = parser.parse_args(argv)
    home = flwr_home()
    if args.stop:
        stopped, left = stop(home)
        if left:
            print(f"error: the local SuperLink of FLWR_HOME={home}: processes {', '.join(map(str, left))} are still "
                  "running after SIGTERM and SIGKILL", file=sys.stderr)  # fmt: skip
            return 1
        what = f"stopped (pid {', '.join(map(str, stopped))})" if stopped else "not running"
        print(f"the local SuperLink of FLWR_HOME={home}: {what}", file=sys.stderr)
        return 0
    try:
        ports = ports_for(home, say=lambda line: print(line, file=sys.stderr))
    except Refused as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(export_lines(home, ports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
