"""Print README's generated tables (algorithms from the registry, run-config keys from the schema).

python -m simulation.algorithms            # print the tables
python -m simulation.algorithms --write    # refresh them in README.md between the markers
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from fedsuite.config import ALGORITHM_KEYS, COMMON_KEYS, Key
from fedsuite.registry import ALGORITHMS

README = Path(__file__).resolve().parent.parent / "README.md"
BEGIN, END = "<!-- generated: python -m simulation.algorithms --write -->", "<!-- end generated -->"


def algorithm_table() -> str:
    rows = [
        "| algorithm | spec | server half | client half | hyper-parameters | what it does |",
        "|---|---|---|---|---|---|",
    ]
    for a in (ALGORITHMS[name] for name in ALGORITHMS.built_in):  # installed plug-ins are not the suite's
        keys = ", ".join(f"`{k}`" for k in {**a.strategy_args, **a.client_args}.values()) or "—"
        rows.append(
            f"| `{a.name}` | ALGORITHMS.md {a.section} | `{a.strategy.replace(':', '.')}` | "
            f"`{a.client.replace(':', '.')}` | {keys} | {a.summary} |"
        )
    return "\n".join(rows)


def _allowed(k: Key) -> str:
    if k.choices:
        return ", ".join(k.choices)
    if k.low is None and k.high is None:
        return "" if not isinstance(k.default, bool) else "true, false"
    low = "" if k.low is None else f"{'>' if k.low_open else '≥'} {k.low:g}"
    high = "" if k.high is None else f"{'<' if k.high_open else '≤'} {k.high:g}"
    return ", ".join(p for p in (low, high) if p)


def config_table() -> str:
    rows = ["| key | default | allowed | meaning |", "|---|---|---|---|"]
    for k in COMMON_KEYS + ALGORITHM_KEYS:
        default = repr(k.default).lower() if isinstance(k.default, bool) else repr(k.default)
        rows.append(f"| `{k.name}` | `{default}` | {_allowed(k)} | {k.help} |")
    return "\n".join(rows)


def generated() -> str:
    return f"{BEGIN}\n\n### Algorithms\n\n{algorithm_table()}\n\n### Run-config keys\n\n{config_table()}\n\n{END}"


def readme_block_command(doc: str, begin: str, end: str, make) -> None:
    """The CLI of a generated README block: print `make()`, or with --write replace README's begin…end block."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="refresh README.md")
    if not parser.parse_args().write:
        print(make())
        return
    text = README.read_text()
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"README.md has no {begin} … {end} block; add the two markers where the table belongs")
    README.write_text(pattern.sub(lambda _: make(), text))


def main() -> None:
    readme_block_command(__doc__, BEGIN, END, generated)


if __name__ == "__main__":
    main()
