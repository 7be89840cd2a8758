"""Every `python -m simulation.*` command of the front door (README.md, docs/getting-started.md) runs as written,
shortened: the same flags and keys, with fewer clients, rounds, trials and seeds and a temporary output folder.
`simulation.run` commands are checked with `--check` (config, folders, data, partition, model; the Ray runs are
tests/test_flwr_run.py's); the study commands run in process. A command the docs change is tested as changed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from simulation.launcher.overrides import parse_overrides

PROJECT = Path(__file__).resolve().parent.parent
PAGES = ("README.md", "docs/getting-started.md")
SHORT = {"num-server-rounds": 1, "num-clients": 4, "clients-per-round": 2, "local-steps": 1, "batch-size": 16}
# flags whose values shrink: keep one seed, one trial, one process
SHRINK = {"--seeds": lambda v: v.split(",")[0], "--final-seeds": lambda v: v.split(",")[0],
          "--trials": lambda v: "1", "--budget": lambda v: "1", "--parallel": lambda v: "1"}  # fmt: skip
# what a shortened command cannot run here, and why (each must still appear in the docs)
NOT_HERE = {
    "resume-from='results/": "resumes a run the reader made before (checkpoints are tests/test_checkpoint.py's)",
    "data-dir='/data/photos'": "the reader's own image folder (image folders are tests/test_user_data.py's)",
    "pip install -e examples/fedavgm": "installs the example plug-in first (tests/test_examples.py runs it)",
    "simulation.launcher.own_superlink": "a shell set up for plain flwr run, no run config (tests/test_run_control.py)",
}


def _blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, flags=re.S)


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) for every `python -m simulation.<x>` line of the pages' bash blocks, continuation lines
    joined, comments dropped."""
    found = []
    for page in PAGES:
        for block in _blocks((PROJECT / page).read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                if "python -m simulation." in line:
                    found.append((page, shlex.join(shlex.split(line, comments=True))))
    return found


COMMANDS = documented_commands()


def not_here(command: str) -> str | None:
    """Why `command` cannot run here (NOT_HERE), or None."""
    plain = " ".join(shlex.split(command))
    return next((why for marker, why in NOT_HERE.items() if marker in plain), None)


def test_the_front_door_has_commands_to_test():
    modules = {re.search(r"python -m (simulation\.\w+)", c).group(1) for _, c in COMMANDS}
    assert {"simulation.run", "simulation.compare", "simulation.sweep", "simulation.tune"} <= modules
    for marker in NOT_HERE:  # a skip reason that no longer matches a command is stale
        assert any(marker in " ".join(shlex.split(c)) for _, c in COMMANDS), marker


def shortened(argv: list[str], out: Path) -> list[str]:
    """`argv` with SHORT merged into its -c (one -c), SHRINK applied, --out and out-dir in `out`."""
    module = argv[0]
    rest, overrides, i = [], {}, 1
    while i < len(argv):
        flag = argv[i]
        value = argv[i + 1] if i + 1 < len(argv) else None
        if flag in ("-c", "--run-config"):
            overrides.update(parse_overrides([value]))
            i += 2
        elif flag in SHRINK:
            rest += [flag, SHRINK[flag](value)]
            i += 2
        elif flag == "--out":
            rest += [flag, str(out)]
            i += 2
        else:
            rest.append(flag)
            i += 1
    overrides.update(SHORT)
    if "--prune" in rest and rest[rest.index("--prune") + 1] != "off":  # a pruned run needs a round before its last
        overrides["num-server-rounds"] = 2
    overrides.setdefault("model", "2nn")  # the small dense model where the command names none
    if overrides.get("sampling") == "bernoulli":
        overrides["participation"] = 0.5
    if module == "simulation.run":
        overrides["out-dir"] = str(out)
        rest.append("--check")
    text = " ".join(f"{k}={_toml(v)}" for k, v in overrides.items())
    return [module, *rest, "-c", text]


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value + "'"
    return repr(value)


@pytest.mark.parametrize("page, command", COMMANDS, ids=[f"{p}:{c[:60]}" for p, c in COMMANDS])
def test_a_documented_command_runs_shortened(page, command, tmp_path, monkeypatch):
    if (why := not_here(command)) is not None:
        pytest.skip(why)
    monkeypatch.chdir(PROJECT)  # the docs' commands run from the project folder
    argv = shlex.split(command)
    argv = argv[argv.index("-m") + 1 :]
    argv = shortened(argv, tmp_path / "out")
    module = __import__(argv[0], fromlist=["main"])
    assert module.main(argv[1:]) == 0, f"{page}: {command}"
    if argv[0] != "simulation.run":
        written = list((tmp_path / "out").rglob("*.md"))
        assert written, f"{page}: {command} wrote no report"
