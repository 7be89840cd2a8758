"""The preset table of docs/running/presets.md, from the presets in fedsuite/presets.py (where the data and the
logic live).

    python -m simulation.presets            # print the table
    python -m simulation.presets --write    # refresh it in docs/running/presets.md between its markers

`expand` and `describe` are re-exported for simulation.run, simulation.compare and simulation.sweep.
"""

from __future__ import annotations

from fedsuite.presets import describe, expand, presets_table
from simulation.algorithms import ROOT, block_command

__all__ = ["BEGIN", "END", "PAGE", "describe", "expand", "generated", "main"]

PAGE = ROOT / "docs" / "running" / "presets.md"
BEGIN, END = "<!-- generated: python -m simulation.presets --write -->", "<!-- end generated presets -->"


def generated() -> str:
    return f"{BEGIN}\n\n{presets_table()}\n\n{END}"


def main() -> None:
    block_command(__doc__, PAGE, BEGIN, END, generated)


if __name__ == "__main__":
    main()
