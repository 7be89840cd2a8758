"""MkDocs hook: formulas are typeset by KaTeX in the reader's browser. The site ships its own copy of KaTeX (so it
reads offline, e.g. on a cluster without internet) when `npm ci --prefix docs/tooling` has installed it; without
that copy the pages load the same KaTeX version from the jsDelivr CDN, and the build says so."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

TOOLING = Path(__file__).resolve().parent
DIST = TOOLING / "node_modules" / "katex" / "dist"
VERSION = json.loads((TOOLING / "package.json").read_text())["dependencies"]["katex"]
CDN = f"https://cdn.jsdelivr.net/npm/katex@{VERSION}/dist"
FILES = {"css": "katex.min.css", "js": "katex.min.js", "render": "contrib/auto-render.min.js"}
LOCAL = "assets/katex"
log = logging.getLogger("mkdocs.hooks.katex")


def on_config(config):
    base = LOCAL if DIST.is_dir() else CDN
    if base == CDN:
        log.info("KaTeX from %s (run `npm ci --prefix docs/tooling` for a site that reads offline)", CDN)
    config.extra_css.insert(0, f"{base}/{FILES['css']}")
    # KaTeX, then its auto-render extension, then docs/javascripts/katex.js that calls it (listed in mkdocs.yml)
    config.extra_javascript[0:0] = [f"{base}/{FILES['js']}", f"{base}/{FILES['render']}"]
    return config


def on_post_build(config):
    if DIST.is_dir():
        target = Path(config.site_dir) / LOCAL
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for name in (FILES["css"], FILES["js"]):
            shutil.copy2(DIST / name, target / name)
        (target / "contrib").mkdir()
        shutil.copy2(DIST / FILES["render"], target / FILES["render"])
        shutil.copytree(DIST / "fonts", target / "fonts", ignore=shutil.ignore_patterns("*.ttf", "*.woff"))
