"""The documentation: README is a short front door, the site (mkdocs.yml, docs/) has a page for every algorithm of
the registry and for every study folder, the run-config reference has a row for every key of the schema, the
generated tables are current, and the site builds with `mkdocs build --strict` (no broken link or anchor, no page
left out of the navigation)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedsuite.config.schema import COMMON_KEYS
from fedsuite.registry.builtin import KEYS as ALGORITHM_KEYS
from fedsuite.registry.known import ALGORITHMS
from simulation import algorithms

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
NOT_STUDIES = {"algorithms", "running", "reference", "own", "deployment", "developer", "tooling", "javascripts",
               "stylesheets", "studies"}  # fmt: skip


def nav_pages() -> list[str]:
    """Every page path named in mkdocs.yml's navigation."""
    yaml = pytest.importorskip("yaml")

    def walk(node) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, list):
            return [page for item in node for page in walk(item)]
        if isinstance(node, dict):
            return [page for value in node.values() for page in walk(value)]
        return []

    return walk(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])


def test_generated_tables_and_the_run_config_reference_are_current():
    assert algorithms.stale() == [], "run: python -m simulation.algorithms --write"


def test_every_algorithm_has_its_page_in_the_navigation():
    nav = set(nav_pages())
    for name in ALGORITHMS.built_in:
        page = f"algorithms/{name}.md"
        assert (DOCS / page).is_file(), f"docs/{page} is missing"
        assert page in nav, f"docs/{page} is not in mkdocs.yml's nav"
        text = (DOCS / page).read_text()
        for section in ("## Source", "## Update rule", "## State", "## How it is verified"):
            assert section in text, f"docs/{page} has no '{section}' section"


def test_every_run_config_key_has_its_row():
    text = algorithms.RUN_CONFIG_PAGE.read_text()
    ids = re.findall(r'<span id="([^"]+)"></span>`([^`]+)`', text)
    assert all(anchor == name for anchor, name in ids)
    rows = [name for _, name in ids]
    assert sorted(rows) == sorted(k.name for k in COMMON_KEYS + ALGORITHM_KEYS)
    assert len(rows) == len(set(rows))


def test_every_study_folder_has_a_page_in_the_navigation():
    nav = set(nav_pages())
    studies = [d.name for d in DOCS.iterdir() if d.is_dir() and d.name not in NOT_STUDIES]
    assert {"comparison", "cpu-study", "losac", "lowrank", "dlg", "adaptive", "gpu"} <= set(studies)
    for name in studies:
        assert (DOCS / name / "index.md").is_file(), f"docs/{name}/ has no index.md"
        assert f"{name}/index.md" in nav, f"docs/{name}/index.md is not in mkdocs.yml's nav"


def test_readme_is_a_short_front_door_whose_links_exist():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert 'pip install -e ".[dev]"' in text and 'python -m pytest -m "not slow and not deploy" -n 2' in text
    for target in re.findall(r"\]\(((?:docs/)[^)#\s]+)", text):
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    katex_installed = (DOCS / "tooling" / "node_modules" / "katex" / "dist" / "katex.min.js").is_file()
    env.pop("FEDSUITE_DOCS_KATEX", None)
    if not katex_installed:  # the links are checked all the same; the formulas' assets are CI's `npm ci`
        env["FEDSUITE_DOCS_KATEX"] = "cdn"
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    problems = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0, "\n".join(problems) or done.stderr[-3000:]
    site = tmp_path / "site"
    assert (site / "algorithms" / "fedspeed.html").is_file()
    assert (site / "assets" / "katex" / "katex.min.js").is_file() == katex_installed
    index = (site / "search" / "search_index.json").read_text()
    assert "\\\\(" not in index and "\\\\[" not in index, "the search index holds math delimiters"
    assert "fedsuite.config.run_config.resolve" in (site / "reference" / "api" / "config.html").read_text()


def test_the_checkpoint_page_lists_exactly_the_keys_a_resume_may_change():
    """docs/running/checkpoints.md's list and the keys tagged `resumable` in the schema agree."""
    import re

    from fedsuite.results.checkpoint import resumable_keys

    page = (ROOT / "docs" / "running" / "checkpoints.md").read_text()
    section = page.split("### What a resume may change", 1)[1].split("Any other difference", 1)[0]
    listed = set(re.findall(r"`([a-z0-9-]+)`", section.split(":\n", 1)[1]))
    assert listed == set(resumable_keys())
