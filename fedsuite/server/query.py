"""A rule's pre-round query (fedsuite.rules.rounds.Query): the model goes to each routed client with the query's phase
in its config; the answer must be the one named d-vector, finite, for the partition asked. A client whose answer
fails is left out of the round (it gets no fit message); its failure is logged, never the run's."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from flwr.common import Code, FitIns
from flwr.server.client_proxy import ClientProxy

from fedsuite.codec.payload import ARRAYS_KEY, PARTITION_KEY, STATE_KEY, nbytes, pack, unpack
from fedsuite.rules.rounds import PHASE_KEY, Answer, Query
from fedsuite.server.wire import arrays_of, to_parameters

log = logging.getLogger("flwr.fedsuite")


def ask(
    query: Query, server_round: int, x: np.ndarray, nodes: dict[int, ClientProxy], workers: int, state_key: int = 0
) -> dict[int, Answer]:
    """{partition: Answer} of the clients whose answer is valid, in partition order. `state_key` names the folder
    of node-held client state (the run that started the experiment, kept across resumes)."""
    arrays, names = pack({"model": x})
    params = to_parameters(arrays)
    config = {"round": server_round, PHASE_KEY: query.phase, ARRAYS_KEY: names, STATE_KEY: str(state_key)}

    def one(pid: int) -> tuple[int, Answer | None]:
        try:
            res = nodes[pid].fit(FitIns(params, {**config, PARTITION_KEY: pid}), None, server_round)
            if "error" in res.metrics:  # the client's own failure, as fedsuite/node/client.py reports it
                raise ValueError(str(res.metrics["error"]))
            if res.status.code != Code.OK or int(res.metrics.get("partition-id", -1)) != pid:
                raise ValueError(f"status {res.status.code}, partition-id {res.metrics.get('partition-id')}")
            got = unpack(arrays_of(res.parameters), str(res.metrics.get(ARRAYS_KEY, "")))
            vector = got.get(query.answer)
            if vector is None or vector.shape != x.shape or not np.all(np.isfinite(vector)) or res.num_examples <= 0:
                raise ValueError(f"{query.answer} missing, of the wrong shape or not finite")
            seconds = float(res.metrics["compute-seconds"])
            return pid, Answer(vector.astype(np.float64), int(res.num_examples), seconds, nbytes([vector]))
        except Exception as err:  # a failed query is a failure of this client's round, never of the run
            log.warning("round %d: %s query to partition %d failed: %s", server_round, query.phase, pid, err)
            return pid, None

    with ThreadPoolExecutor(max_workers=workers) as pool:
        answers = dict(pool.map(one, sorted(nodes)))
    return {pid: a for pid, a in answers.items() if a is not None}
