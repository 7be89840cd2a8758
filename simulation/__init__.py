"""The commands that run the suite, and what they are built from.

The modules at this level are the commands the README documents: `python -m simulation.run` (one run through
`flwr run`), `simulation.compare`, `simulation.sweep` and `simulation.tune` (studies), and the generators of the
docs' tables, `simulation.algorithms` and `simulation.presets` (`--write`). Below them, one package per job:

- `simulation.launcher`: one `flwr run` launch: its checks, its processes, how it ended;
- `simulation.experiment`: jobs, the one runner, progress, reports and the declarative study every study
  command is;
- `simulation.studies`: the papers' studies (LoSAC's Table II and low-rank study, the DLG and LoRA studies);
- `simulation.benchmarks`: what the suite costs (Flower's overhead, the local loop, peak memory).
"""
