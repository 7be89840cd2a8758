"""One `flwr run` launch (`python -m simulation.run`): the run config checked before Flower starts, the
Flower processes started, watched and stopped together, and the run's real status.
"""
