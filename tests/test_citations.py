"""Citations stay inside the repository: a clone has neither the specification files that sat beside the project
nor its issue tracker, so no tracked file names those files or an issue number, and every documentation page that
code, tests, scripts or the README cite as a `docs/….md` path exists. Pure file reading over `git ls-files`."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The specification files that lived outside the repository (spelled in parts so this file does not name them).
SPEC_FILES = ("ALGORITHMS", "FLOWER", "ENVIRONMENT", "DESIGN")
OUTSIDE = re.compile(r"\b(?:" + "|".join(SPEC_FILES) + r")\.md\b|\.\./shared\b")
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
# A page cited by its repository path, with optional sibling pages after it: "docs/algorithms/fedsam.md, mofedsam.md".
DOCS_PATH = re.compile(r"(?<![\w./-])(docs/(?:[\w.-]+/)*)([\w.-]+\.md)\b((?:,\s*[\w-]+\.md\b)*)")
# Documentation pages (mkdocs.yml's exclude_docs): their links are checked by `mkdocs build --strict`, not here.
PAGE = re.compile(
    r"docs/(?:[^/]+\.md|[^/]+/index\.md|(?:algorithms|running|reference|own|deployment|developer)/[^/]+\.md)"
)


@cache
def text_files() -> tuple[tuple[str, str], ...]:
    """(path, text) of every tracked file that is not binary (no NUL byte in its first 8 KiB)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = []
    for name in sorted(filter(None, listed.decode().split("\0"))):
        path = ROOT / name
        if not path.is_file():  # deleted in the working tree, not yet committed
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        files.append((name, data.decode("utf-8", errors="replace")))
    return tuple(files)


def hits(pattern: re.Pattern, files) -> list[str]:
    return [f"{name}:{number}: {match.group(0)!r}" for name, text in files
            for number, line in enumerate(text.splitlines(), 1) for match in pattern.finditer(line)]  # fmt: skip


def test_no_file_names_the_outside_specification_files():
    found = hits(OUTSIDE, text_files())
    assert not found, "cite the documentation page (docs/….md) instead:\n" + "\n".join(found)


def test_no_file_cites_an_issue_number():
    found = hits(ISSUE, text_files())
    assert not found, "a clone has no issue tracker; say what the issue was about instead:\n" + "\n".join(found)


def cited_pages() -> list[tuple[str, int, str]]:
    """(file, line, page path) for every docs/….md path cited outside the documentation pages, siblings included."""
    cited = []
    for name, text in text_files():
        if PAGE.fullmatch(name):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for match in DOCS_PATH.finditer(line):
                folder, first, more = match.groups()
                for page in [first, *re.findall(r"[\w-]+\.md", more)]:
                    cited.append((name, number, folder + page))
    return cited


def test_every_cited_documentation_page_exists():
    cited = cited_pages()
    assert cited, "no docs/….md citation found: the pattern is broken"
    missing = [f"{name}:{number}: {page}" for name, number, page in cited if not (ROOT / page).is_file()]
    assert not missing, "cited documentation pages that do not exist:\n" + "\n".join(missing)


def test_the_presets_short_page_names_exist():
    """The presets (fedsuite/config/preset_values.py, and the code beside them in presets.py) cite pages by file name
    (the module docstring says where they are): each must exist there."""
    folders = (ROOT / "docs" / "reference", ROOT / "docs" / "algorithms")
    missing = []
    cited = 0
    for name in ("preset_values.py", "presets.py"):
        text = (ROOT / "fedsuite" / "config" / name).read_text()
        for number, line in enumerate(text.splitlines(), 1):
            comment = line.partition("#")[2]
            for page in re.findall(r"(?<![\w/.-])([\w-]+\.md)\b", comment):
                cited += 1
                if not any((folder / page).is_file() for folder in folders):
                    missing.append(f"fedsuite/config/{name}:{number}: {page}")
    assert cited > 0, "the presets cite no page: the check would pass on nothing"
    assert not missing, "pages named in the presets' comments that do not exist:\n" + "\n".join(missing)
