"""The documentation site's own machinery: the KaTeX hook stops a build that would show raw LaTeX (unless the CDN is
asked for), the search index holds formulas without their delimiters, the run-config reference links the pages it
cites and lists the built-in dataset and model names, the Python API reference covers the public modules, and the
docs keep test counts and suite timings out of their prose."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from fedsuite.config import run_config as config
from simulation import algorithms

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
API = DOCS / "reference" / "api"
# What the docs' "your own" pages and the developer guide tell users to import.
PUBLIC_MODULES = (
    "fedsuite.config.run_config", "fedsuite.app", "fedsuite.registry.known", "fedsuite.registry.plugins",
    "fedsuite.config.tunable", "fedsuite.rules.server_rule", "fedsuite.rules.rounds", "fedsuite.rules.client_rule",
    "fedsuite.local.loop", "fedsuite.rules.declared", "fedsuite.testing",
    "fedsuite.data.own", "fedsuite.models.networks",
)  # fmt: skip


def hook(name: str):
    """A module of docs/tooling/ (MkDocs hooks are files, not a package)."""
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location(f"docs_tooling_{name}", DOCS / "tooling" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def complete_dist(folder: Path, katex) -> Path:
    for name in katex.FILES.values():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("")
    return folder


def test_a_build_without_katex_stops_with_one_line_naming_the_npm_command(tmp_path):
    katex = hook("katex_assets")
    from mkdocs.exceptions import Abort

    with pytest.raises(Abort) as stopped:
        katex.katex_source(environ={}, dist=tmp_path / "missing")
    message = str(stopped.value)
    assert "\n" not in message
    assert "npm ci --prefix docs/tooling" in message and "FEDSUITE_DOCS_KATEX=cdn" in message
    # half an install (no auto-render) is no install
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "katex.min.js").write_text("")
    with pytest.raises(Abort):
        katex.katex_source(environ={}, dist=tmp_path / "half")


def test_katex_comes_from_the_site_when_installed_and_from_the_cdn_only_when_asked(tmp_path):
    katex = hook("katex_assets")
    from mkdocs.exceptions import Abort

    dist = complete_dist(tmp_path / "dist", katex)
    assert katex.katex_source(environ={}, dist=dist) == "local"
    assert katex.katex_source(environ={"FEDSUITE_DOCS_KATEX": "local"}, dist=dist) == "local"
    assert katex.katex_source(environ={"FEDSUITE_DOCS_KATEX": "cdn"}, dist=tmp_path / "missing") == "cdn"
    with pytest.raises(Abort, match=r"FEDSUITE_DOCS_KATEX='mathjax': allowed values are local, cdn"):
        katex.katex_source(environ={"FEDSUITE_DOCS_KATEX": "mathjax"}, dist=dist)


def test_the_search_index_holds_formulas_without_their_delimiters():
    search = hook("search_math")
    assert search.without_delimiters(r"the model \(x^{t}\) and \[ f(x) = \tfrac12 \lVert x \rVert^2 \]") == (
        r"the model x^{t} and f(x) = \tfrac12 \lVert x \rVert^2"
    )
    assert search.without_delimiters(r"\left[ a \right] stays") == r"\left[ a \right] stays"
    index = {"docs": [{"location": "a.html", "title": r"Step \(\eta\)", "text": r"<p>\(x\) and \(y\)</p>"}]}
    cleaned = search.clean_index(index)["docs"][0]
    assert cleaned == {"location": "a.html", "title": r"Step \eta", "text": "<p>x and y</p>"}


def run_config_row(key: str) -> str:
    text = algorithms.RUN_CONFIG_PAGE.read_text()
    return next(line for line in text.splitlines() if line.startswith(f'| <span id="{key}"></span>'))


def test_the_run_config_reference_lists_the_built_in_dataset_and_model_names():
    dataset_row = run_config_row("dataset")
    for name in config.DATASETS + config.DATA_FORMATS:
        assert f"`{name}`" in dataset_row, f"the dataset row does not name {name}"
    model_row = run_config_row("model")
    for name in config.MODELS:
        assert f"`{name}`" in model_row, f"the model row does not name {name}"


def test_the_run_config_reference_links_the_pages_it_cites():
    text = algorithms.run_config_page()
    plain = [m.group(0) for m in re.finditer(r"(?<![(/])docs/[A-Za-z0-9_/.-]+\.md", text)]
    assert plain == [], f"page paths as plain text instead of links: {plain}"
    assert "[Your own data](../own/data.md)" in run_config_row("dataset")
    for target in re.findall(r"\]\((\.\./[^)#\s]+)", text):
        assert (algorithms.RUN_CONFIG_PAGE.parent / target).resolve().is_file(), f"{target} does not exist"


def test_the_python_api_reference_is_in_the_navigation_and_names_each_public_module():
    from tests.test_docs import nav_pages

    pages = [page for page in nav_pages() if page.startswith("reference/api/")]
    assert "reference/api/index.md" in pages
    assert {f"reference/api/{p.name}" for p in API.glob("*.md")} == set(pages), "an API page is not in the nav"
    rendered = {m for page in pages for m in re.findall(r"^::: ([\w.]+)", (DOCS / page).read_text(), re.M)}
    for module in PUBLIC_MODULES:
        assert module in rendered, f"no API page renders {module}"
        importlib.import_module(module)  # a name the reference shows must import
    for page in ("own/algorithm.md", "own/data.md", "own/model.md", "own/flower-app.md"):
        assert "reference/api/" in (DOCS / page).read_text(), f"docs/{page} does not link the API reference"


def test_the_docs_keep_test_counts_and_suite_timings_out_of_their_prose():
    pages = [ROOT / "README.md", *DOCS.rglob("*.md")]
    figures = re.compile(r"\b\d+ (passed|failed|skipped)\b|\bsuite took\b")
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in pages for m in figures.finditer(p.read_text())]
    assert found == [], "test counts or suite timings in the docs' prose: " + "; ".join(found)


def test_getting_started_sample_line_agrees_with_its_table():
    text = (DOCS / "getting-started.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `python -m simulation.run` (defaults)"))
    to70, to75 = (int(n) for n in re.search(r"\| (\d+) / (\d+) \|$", row).groups())
    final = float(re.search(r"\| ([0-9.]+) / [0-9.]+ \|", row).group(1))
    sample = re.search(r"round (\d+)/20 │ acc ([0-9.]+)", text)
    round_, accuracy = int(sample.group(1)), float(sample.group(2))
    for target, first in ((0.70, to70), (0.75, to75)):  # the first round at the target, as the table counts it
        if round_ < first:
            assert accuracy < target, f"round {round_} shows {accuracy}, yet the table reaches {target} at {first}"
        if round_ == first:
            assert accuracy >= target, f"round {round_} shows {accuracy}, yet the table reaches {target} there"
    assert round_ < 20 or accuracy == pytest.approx(final, abs=5e-4)
