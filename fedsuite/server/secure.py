"""Secure aggregation on the server (secagg=true, docs/privacy-secagg.md): fedsuite's round loop
(fedsuite.server.loop.RoundLoop: central and federated evaluation, the round's row, checkpoints, the honest ending)
with each round's fit exchange run by Flower's SecAggPlusWorkflow (SecAggPlusRound, the loop's fit round under
`flwr run` with secagg=true, fedsuite/run/compose.py).

The workflow asks the strategy for the round's fit instructions (`configure_fit`), runs the four SecAgg+ stages
with the sampled SuperNodes, and hands `aggregate_fit` the FitRes of every client whose masked vector entered the
sum (Flower's active nodes), each FitRes's arrays replaced by the cohort's mean; the clients' metrics and
num_examples arrive as each client sent them. A round the protocol cannot finish (fewer clients than it needs, too
few shares to unmask) reaches `aggregate_fit` with no result and the reason among the failures, so the run guard
judges it like any round without replies.
"""

from __future__ import annotations

from flwr.app import ConfigRecord, Context, RecordDict
from flwr.compat.common import recorddict_compat as compat
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState

from fedsuite.privacy.secagg import SecAggSettings
from fedsuite.server.loop import FitRound, RoundLoop


class SecureAggregationHalted(RuntimeError):
    """SecAgg+ could not finish the round (too few clients or shares); no client's upload was used."""


class RoundWorkflow(SecAggPlusWorkflow):
    """Flower's SecAgg+ workflow for one round, which also tells the strategy about a round it had to give up. A
    subclass because Flower's workflow says nothing when a stage fails: the halted round has to be caught between
    its stages, which only its `__call__` sees."""

    def __call__(self, grid, context: LegacyContext) -> None:
        state = WorkflowState()
        stages = (self.setup_stage, self.share_keys_stage, self.collect_masked_vectors_stage, self.unmask_stage)
        for stage in stages:
            if not stage(grid, context, state):
                if state.nid_to_proxies:  # the round had a cohort: no reply can be used, say why
                    self._halted(context, state, stage.__name__)
                return

    @staticmethod
    def _halted(context: LegacyContext, state: WorkflowState, stage: str) -> None:
        server_round = int(context.state.config_records[MAIN_CONFIGS_RECORD][WorkflowKey.CURRENT_ROUND])
        reason = SecureAggregationHalted(f"SecAgg+ stopped in its {stage.removesuffix('_stage').replace('_', ' ')} "
                                         f"stage: {len(state.active_node_ids)} of {len(state.sampled_node_ids)} "
                                         f"clients left, {state.threshold} needed")  # fmt: skip
        context.strategy.aggregate_fit(server_round, [], [*state.failures, reason])


class SecAggPlusRound(FitRound):
    """The fit round whose exchange is Flower's SecAgg+ workflow (module docstring). `context`: the ServerApp's
    Context (run id and run config for the workflow's LegacyContext)."""

    def __init__(self, settings: SecAggSettings, context: Context):
        self.settings, self.context = settings, context

    def run(self, loop: RoundLoop, server_round: int, timeout: float | None):
        run = self.context
        context = LegacyContext(Context(run.run_id, run.node_id, dict(run.node_config), RecordDict(),
                                        dict(run.run_config)),
                                strategy=loop.strategy, client_manager=loop.client_manager())  # fmt: skip
        context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: server_round})
        context.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(loop.parameters, True)
        (shares, threshold), keywords = self.settings.workflow_args()
        RoundWorkflow(shares, threshold, timeout=timeout, **keywords)(_grid(loop), context)
        parameters = compat.arrayrecord_to_parameters(context.state.array_records[MAIN_PARAMS_RECORD], True)
        return parameters, {}, ([], [])


def _grid(loop: RoundLoop):
    """The Grid the SuperNodes are reached through: Flower's legacy client proxies carry it."""
    manager = loop.client_manager()
    manager.wait_for(1, timeout=int(loop.strategy.plan.node_wait_seconds))
    for proxy in manager.all().values():
        if getattr(proxy, "grid", None) is not None:
            return proxy.grid
    raise RuntimeError(
        "secagg=true needs Flower's Grid (a ServerApp run by `flwr run` or a SuperLink); the "
        "in-process engine runs SecAgg+'s arithmetic instead (fedsuite/run/secagg_arithmetic.py)"
    )
