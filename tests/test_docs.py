"""README's algorithm and run-config tables are generated from the registry and schema; keep them current."""

from simulation.algorithms import README, generated


def test_readme_tables_match_the_registry_and_schema():
    assert generated() in README.read_text(), "run: python -m simulation.algorithms --write"
