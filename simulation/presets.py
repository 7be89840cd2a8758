"""README's preset table, from the presets in fedsuite/presets.py (where the data and the logic live).

    python -m simulation.presets            # print the table
    python -m simulation.presets --write    # refresh it in README.md between its markers

`expand` and `describe` are re-exported for simulation.run, simulation.compare and simulation.sweep.
"""

from __future__ import annotations

from fedsuite.presets import describe, expand, presets_table
from simulation.algorithms import README, readme_block_command

__all__ = ["BEGIN", "END", "README", "describe", "expand", "generated", "main"]

BEGIN, END = "<!-- generated: python -m simulation.presets --write -->", "<!-- end generated presets -->"


def generated() -> str:
    return f"{BEGIN}\n\n{presets_table()}\n\n{END}"


def main() -> None:
    readme_block_command(__doc__, BEGIN, END, generated)


if __name__ == "__main__":
    main()
