"""The verification kit: what fedsuite's own tests check of every algorithm, as public API for plug-in algorithms.

Every check runs the real thing (`fedsuite.run.inprocess.run_inprocess`: the ServerApp's strategy, the ClientApp's
clients, Flower's round loop) on a small heterogeneous least-squares federation, and raises AssertionError with a
one-line reason when the claim does not hold, so a plug-in's pytest file is a few calls:

    from fedsuite import testing as kit

    def test_beta_zero_is_fedavg():
        kit.check_reduction("fedavgm", "fedavg", a_keys={"fedavgm-beta": 0.0}, knob={"fedavgm-beta": 0.5})

The federation (`dataset='synthetic-lsq'`):

    LSQ                     5 clients, all in every round, full-batch local steps: deterministic, with a closed-form
                            optimum; where drift-free methods reach x* and FedAvg stalls at its drift bias
    PARTIAL                 6 clients, 3 a round, minibatches, weight decay: partial participation and a data order,
                            for reductions, checkpoints and communication
    least_squares(cfg)      its clients' (A_i, b_i) in float64 and the numpy x* of f(x) = mean_i F_i(x) + (wd/2)‖x‖²,
                            F_i(x) = (1/2n_i)‖A_i x − b_i‖², in closed form; `.relative_error(x)` = ‖x − x*‖ / ‖x*‖

What the kit runs and checks:

    run_algorithm(name, cfg, invariants=[...])   one run in process; returns a KitRun: x⁰ (the round-0 model), the
                            final x, and per round the model after aggregation, the sampled cohort and the results
                            row (losses, relative error, d-vectors and bytes per client); each invariant is called
                            with the strategy after every aggregation (`strategy.rule` is the algorithm's server rule
                            with its declared state, `client_vector` reads a client's state), and with the keywords
                            `server_round` and `cohort` (the round's sampled partition ids) where its signature takes
                            them; it may raise: the run stops and the error names the round
    check_reduction(a, b, ...)   with these settings algorithm a equals algorithm b bit for bit, the model after
                            every round; with `knob` added to a's settings they differ (the knob really acts)
    check_checkpoint_round_trip(name, folder, ...)   a run stopped after round r and resumed to R ends bit-identical
                            to the uninterrupted R-round run: model, declared server state, every client's state
    check_communication(name, ...)   the d-vectors down/up per client measured in every round equal the registry's,
                            which are derived from the rule's declarations (`sends`, `sends_each`, `uplink`, …)
    check_client_state(name, ...)   every declared client vector is saved after an accepted reply, changes while
                            the clients train, and is read back in the client's next round

For a float64 reference written beside the run (docs/own/algorithm.md, "A float64 reference"):

    minibatch_order(partition, round, cfg)   the minibatches client `partition`'s local loop trains on in `round`,
                            step by step: their rows of the client's data (`least_squares(cfg).clients[partition]`),
                            the inputs and targets as the loop saw them, and the fixed block; replayed from the
                            loop's own batch source and generator of (seed, round, partition)

Nothing here imports tests/; fedsuite's own tests (tests/test_kit.py) check the kit on the built-ins. The kit's
code is in fedsuite/testing/: federations.py (LSQ, PARTIAL, least_squares), runs.py (run_algorithm, client_vector),
minibatches.py (minibatch_order) and checks.py (the check_* functions and identical).
"""

from fedsuite.testing.checks import (
    check_checkpoint_round_trip,
    check_client_state,
    check_communication,
    check_reduction,
    identical,
)
from fedsuite.testing.federations import LSQ, PARTIAL, LeastSquares, least_squares
from fedsuite.testing.minibatches import Minibatch, minibatch_order
from fedsuite.testing.runs import KitRun, RoundObservation, client_vector, run_algorithm

__all__ = [
    "LSQ", "PARTIAL", "KitRun", "LeastSquares", "Minibatch", "RoundObservation", "check_checkpoint_round_trip",
    "check_client_state", "check_communication", "check_reduction", "client_vector", "identical", "least_squares",
    "minibatch_order", "run_algorithm",
]  # fmt: skip
