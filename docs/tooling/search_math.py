"""MkDocs hook: the search index holds formulas without their math delimiters.

`pymdownx.arithmatex` writes a formula as `\\( … \\)` (inline) or `\\[ … \\]` (display) for KaTeX to typeset in the
page; the search plugin indexes the page's text as it is, so its results showed those delimiters around raw LaTeX.
After the search plugin has written `search/search_index.json`, this hook removes the delimiters from every entry's
title and text (the LaTeX between them stays, so a formula can still be found by what it says)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mkdocs.plugins import event_priority

INDEX = Path("search") / "search_index.json"
FORMULA = re.compile(r"\\\((.*?)\\\)|\\\[(.*?)\\\]", re.DOTALL)


def without_delimiters(text: str) -> str:
    """`text` with every `\\( … \\)` and `\\[ … \\]` replaced by the formula between them."""
    return FORMULA.sub(lambda match: (match.group(1) if match.group(1) is not None else match.group(2)).strip(), text)


def clean_index(index: dict) -> dict:
    for entry in index.get("docs", []):
        for field in ("title", "text"):
            if isinstance(entry.get(field), str):
                entry[field] = without_delimiters(entry[field])
    return index


@event_priority(-100)  # after the search plugin's own on_post_build, which writes the index
def on_post_build(config):
    path = Path(config.site_dir) / INDEX
    if path.is_file():
        index = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(clean_index(index), separators=(",", ":")), encoding="utf-8")
