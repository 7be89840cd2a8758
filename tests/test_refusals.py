"""Damage refused clearly: a checkpoint that cannot be written names the file, a damaged latest.json is named and
the newest whole checkpoint used, checkpoints are copies of the client state (never links), an image folder's
dangling link or corrupt image is named, a plug-in rule's wrong-shaped result is named where it is taken, and a
plug-in's declarations are checked when it registers."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from fedsuite.results import checkpoint, checkpoint_files
from fedsuite.results.folder import OutDirFull
from fedsuite.rules.declared import Vector
from fedsuite.state.store import DiskStore, state_files
from fedsuite.strategies.fedavg import FedAvg

# FedAvg's halves, as the built-in entries name them (fedsuite/registry/builtin.py)
FEDAVG, FEDAVG_CLIENT = "fedsuite.strategies.fedavg:FedAvg", "fedsuite.clients.fedavg:FedAvgClient"
STATE = {"rule": {"x": np.arange(4, dtype=np.float32)}, "accepted": {0: 1}}


def live_state(root: Path) -> Path:
    """A client-state folder with two partition files, as the clients leave it between rounds."""
    root.mkdir(parents=True, exist_ok=True)
    for pid in range(2):
        np.savez(root / f"partition-{pid}.npz", c_i=np.full(64, pid + 1.0))
    return root


def write(results: Path, server_round: int, live: Path | None = None) -> Path:
    return checkpoint.write(results, server_round, STATE, [{"round": server_round}], {"lr": 0.1}, live)


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# ---- checkpoints: a full disk --------------------------------------------------------------------------------------
def test_a_full_disk_names_the_file_and_leaves_no_empty_checkpoints_folder(tmp_path, monkeypatch):
    results = tmp_path / "run"
    results.mkdir()
    monkeypatch.setattr(checkpoint.np, "savez", no_space)
    with pytest.raises(OutDirFull) as caught:  # an OSError of errno ENOSPC, reported as every full out-dir is
        write(results, 2)
    text = str(caught.value)
    assert text.startswith(f"out-dir {str(tmp_path)!r} is full: cannot write checkpoint file {results}/checkpoints/")
    assert "server.npz (No space left on device)" in text and "previous checkpoint" in text and "\n" not in text
    assert list(results.iterdir()) == []  # no checkpoints/ folder: the first checkpoint failed


def test_a_full_disk_while_copying_client_state_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    results, live = tmp_path / "run", live_state(tmp_path / "state")
    write(results, 2, live)
    monkeypatch.setattr(checkpoint.shutil, "copyfile", no_space)
    with pytest.raises(OutDirFull, match=r"client-state/partition-0\.npz \(No space left on device\)"):
        write(results, 4, live)
    monkeypatch.undo()
    assert sorted(p.name for p in (results / "checkpoints").iterdir()) == ["latest.json", "round-000002"]
    assert checkpoint.load(results).server_round == 2


def test_another_write_error_is_a_checkpoint_error_naming_the_file(tmp_path, monkeypatch):
    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(checkpoint.np, "savez", refused)
    with pytest.raises(checkpoint.CheckpointError, match=r"server\.npz could not be written \(PermissionError: "):
        write(tmp_path / "run", 2)


# ---- checkpoints: a damaged latest.json ----------------------------------------------------------------------------
def test_a_truncated_latest_json_is_named_and_the_newest_whole_checkpoint_used(tmp_path, caplog):
    results = tmp_path / "run"
    folder = write(results, 4)
    latest = results / "checkpoints" / "latest.json"
    latest.write_text(latest.read_text()[:9])  # cut short
    with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"):
        ckpt = checkpoint.load(results)
    assert ckpt.folder == folder and ckpt.server_round == 4 and ckpt.rows == [{"round": 4}]
    (warning,) = [r.getMessage() for r in caplog.records]
    assert f"{latest} is damaged" in warning and str(folder) in warning and "\n" not in warning


def test_a_damaged_latest_json_without_a_whole_checkpoint_is_named_not_called_missing(tmp_path):
    results = tmp_path / "run"
    folder = write(results, 4)
    (results / "checkpoints" / "latest.json").write_text("{")
    (folder / "server.npz").write_bytes(b"")
    with pytest.raises(checkpoint.CheckpointError) as caught:
        checkpoint.load(results)
    text = str(caught.value)
    assert "latest.json is damaged" in text and "server.npz is corrupt" in text
    assert "no checkpoint" not in text and "checkpoint-every" not in text


def test_a_refused_resume_names_resume_from_once(tmp_path):
    from fedsuite.config.run_config import ConfigError
    from simulation.launcher import resume

    results = tmp_path / "run"
    write(results, 4)
    (results / "checkpoints" / "latest.json").write_text("")
    (results / "checkpoints" / "round-000004" / "rows.jsonl").write_text("changed")
    for folder in (tmp_path / "empty", results):
        folder.mkdir(exist_ok=True)
        with pytest.raises(ConfigError) as caught:
            resume.load_checkpoint(folder)
        assert str(caught.value).count("resume-from=") == 1, caught.value


# ---- checkpoints: copies, never links ------------------------------------------------------------------------------
class FakeStrategy:
    def load_state_dict(self, state):
        self.state = state


def test_damage_to_live_client_state_in_place_does_not_reach_the_checkpoint(tmp_path):
    results, live = tmp_path / "run", live_state(tmp_path / "state")
    before = (live / "partition-0.npz").read_bytes()
    folder = write(results, 2, live)
    os.truncate(live / "partition-0.npz", 10)  # a truncation in place, as a hostile process may do
    checkpoint_files.verify(folder)  # the checkpoint is still whole
    ckpt = checkpoint.load(results)
    checkpoint.restore(FakeStrategy(), ckpt, live)
    assert (live / "partition-0.npz").read_bytes() == before
    with open(live / "partition-1.npz", "r+b") as f:  # a write into a restored file, in place
        f.write(b"damage")
    checkpoint_files.verify(folder)
    assert os.stat(live / "partition-0.npz").st_nlink == 1 == os.stat(folder / "client-state/partition-0.npz").st_nlink


def test_a_resume_puts_back_the_checkpoints_state_files_of_either_format_and_nothing_else(tmp_path):
    results, live = tmp_path / "run", live_state(tmp_path / "state")  # `.npz` files, as earlier versions wrote them
    write(results, 2, live)
    for path in list(live.iterdir()):
        path.unlink()
    later = DiskStore(live, 7)  # a write after the checkpoint, in this version's format
    later["c_i"] = np.zeros(4, np.float32)
    later.flush()
    checkpoint.restore(FakeStrategy(), checkpoint.load(results), live)
    assert [p.name for p in state_files(live)] == ["partition-0.npz", "partition-1.npz"]


# ---- image folders ------------------------------------------------------------------------------------------------
def image_folder(root: Path) -> dict:
    from PIL import Image

    pixels = np.zeros((6, 6, 3), np.uint8)
    for split in ("train", "test"):
        for label in ("cat", "dog"):
            (root / split / label).mkdir(parents=True)
            Image.fromarray(pixels).save(root / split / label / "0.png")
    return {"dataset": "imagefolder", "data-dir": str(root), "image-size": 4}


def load_images(cfg: dict):
    from fedsuite.config.run_config import resolve
    from fedsuite.data import load_dataset

    return load_dataset(resolve(cfg))


@pytest.mark.parametrize("link", ["train/dog/1.png", "test/bird"])
def test_a_dangling_link_in_an_image_folder_is_named_with_its_target(tmp_path, link):
    from fedsuite.data.datasets import DatasetNotFound

    cfg = image_folder(tmp_path / "images")
    (tmp_path / "images" / link).symlink_to(tmp_path / "gone")
    with pytest.raises(DatasetNotFound) as caught:
        load_images(cfg)
    text = str(caught.value)
    assert f"{tmp_path / 'images' / link} is a symbolic link to {tmp_path / 'gone'}, which does not exist" in text
    assert "remove the link" in text and "\n" not in text


def test_a_corrupt_image_is_named_with_replace_or_remove_and_no_download(tmp_path):
    from fedsuite.data.datasets import DatasetCorrupt

    cfg = image_folder(tmp_path)
    (tmp_path / "train" / "cat" / "1.png").write_bytes(b"\x89PNG cut short")
    with pytest.raises(DatasetCorrupt) as caught:
        load_images(cfg)
    text = str(caught.value)
    assert f"{tmp_path / 'train' / 'cat' / '1.png'} cannot be decoded" in text and "replace it" in text
    assert "remove it" in text and "download" not in text and "\n" not in text


# ---- a plug-in rule's wrong-shaped result --------------------------------------------------------------------------
class LongModelRule(FedAvg):
    """Returns a model one entry too long."""

    def aggregate(self, server_round, replies):
        return np.append(super().aggregate(server_round, replies), 0.0)


class WideStateRule(FedAvg):
    """Keeps a declared d-vector of the wrong shape."""

    state = (Vector("v"),)

    def aggregate(self, server_round, replies):
        self.v = np.zeros((self.dim, 2))
        return super().aggregate(server_round, replies)


FEDERATION = {"dataset": "synthetic-lsq", "num-clients": 4, "clients-per-round": 2, "synthetic-dim": 3,
              "synthetic-samples": 8, "num-server-rounds": 2, "eval-every": 1000}  # fmt: skip


@pytest.fixture
def plugged(monkeypatch):
    """This process's registry with plug-ins added for one test (restored afterwards)."""
    from fedsuite.registry import known as registry
    from fedsuite.registry.plugins import AlgorithmRegistry

    own = AlgorithmRegistry([registry.ALGORITHMS[n] for n in registry.ALGORITHMS.built_in], discover=list)
    monkeypatch.setattr(registry, "ALGORITHMS", own)
    return own


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("LongModelRule", r"aggregate\(\) returned the new global model x with shape \(4,\), expected \(3,\)"),
        ("WideStateRule", r"declared state v has shape \(3, 2\) after aggregate\(\), expected \(3,\)"),
    ],
)
def test_a_plugin_rule_of_the_wrong_shape_is_named_where_its_result_is_taken(plugged, rule, message):
    from fedsuite.registry.known import Algorithm
    from fedsuite.run.inprocess import run_inprocess
    from fedsuite.server.rule_result import RuleResultError

    plugged.register(Algorithm("shapeless", f"tests.test_refusals:{rule}", FEDAVG_CLIENT, "", ""))
    with pytest.raises(RuleResultError, match=message) as caught:
        run_inprocess({**FEDERATION, "algorithm": "shapeless"})
    text = str(caught.value)
    assert text.startswith(f"round 1: algorithm 'shapeless' (server rule tests.test_refusals:{rule}): ")
    assert "\n" not in text


