"""When the server writes a checkpoint: every `checkpoint-every` rounds and after the last, between rounds (no
client writes state then). What goes in is the strategy's declared state (`RuleStrategy.state_dict`)."""

from __future__ import annotations

from fedsuite.results import checkpoint
from fedsuite.server.plan import RunPlan


def due(plan: RunPlan, server_round: int) -> bool:
    every = plan.checkpoint_every
    if every <= 0 or plan.recorder is None or server_round == 0:
        return False
    return server_round % every == 0 or server_round == plan.num_rounds


def write(plan: RunPlan, server_round: int, state: dict) -> None:
    recorder = plan.recorder
    checkpoint.write(
        recorder.folder, server_round, state, recorder.rows, plan.run_config, plan.client_state_root, plan.state_key
    )
    recorder.resume_command = checkpoint.resume_command(recorder.folder)
    recorder.write_summary(recorder.status)
