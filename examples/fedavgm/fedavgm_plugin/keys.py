"""FedAvgM's run-config key: β in [0, 1). fedsuite.config.Key bounds are inclusive above, so this key makes its
upper bound strict itself."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedsuite.config import Key


@dataclass(frozen=True)
class KeyBelow(Key):
    """A number key with low ≤ value < high."""

    def check(self, value):
        converted, error = Key.check(replace(self, high=None), value)  # the type and the lower bound
        below_low = error is not None and "must be" in error
        if below_low or (error is None and converted >= self.high):
            return None, f"{self.name}={value!r}: must be in [{self.low:g}, {self.high:g})"
        return converted, error


BETA = KeyBelow("fedavgm-beta", 0.9, "FedAvgM server momentum β (plug-in examples/fedavgm)", low=0.0, high=1.0)