# ---- a plug-in's declarations, checked when it registers -----------------------------------------------------------
def bad_default_algorithm():
    """An entry point's algorithm whose key's default lies outside the key's own range."""
    from fedsuite.config.run_config import Key
    from fedsuite.registry.known import Algorithm

    beta = Key("wild-beta", 2.0, "a momentum that declares itself out of range", low=0.0, high=1.0)
    return Algorithm("wild", FEDAVG, FEDAVG_CLIENT, "", "", keys=(beta,))


def test_an_entry_point_with_a_default_outside_its_range_is_left_out_and_built_ins_run(monkeypatch, caplog):
    from importlib.metadata import EntryPoint

    from fedsuite.config.run_config import resolve
    from fedsuite.registry import known as registry
    from fedsuite.registry.plugins import GROUP, AlgorithmRegistry

    found = [EntryPoint("wild", "tests.test_refusals:bad_default_algorithm", GROUP)]
    own = AlgorithmRegistry([registry.ALGORITHMS[n] for n in registry.ALGORITHMS.built_in], discover=lambda: found)
    monkeypatch.setattr(registry, "ALGORITHMS", own)
    with caplog.at_level(logging.WARNING, logger="fedsuite.registry.plugins"):
        assert resolve({"algorithm": "fedavg"})["algorithm"] == "fedavg"  # built-in runs still resolve
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "entry point wild = tests.test_refusals:bad_default_algorithm" in warning and "\n" not in warning
    assert "'wild' refused: run-config key 'wild-beta' declares the default 2.0 outside its declared range [0, 1]" in (
        warning
    )
    assert "wild" not in own


