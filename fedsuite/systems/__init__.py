"""The server's model of the clients' systems (docs/running/systems.md): what each sampled client can do in a round.

One `SystemModel` per run, built from the run config and the seed (`SystemModel.from_run_config`), is asked by the
server's strategy (fedsuite/server/adapter.py) for every client of a round's cohort; what it decides travels in
that client's fit config, and the shared local loop follows it. Every engine (`flwr run`, the in-process engine,
`fedsuite.app`) goes through that one strategy.

- `fedsuite.systems.work`: how many local steps K_i each client takes (`local-work`);
- `fedsuite.systems.dropout`: which sampled clients drop out of a round (`dropout-rate`);
- `fedsuite.systems.deadline`: client speeds and the round deadline, what a straggler does (`round-deadline`);
- `fedsuite.systems.availability`: which clients can be sampled in a round (`availability`; read by the sampler,
  fedsuite/server/sampling.py);
- `fedsuite.systems.checks`: the run-config rules of these keys, one line each;
- `fedsuite.systems.model`: the `SystemModel` itself and the figures it adds to a round's row.

With every system key at its default the model decides nothing: every client of the cohort gets its instruction,
no fit config entry, no row column, every cohort and every run's numbers as without it.
"""

from fedsuite.stages.client import STEPS_KEY  # the fit-config entry of a client's K_i for the round
from fedsuite.systems.model import SystemModel
from fedsuite.systems.work import LocalWork

__all__ = ["STEPS_KEY", "LocalWork", "SystemModel"]
