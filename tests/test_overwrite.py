"""Nothing of the user's is deleted or written outside the chosen folder (docs/reliability.md, One folder per run): a
run-name is one folder name inside out-dir, a run never writes into a folder it did not make, and overwrite=true
removes only what a fedsuite run wrote there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.results.folder import RUN_MARKER, ResultsFolderTaken, claim_folder
from fedsuite.run.inprocess import run_inprocess
from fedsuite.testing.kit import PARTIAL

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["..", ".", "/tmp/elsewhere", "a/b", "../sibling"])
def test_a_run_name_must_be_one_folder_name(name):
    with pytest.raises(ConfigError) as err:
        resolve({**PARTIAL, "run-name": name})
    lines = str(err.value).splitlines()[1:]
    assert len(lines) == 1 and lines[0].strip().startswith(f"run-name={name!r}: must be one folder name"), lines


def _users_folder(parent: Path) -> dict[Path, bytes]:
    """A user's own folder: a model checkpoint and a config.json of theirs."""
    files = {parent / "checkpoints" / "model.pt": b"weights", parent / "config.json": b'{"mine": true}'}
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def test_run_name_dot_dot_with_overwrite_leaves_the_parent_folder_alone(tmp_path):
    """The reported loss: out-dir=<parent>/results run-name='..' overwrite=true deleted <parent>/checkpoints/model.pt
    and replaced <parent>/config.json."""
    files = _users_folder(tmp_path)
    config = {**PARTIAL, "out-dir": str(tmp_path / "results"), "run-name": "..", "overwrite": True}
    with pytest.raises(ConfigError, match="run-name='..': must be one folder name"):
        run_inprocess(config, record=True)
    with pytest.raises(ResultsFolderTaken):  # the folder rule holds below the config check too
        claim_folder(tmp_path / "results" / "..", overwrite=True)
    assert all(path.read_bytes() == data for path, data in files.items())


@pytest.mark.parametrize("overwrite", [True, False])
def test_a_folder_no_run_made_is_neither_cleared_nor_written(tmp_path, overwrite):
    files = _users_folder(tmp_path / "mine")
    config = {**PARTIAL, "out-dir": str(tmp_path), "run-name": "mine", "overwrite": overwrite}
    with pytest.raises(ResultsFolderTaken, match=f"holds files no fedsuite run wrote .*{RUN_MARKER}"):
        run_inprocess(config, record=True)
    assert all(path.read_bytes() == data for path, data in files.items())
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["checkpoints", "config.json"]


def test_overwrite_removes_only_what_the_earlier_run_wrote(tmp_path):
    config = {**PARTIAL, "out-dir": str(tmp_path), "run-name": "r", "checkpoint-every": 1, "num-server-rounds": 2}
    run_inprocess(config, record=True)
    folder = tmp_path / "r"
    assert (folder / "checkpoints" / "round-000002").is_dir()
    own = {folder / "notes.txt": b"my notes", folder / "checkpoints" / "mine.pt": b"my weights"}
    for path, data in own.items():
        path.write_bytes(data)
    run_inprocess({**config, "overwrite": True, "num-server-rounds": 1}, record=True)
    assert all(path.read_bytes() == data for path, data in own.items())
    assert not (folder / "checkpoints" / "round-000002").exists()  # the replaced run's checkpoint is gone
    assert (folder / "checkpoints" / "round-000001").is_dir()
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["num_rounds"] == 1


def test_without_overwrite_a_run_folder_is_still_refused(tmp_path):
    config = {**PARTIAL, "out-dir": str(tmp_path), "run-name": "r"}
    run_inprocess(config, record=True)
    with pytest.raises(ResultsFolderTaken, match="already holds a run"):
        run_inprocess(config, record=True)


def test_simulation_run_refuses_a_bad_run_name_in_one_line_before_training(tmp_path):
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
    pairs = f"run-name='..' overwrite=true out-dir='{tmp_path}'"
    done = subprocess.run([sys.executable, "-m", "simulation.run", "-c", pairs], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "run-name='..': must be one folder name" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
