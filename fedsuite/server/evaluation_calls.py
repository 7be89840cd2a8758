"""The evaluation half of the Flower `Strategy` every algorithm runs as (fedsuite.server.adapter.RuleStrategy, which
mixes it in): the central metrics of a round (`evaluate`) and federated evaluation (`configure_evaluate`,
`aggregate_evaluate`: evaluation federated/both, due rounds; fedsuite.server.federated_evaluation), each kept for
the round's row. It reads the strategy's plan, rule, router and stages, and writes its per-round metrics."""

from __future__ import annotations

import logging
from typing import Any

from flwr.common import EvaluateIns, EvaluateRes, Parameters
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from fedsuite.codec.payload import ALGORITHM_KEY, ARRAYS_KEY, PARTITION_KEY, STATE_KEY, pack
from fedsuite.server.federated_evaluation import check_eval_reply, eval_cohort, federated_metrics
from fedsuite.server.replies import RejectedReply, describe_failure, failure_details
from fedsuite.server.stages import arrays_beside
from fedsuite.server.wire import to_parameters

log = logging.getLogger("flwr.fedsuite")


class EvaluationCalls:
    """Flower's evaluation calls on a RuleStrategy (`plan`, `rule`, `placement`, `router`, `stages`, `_sampled`,
    `_asked`, `_metrics` and `_client_problem` are the strategy's)."""

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        """Federated evaluation (evaluation federated/both) in due rounds: the model (and the stages' arrays beside
        it) to each evaluating client, routed as fit is."""
        plan = self.plan
        if not plan.federated or server_round == 0 or not plan.evaluation_due(server_round):
            return []
        cohort = eval_cohort(server_round, plan.seed, plan.sampler.num_clients, plan.eval_clients, self._sampled)
        nodes = self.router.route(cohort, client_manager, blocks=False)  # one message each: spread over the nodes
        missing = [pid for pid in cohort if pid not in nodes]
        if missing:
            log.warning("round %d: partitions %s have no connected node to evaluate; counted as failures",
                        server_round, missing)  # fmt: skip
        self._asked = set(nodes)
        self._metrics.setdefault(server_round, {}).update(federated_metrics([], 0, len(missing)))
        model = self.placement.host(self.rule.evaluation_model())  # a host array wherever the rule keeps x
        arrays, names = pack({"model": model, **arrays_beside(self.stages, server_round)})
        params = to_parameters(arrays)
        config = {
            "round": server_round,
            ALGORITHM_KEY: plan.algorithm,
            ARRAYS_KEY: names,
            STATE_KEY: str(plan.state_key),
        }
        return [(nodes[pid], EvaluateIns(params, {**config, PARTITION_KEY: pid})) for pid in sorted(nodes)]

    def aggregate_evaluate(self, server_round: int, results: list[tuple[ClientProxy, EvaluateRes]], failures: list):
        """Checked evaluate replies → the round's federated metrics; rejected replies and failures are logged to
        clients.log and counted, never in the means."""
        replies, rejected = [], 0
        for proxy, res in results:
            try:
                replies.append(check_eval_reply(res, self._asked))
            except RejectedReply as err:
                rejected += 1
                self._client_problem(server_round, self.router.who(proxy, res), f"evaluate rejected: {err}",
                                     err.details)  # fmt: skip
        for failure in failures:
            proxy = failure[0] if isinstance(failure, tuple) else None
            self._client_problem(server_round, self.router.who(proxy), f"evaluate failed: {describe_failure(failure)}",
                                 failure_details(failure))  # fmt: skip
        missing = self._metrics.get(server_round, {}).get("fed_failures", 0)
        metrics = federated_metrics(replies, rejected, len(failures) + missing)
        self._metrics.setdefault(server_round, {}).update(metrics)
        loss = metrics.get("fed_loss")
        return (None if loss is None else float(loss)), {
            k: v for k, v in metrics.items() if isinstance(v, (int, float))
        }

    def evaluate(self, server_round: int, parameters: Parameters):
        """The round's central metrics (test set; validation union), kept for its row (`end_round`)."""
        plan = self.plan
        metrics: dict[str, Any] = {}
        if plan.evaluation_due(server_round):
            extra = tuple(arg for stage in self.stages for arg in stage.evaluation_args())
            x = self.placement.host(self.rule.evaluation_model())  # x, unless the rule evaluates another (FedExP)
            if plan.evaluate:
                metrics.update(plan.evaluate(x, *extra))
            if plan.validate:
                metrics.update(plan.validate(x, *extra))
        self._metrics[server_round] = metrics
        if not metrics:
            return None
        loss = metrics.get("loss")
        return float(loss if loss is not None else float("nan")), {
            k: v for k, v in metrics.items() if isinstance(v, (int, float))
        }
