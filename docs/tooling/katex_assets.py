"""MkDocs hook: formulas are typeset by KaTeX in the reader's browser, from the site's own copy of KaTeX (so the site
reads offline, e.g. on a cluster without internet). `npm ci --prefix docs/tooling` installs that copy; without it the
build stops with one line saying so, since the pages would show raw LaTeX. `FEDSUITE_DOCS_KATEX=cdn` builds a site
that loads the same KaTeX version from the jsDelivr CDN instead (it then typesets only where the reader is online)."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from mkdocs.exceptions import Abort

TOOLING = Path(__file__).resolve().parent
DIST = TOOLING / "node_modules" / "katex" / "dist"
VERSION = json.loads((TOOLING / "package.json").read_text())["dependencies"]["katex"]
CDN = f"https://cdn.jsdelivr.net/npm/katex@{VERSION}/dist"
FILES = {"css": "katex.min.css", "js": "katex.min.js", "render": "contrib/auto-render.min.js"}
LOCAL = "assets/katex"
SOURCE_VARIABLE = "FEDSUITE_DOCS_KATEX"
SOURCES = ("local", "cdn")  # an unset or empty variable means "local"
log = logging.getLogger("mkdocs.hooks.katex")


def shown(path: Path) -> str:
    """`path` relative to the repository when it lies inside it (as the error names it)."""
    root = TOOLING.parent.parent
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def katex_source(environ=os.environ, dist: Path = DIST) -> str:
    """'local' (the installed copy, shipped with the site) or 'cdn'; stops the build when neither is possible."""
    source = environ.get(SOURCE_VARIABLE, "").strip() or "local"
    if source not in SOURCES:
        raise Abort(f"{SOURCE_VARIABLE}={source!r}: allowed values are {', '.join(SOURCES)}")
    if source == "local" and not all((dist / name).is_file() for name in FILES.values()):
        raise Abort(
            f"KaTeX is not installed ({shown(dist)} is missing), so every formula would show as raw LaTeX: run "
            f"`npm ci --prefix docs/tooling`, or set {SOURCE_VARIABLE}=cdn to load KaTeX {VERSION} from jsDelivr's CDN"
        )
    return source


def on_config(config):
    source = katex_source()
    base = LOCAL if source == "local" else CDN
    if source == "cdn":
        log.info("KaTeX from %s (%s=cdn): formulas typeset only where the reader is online", CDN, SOURCE_VARIABLE)
    config.extra_css.insert(0, f"{base}/{FILES['css']}")
    # KaTeX, then its auto-render extension, then docs/javascripts/katex.js that calls it (listed in mkdocs.yml)
    config.extra_javascript[0:0] = [f"{base}/{FILES['js']}", f"{base}/{FILES['render']}"]
    config.extra["katex_source"] = source
    return config


def on_post_build(config):
    if config.extra.get("katex_source") != "local":
        return
    target = Path(config.site_dir) / LOCAL
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in (FILES["css"], FILES["js"]):
        shutil.copy2(DIST / name, target / name)
    (target / "contrib").mkdir()
    shutil.copy2(DIST / FILES["render"], target / FILES["render"])
    shutil.copytree(DIST / "fonts", target / "fonts", ignore=shutil.ignore_patterns("*.ttf", "*.woff"))
