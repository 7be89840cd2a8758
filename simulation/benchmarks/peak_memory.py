"""Peak memory of a whole launch: the command and every process it starts, detached ones included.

    python -m simulation.benchmarks.peak_memory -- python -m simulation.run -c "algorithm='scaffold' …"

`flwr run` starts a detached SuperLink, SuperExec, `flwr-simulation` and Ray's daemons and workers, which are not
children of the command. Every one of them inherits the environment, so the command runs with a marker variable;
every 0.5 s the resident set sizes (RSS) of all processes carrying it and of their descendants (Ray's agents
overwrite their environment) are summed. Prints the peak sum, the peak of the largest single process and the
number of processes, and exits with the command's exit code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

MARKER = "FEDSUITE_MEMORY_PROBE"


def marked_rss(marker: bytes) -> dict[int, int]:
    """{pid: RSS bytes} of the processes whose environment holds `marker` (KEY=value) and all their descendants
    (Ray's agents rewrite their title over their environment: simulation.launcher.processes)."""
    from simulation.launcher.processes import descendants, process_table

    page = os.sysconf("SC_PAGE_SIZE")
    table = process_table()
    marked = set()
    for pid in table:
        try:
            if marker in (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0"):
                marked.add(pid)
        except OSError:
            continue
    found = {}
    for pid in descendants(marked, table) - {os.getpid()}:
        try:
            found[pid] = int((Path("/proc") / str(pid) / "statm").read_text().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return found


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    value = uuid.uuid4().hex
    proc = subprocess.Popen(argv, env={**os.environ, MARKER: value})
    marker = f"{MARKER}={value}".encode()
    peak_total, peak_single, most = 0, 0, 0
    while proc.poll() is None:
        sizes = marked_rss(marker)
        if sizes:
            peak_total = max(peak_total, sum(sizes.values()))
            peak_single = max(peak_single, max(sizes.values()))
            most = max(most, len(sizes))
        time.sleep(0.5)
    print(f"peak RSS of all processes of the launch: {peak_total / 2**30:.2f} GiB (largest single process "
          f"{peak_single / 2**30:.2f} GiB, up to {most} processes)", flush=True)  # fmt: skip
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
