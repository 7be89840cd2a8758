"""The plug-in's own run-config key: its β in [0, 1), the strict upper bound said by `high_open`. A plug-in declares
its keys itself, even one that means what a built-in key means (fedavgm-beta), so the two algorithms can be compared
with different values in one run config."""

from __future__ import annotations

from fedsuite.config.schema import Key

BETA = Key("fedavgm-nesterov-beta", 0.9, "Nesterov server momentum β (plug-in examples/fedavgm)", low=0.0, high=1.0,
           high_open=True)  # fmt: skip