@pytest.mark.parametrize(
    ("strategy", "client", "strategy_args", "message"),
    [
        (FEDAVG, FEDAVG_CLIENT, {}, "default 2.0 outside its declared range"),
        ("fedsuite.strategies.fedavg:NoSuchRule", FEDAVG_CLIENT, {},
         "strategy='fedsuite.strategies.fedavg:NoSuchRule' cannot be imported (AttributeError: "),
        ("no_such_plugin_module:Rule", FEDAVG_CLIENT, {}, "cannot be imported (ModuleNotFoundError: "),
        ("numpy:zeros", FEDAVG_CLIENT, {}, "is a builtin_function_or_method, expected a subclass of "
         "fedsuite.rules.server_rule.ServerRule"),
        (FEDAVG, FEDAVG, {}, "client='fedsuite.strategies.fedavg:FedAvg' is the class "
         "FedAvg, expected a subclass of fedsuite.rules.client_rule.ClientRule"),
        (FEDAVG, FEDAVG_CLIENT, {"beta": "server-lr"}, "strategy "
         "fedsuite.strategies.fedavg:FedAvg: the constructor does not accept argument 'beta' (run-config key "
         "'server-lr'); it takes settings, server_lr"),
    ],
)  # fmt: skip
def test_register_refuses_bad_declarations_in_one_line(plugged, strategy, client, strategy_args, message):
    from fedsuite.config.run_config import Key
    from fedsuite.registry.known import Algorithm
    from fedsuite.registry.plugins import PluginError

    keys = (Key("wild-beta", 2.0, "out of range", low=0.0, high=1.0),) if "default" in message else ()
    with pytest.raises(PluginError) as caught:
        plugged.register(Algorithm("wild", strategy, client, "", "", strategy_args, keys=keys))
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith("plug-in algorithm 'wild' refused: ") and "wild" not in plugged
