"""What an algorithm costs, derived from its declarations, never written twice: the client state each client keeps
(its client half's `state_specs`, fedsuite/rules/declared.py) and the d-vectors each round moves (its server rule's
`sends`, `sends_each`, `uplink`, `uplink_some` and `query`). The algorithm tables and the run's client-state plan
read them here.
"""

from __future__ import annotations

import numpy as np

from fedsuite.config.run_config import Config, resolve
from fedsuite.registry import known as registry
from fedsuite.rules.declared import StateSpec, units
from fedsuite.rules.server_rule import RuleSettings
from fedsuite.server.sampling import Sampler


def _config(cfg: Config | None, algorithm: str) -> Config:
    if not isinstance(cfg, Config) or cfg["algorithm"] != algorithm:
        return resolve({**(dict(cfg) if cfg is not None else {}), "algorithm": algorithm, "preset": ""})
    return cfg


def client_state(algorithm: str, cfg: Config | None = None) -> tuple[StateSpec, ...]:
    """The client's declared persistent state under `cfg` (default: the schema defaults)."""
    cfg = _config(cfg, algorithm)
    return registry.load_class(registry.ALGORITHMS[algorithm].client).state_specs(cfg)


def client_state_vectors(algorithm: str, cfg: Config | None = None) -> int:
    """Persistent d-vectors per client."""
    return units(client_state(algorithm, cfg))


def communication(algorithm: str, cfg: Config | None = None) -> tuple[int, int, int]:
    """(d-vectors down, d-vectors up) per participating client per round, and the extra d-vectors up from the
    clients that return `uplink_some` (FAdamET/GT's tracking subset), from the rule's declarations."""
    rule = declared_rule(_config(cfg, algorithm))
    query = 1 if rule.query is not None else 0
    return 1 + len(rule.sends) + len(rule.sends_each) + query, len(rule.uplink) + query, len(rule.uplink_some)


def declared_rule(cfg: Config):
    """`cfg`'s algorithm's server rule, built only to read its declarations (a 1-d model, one client a round)."""
    settings = RuleSettings(
        initial_x=np.zeros(1, np.float32),
        sampler=Sampler(cfg.num_clients, "fixed", 1),
        lr=1.0,
        relaxed_init=cfg.local.relaxed_init,
    )
    return registry.build_rule(cfg, settings)


def upload_names(algorithm: str, cfg: Config | None = None) -> tuple[str, ...]:
    """The d-vectors its clients upload under `cfg`: the rule's `uplink`, then `uplink_some`, each once."""
    rule = declared_rule(_config(cfg, algorithm))
    return tuple(dict.fromkeys((*rule.uplink, *rule.uplink_some)))


def broadcast_names(algorithm: str, cfg: Config | None = None) -> tuple[str, ...]:
    """The d-vectors its server broadcasts to every sampled client under `cfg`: the model, then the rule's `sends`."""
    rule = declared_rule(_config(cfg, algorithm))
    return tuple(dict.fromkeys(("model", *rule.sends)))


def vectors(algorithm: str) -> tuple[int, int]:
    """d-vectors down / up per participating client per round, at the defaults."""
    return communication(algorithm)[:2]


def tracking_up(algorithm: str) -> int:
    """Extra d-vectors up per round from the tracking subset, at the defaults."""
    return communication(algorithm)[2]
