"""The Flower app bundle (FAB) that `flwr run` builds from the project folder: Flower refuses one above 10 MiB, and
the committed study results under docs/ once filled it (and a folder name with a comma broke its manifest).
pyproject.toml's `fab-exclude` keeps the documentation, tests and Docker files out; the apps' code and the
examples a run config may name (model='examples.own_model.models:…') stay in (docs/running/run.md)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from flwr.cli.build import build_fab_from_disk
from flwr.common.constant import FAB_MAX_SIZE

PROJECT = Path(__file__).resolve().parent.parent


def test_the_app_bundle_is_small_and_holds_no_study_data():
    fab = build_fab_from_disk(PROJECT)
    names = zipfile.ZipFile(io.BytesIO(fab)).namelist()
    assert len(fab) < FAB_MAX_SIZE / 5, f"{len(fab):,} bytes"  # room to grow, far from Flower's limit
    assert not [n for n in names if n.startswith(("docs/", "tests/", "docker/"))]
    apps = (
        "fedsuite/server/app.py",
        "fedsuite/node/app.py",
        "fedsuite/rules/server_rule.py",
        "fedsuite/node/client.py",
    )
    for needed in (*apps, "fedsuite/rules/client_rule.py", "clients/fedavg.py"):
        assert needed in names
    assert "examples/own_model/models.py" in names
