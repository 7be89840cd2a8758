"""The preset table of docs/running/presets.md, from the presets in fedsuite/config/presets.py (where the data and the
logic live).

    python -m simulation.presets            # print the table
    python -m simulation.presets --write    # refresh it in docs/running/presets.md between its markers
"""

from __future__ import annotations

from fedsuite.config.presets import presets_table
from simulation.algorithms import ROOT, block_command

PAGE = ROOT / "docs" / "running" / "presets.md"
BEGIN, END = "<!-- generated: python -m simulation.presets --write -->", "<!-- end generated presets -->"


def generated() -> str:
    return f"{BEGIN}\n\n{presets_table()}\n\n{END}"


def main() -> None:
    block_command(__doc__, PAGE, BEGIN, END, generated)


if __name__ == "__main__":
    main()
