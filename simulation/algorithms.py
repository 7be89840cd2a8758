"""The generated tables: the algorithm table (README.md and docs/algorithms/index.md, from the registry) and the
run-config reference page docs/reference/run-config.md (every key of the schema, grouped as the typed settings
group them, with the algorithms that read each algorithm key).

python -m simulation.algorithms            # print what would be written
python -m simulation.algorithms --write    # refresh the README block, the docs/algorithms/index.md block, the page
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from fedsuite.config import run_config as config
from fedsuite.config.schema import COMMON_KEYS, Key
from fedsuite.registry.builtin import KEYS as ALGORITHM_KEYS
from fedsuite.registry.known import ALGORITHMS, BUILT_IN_SCHEMA
from fedsuite.systems.availability import Availability
from fedsuite.systems.deadline import Deadline
from fedsuite.systems.dropout import Dropouts

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
ALGORITHMS_PAGE = ROOT / "docs" / "algorithms" / "index.md"
RUN_CONFIG_PAGE = ROOT / "docs" / "reference" / "run-config.md"
BEGIN, END = "<!-- generated: python -m simulation.algorithms --write -->", "<!-- end generated -->"

# The run-config page's sections: the typed settings that read each key (the first that holds it), in this order.
GROUPS = (
    ("Data", config.DataSource),
    ("Partitions", config.Partitioning),
    ("Client sampling", config.ClientSampling),
    ("Local training", config.LocalLoop),
    ("Client systems", Dropouts),
    ("Client systems", Deadline),
    ("Client systems", Availability),
    ("Client-level privacy", config.ClientPrivacy),
    ("Sample-level privacy (DP-SGD)", config.SampleLevelPrivacy),
    ("Secure aggregation", config.SecAggSettings),
    ("Aggregation", config.Aggregation),
    ("Evaluation", config.Evaluation),
    ("Pruning", config.PruneSettings),
    ("Run control", config.RunControl),
    ("Cohort batching", config.Batching),
    ("Output and tracking", config.Output),
    ("Client state", config.ClientStateSettings),
    ("Synthetic federations", config.SyntheticData),
)
FIRST_GROUP = "Algorithm, model and preset"  # the keys no settings group reads
# Keys whose value is a built-in name or an import path: their allowed column lists the code's own names.
NAMED_KEYS = {
    "dataset": (config.DATASETS + config.DATA_FORMATS, "'package.module:loader'"),
    "model": (config.MODELS, "'package.module:factory'"),
}
DOCS_PATH = re.compile(r"\bdocs/([A-Za-z0-9_/.-]+\.md)(#[A-Za-z0-9_-]+)?")


def algorithm_table(page_of=lambda name: f"docs/algorithms/{name}.md") -> str:
    """One row per built-in algorithm (installed plug-ins are not the suite's); `page_of(name)` links its page."""
    rows = [
        "| algorithm | server half | client half | hyper-parameters | what it does |",
        "|---|---|---|---|---|",
    ]
    for a in (ALGORITHMS[name] for name in ALGORITHMS.built_in):
        keys = ", ".join(f"`{k}`" for k in {**a.strategy_args, **a.client_args}.values()) or "—"
        rows.append(
            f"| [`{a.name}`]({page_of(a.name)}) | `{a.strategy.replace(':', '.')}` | "
            f"`{a.client.replace(':', '.')}` | {keys} | {_cell(a.summary)} |"
        )
    return "\n".join(rows)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _allowed(k: Key) -> str:
    if k.name in NAMED_KEYS:
        names, path = NAMED_KEYS[k.name]
        return ", ".join(f"`{name}`" for name in names) + f", or `{path}`"
    if k.choices:
        return ", ".join(f"`{c}`" if c else "`''`" for c in k.choices)
    if k.low is None and k.high is None:
        return "" if not isinstance(k.default, bool) else "`true`, `false`"
    low = "" if k.low is None else f"{'>' if k.low_open else '≥'} {k.low:g}"
    high = "" if k.high is None else f"{'<' if k.high_open else '≤'} {k.high:g}"
    return ", ".join(p for p in (low, high) if p)


def _default(k: Key) -> str:
    if isinstance(k.default, bool):
        return f"`{str(k.default).lower()}`"
    return f"`{k.default!r}`" if isinstance(k.default, str) else f"`{k.default}`"


def _page_title(path: str) -> str:
    """The first `# ` heading of docs/`path` (the link text of a page the schema's help cites)."""
    page = ROOT / "docs" / path
    heading = next((line for line in page.read_text().splitlines() if line.startswith("# ")), None)
    if heading is None:
        raise ValueError(f"docs/{path}: no such page with a '# ' title (cited by a run-config key's help)")
    return heading[2:].strip()


def _linked(text: str) -> str:
    """`text` with every cited page path `docs/<page>.md` as a Markdown link from docs/reference/ (so the strict
    build checks it), titled with the page's own title."""
    return DOCS_PATH.sub(lambda m: f"[{_page_title(m.group(1))}](../{m.group(1)}{m.group(2) or ''})", text)


def _row(k: Key, extra: str | None = None) -> str:
    cells = [f'<span id="{k.name}"></span>`{k.name}`', _default(k), _allowed(k), _linked(_cell(k.help))]
    return "| " + " | ".join(cells + ([extra] if extra is not None else [])) + " |"


def _users(key: str) -> str:
    """The built-in algorithms whose registry entry declares run-config key `key`, or whose tuning searches it,
    linked to their pages (a common key read through the typed settings names its users in its meaning)."""
    names = [
        n for n in ALGORITHMS.built_in if key in {k.name for k in ALGORITHMS[n].keys} or key in ALGORITHMS[n].tunable
    ]
    return ", ".join(f"[{n}](../algorithms/{n}.md)" for n in names) or "as its meaning says"


def run_config_page() -> str:
    grouped: dict[str, list[Key]] = {FIRST_GROUP: []} | {title: [] for title, _ in GROUPS}
    for key in (BUILT_IN_SCHEMA[k.name] for k in COMMON_KEYS):  # `algorithm` with the built-in names
        title = next((t for t, cls in GROUPS if key.name in cls.keys().values()), FIRST_GROUP)
        grouped[title].append(key)
    parts = [
        "# Run-config keys",
        "",
        "<!-- generated by `python -m simulation.algorithms --write` from fedsuite/config/schema.py and the registry; "
        "do not edit by hand -->",
        "",
        "Every key a run accepts, with its default and allowed values. Give keys on the command line as TOML "
        "values, `-c \"algorithm='fedspeed' lr=0.05 num-server-rounds=50\"` (strings in single quotes), to "
        '`python -m simulation.run`, `compare`, `sweep` and `tune`, or with `flwr run . --run-config "…"`. '
        "The schema in `fedsuite/config/run_config.py` is the only place a default is written (`pyproject.toml`'s "
        "`[tool.flwr.app.config]` table is generated from it). A value outside the allowed ones stops the run "
        "before any training, with a one-line error naming the key and what it accepts.",
        "",
    ]
    for title, keys in grouped.items():
        if keys:
            parts += [f"## {title}", "", "| key | default | allowed | meaning |", "|---|---|---|---|"]
            parts += [_row(k) for k in keys] + [""]
    parts += [
        "## Algorithm hyper-parameters",
        "",
        "Read only by the algorithms listed beside each key; the others ignore them. A plug-in algorithm adds its "
        "own keys (see [your own algorithm](../own/algorithm.md)).",
        "",
        "| key | default | allowed | meaning | read by |",
        "|---|---|---|---|---|",
    ]
    parts += [_row(k, _users(k.name)) for k in ALGORITHM_KEYS]
    return "\n".join(parts) + "\n"


def readme_block() -> str:
    return f"{BEGIN}\n{algorithm_table(lambda n: f'docs/algorithms/{n}.md')}\n{END}"


def algorithms_page_block() -> str:
    return f"{BEGIN}\n{algorithm_table(lambda n: f'{n}.md')}\n{END}"


def replace_block(path: Path, block: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace the begin … end block of `path` (a generated table between its two marker lines) by `block`."""
    text = path.read_text()
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{path.relative_to(ROOT)} has no {begin} … {end} block; add the two markers")
    path.write_text(pattern.sub(lambda _: block, text))


def block_command(doc: str, path: Path, begin: str, end: str, make) -> None:
    """The CLI of a generated block: print `make()`, or with --write replace the begin … end block of `path`."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"refresh {path.relative_to(ROOT)}")
    if not parser.parse_args().write:
        print(make())
        return
    replace_block(path, make(), begin, end)


def stale() -> list[str]:
    """The generated files that differ from what the registry and schema give now."""
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    out = []
    for path, block in ((README, readme_block()), (ALGORITHMS_PAGE, algorithms_page_block())):
        found = pattern.search(path.read_text()) if path.exists() else None
        if found is None or found.group(0) != block:
            out.append(str(path.relative_to(ROOT)))
    if not RUN_CONFIG_PAGE.exists() or RUN_CONFIG_PAGE.read_text() != run_config_page():
        out.append(str(RUN_CONFIG_PAGE.relative_to(ROOT)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="refresh the generated files")
    if not parser.parse_args().write:
        print(readme_block(), run_config_page(), sep="\n\n")
        return
    replace_block(README, readme_block())
    replace_block(ALGORITHMS_PAGE, algorithms_page_block())
    RUN_CONFIG_PAGE.parent.mkdir(parents=True, exist_ok=True)
    RUN_CONFIG_PAGE.write_text(run_config_page())


if __name__ == "__main__":
    main()
