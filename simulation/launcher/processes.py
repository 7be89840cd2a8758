"""The processes of one launch: found through /proc, stopped together.

`flwr run` starts a detached SuperLink, which starts a SuperExec, which starts `flwr-simulation`, which starts
Ray's daemons and workers: none of them is a child the driver could wait for, and several leave the driver's
session. simulation.run puts a fresh token in the environment they all inherit (`FEDSUITE_RUN_TOKEN`), but the
environment is not enough: Ray's `DashboardAgent` and `RuntimeEnvAgent` rewrite their process title over the
start of the environment block, so /proc/<pid>/environ no longer shows the token, and once the raylet that
started them is gone they are orphans that linger for about a minute. A launch's processes are therefore

- every process whose environment holds the token,
- every descendant of one of them (parent chain, read from /proc/<pid>/stat, which no process can rewrite),
  remembered by (pid, start time) once seen, so a process stays known after its parent died and it was
  re-parented, and a recycled pid is never mistaken for it,
- every process with a file, working folder or argument under the launch's private Ray folder (RAY_TMPDIR,
  a fresh temp folder per launch): Ray's daemons log there, whatever they call themselves.

`Launch.stop()` takes that whole set before it signals anything (the agents are still children of the raylet
then), SIGTERMs all of it, SIGKILLs what is left after a grace period and rescans until nothing is left. The
driver does this on Ctrl-C / SIGTERM / SIGHUP; the reaper (`python -m simulation.launcher.reaper`) records the tree
every second while the run is alive and does the same when the driver ends for any reason, SIGKILL included.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

from fedsuite.results.folder import RUN_TOKEN_ENV

PROC = Path("/proc")


def new_token() -> str:
    return uuid.uuid4().hex


TICKS = os.sysconf("SC_CLK_TCK")


def _ticks_now() -> float:
    """Clock ticks since boot (the unit of a process's start time in /proc/<pid>/stat)."""
    return float((PROC / "uptime").read_text().split()[0]) * TICKS


def process_table() -> dict[int, tuple[int, int]]:
    """{pid: (parent pid, start time in clock ticks since boot)} of every process now running (zombies left out)."""
    table = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # the name in (…) may hold spaces and parentheses
        if fields[:1] in (["Z"], ["X"]):  # a zombie has ended; only its parent's wait() is missing
            continue
        try:
            table[int(entry.name)] = (int(fields[1]), int(fields[19]))
        except (IndexError, ValueError):
            continue
    return table


def descendants(roots: set[int], table: dict[int, tuple[int, int]]) -> set[int]:
    """`roots` and every process below one of them in `table`."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [p for p in roots if p in table]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def _environ_has(pid: int, needles: list[bytes]) -> bool:
    try:
        environ = b"\0" + (PROC / str(pid) / "environ").read_bytes() + b"\0"
    except OSError:  # gone, or not ours to read
        return False
    return all(environ.find(b"\0" + n) >= 0 for n in needles)


def _uses_folder(pid: int, folder: bytes) -> bool:
    """True if the process has its working folder, an argument or an open file under `folder`."""
    base = PROC / str(pid)
    try:
        if folder in (base / "cmdline").read_bytes():
            return True
        if os.readlink(base / "cwd").encode().startswith(folder):
            return True
        for fd in os.scandir(base / "fd"):
            try:
                if os.readlink(fd.path).encode().startswith(folder):
                    return True
            except OSError:
                continue
    except OSError:
        return False
    return False


def tagged_processes(token: str | None = None, env: dict[str, str] | None = None) -> list[int]:
    """PIDs whose environment holds RUN_TOKEN_ENV (= token, or any value when token is None) and every `env`
    variable with its value (e.g. a test session's marker, so that concurrent sessions do not see each other's
    launches), except this process. Sees only what still shows its environment: see Launch for all of them."""
    needle = f"{RUN_TOKEN_ENV}={token}".encode() + b"\0" if token else f"{RUN_TOKEN_ENV}=".encode()
    needles = [needle, *(f"{k}={v}".encode() + b"\0" for k, v in (env or {}).items())]
    return sorted(pid for pid in process_table() if pid != os.getpid() and _environ_has(pid, needles))


class Launch:
    """The processes of one launch (module docstring): `scan()` records them, `stop()` ends them all.

    `token`: the value of RUN_TOKEN_ENV; `env`: further KEY=value pairs a tagged process must also carry (a test
    session's marker); `private_dir`: the launch's own Ray temp folder (RAY_TMPDIR), or None; `spare`: PIDs never
    taken for the launch's (besides this process)."""

    def __init__(self, token: str | None, private_dir: str | Path | None = None, env: dict[str, str] | None = None,
                 spare: set[int] | None = None):  # fmt: skip
        self.needles = [f"{RUN_TOKEN_ENV}={token}".encode() + b"\0" if token else f"{RUN_TOKEN_ENV}=".encode()]
        self.needles += [f"{k}={v}".encode() + b"\0" for k, v in (env or {}).items()]
        self.private_dir = os.fsencode(str(Path(private_dir).resolve())) + b"/" if private_dir else None
        self.known: dict[int, int] = {}  # pid → start time
        self.untagged: set[tuple[int, int]] = set()  # (pid, start) whose environment lacked the token
        self.spare = {os.getpid(), *(spare or ())}  # this process, and e.g. the reaper (it names the folder)

    def scan(self, thorough: bool = True) -> list[int]:
        """Add what belongs to the launch now and forget what has ended; returns the PIDs alive.
        `thorough` also looks for files under the private Ray folder (slower: every process's open files)."""
        table = process_table()
        settled = _ticks_now() - 2 * TICKS  # started more than 2 s ago: past its fork-to-exec window
        self.known = {pid: start for pid, start in self.known.items() if table.get(pid, (0, None))[1] == start}
        for pid, (_, start) in table.items():
            if pid in self.known or pid in self.spare:
                continue
            if (pid, start) not in self.untagged:
                if _environ_has(pid, self.needles):
                    self.known[pid] = start
                    continue
                if start < settled:  # an environment does not change after exec: no need to read it again
                    self.untagged.add((pid, start))
            if thorough and self.private_dir and _uses_folder(pid, self.private_dir):
                self.known[pid] = start
        for pid in descendants(set(self.known), table) - self.spare:
            self.known.setdefault(pid, table[pid][1])
        return sorted(self.known)

    def alive(self) -> list[int]:
        """The known processes still running (no new ones are looked for)."""
        table = process_table()
        return sorted(pid for pid, start in self.known.items() if table.get(pid, (0, None))[1] == start)

    def stop(self, grace_seconds: float = 3.0, give_up_seconds: float = 20.0) -> list[int]:
        """SIGTERM every process of the launch (all found before the first signal), SIGKILL what is left after
        `grace_seconds`, rescan until none is left (processes that start meanwhile are caught by the next scan).
        Returns the PIDs still alive after `give_up_seconds` (normally [])."""
        start = time.monotonic()
        termed: set[tuple[int, int]] = set()
        while True:
            pids = self.scan()
            if not pids:
                return []
            elapsed = time.monotonic() - start
            if elapsed > give_up_seconds:
                return pids
            late = elapsed > grace_seconds
            for pid in pids:
                key = (pid, self.known[pid])
                if key in termed and not late:
                    continue
                try:
                    os.kill(pid, signal.SIGKILL if late else signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
                termed.add(key)
            time.sleep(0.2)


def stop_tagged(token: str, grace_seconds: float = 3.0, give_up_seconds: float = 20.0,
                private_dir: str | Path | None = None) -> list[int]:  # fmt: skip
    """Stop every process of the launch with this token (Launch.stop): the tagged ones and all below them."""
    return Launch(token, private_dir).stop(grace_seconds, give_up_seconds)
