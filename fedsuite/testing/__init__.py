"""The verification kit, fedsuite's public API for testing a plug-in algorithm: `from fedsuite import testing as kit`.

The kit's names are documented in fedsuite/testing/kit.py and on docs/reference/api/testing.md."""

from fedsuite.testing.kit import (
    LSQ,
    PARTIAL,
    KitRun,
    LeastSquares,
    Minibatch,
    RoundObservation,
    check_checkpoint_round_trip,
    check_client_state,
    check_communication,
    check_reduction,
    client_vector,
    identical,
    least_squares,
    minibatch_order,
    run_algorithm,
)  # fmt: skip

__all__ = [
    "LSQ", "PARTIAL", "KitRun", "LeastSquares", "Minibatch", "RoundObservation", "check_checkpoint_round_trip",
    "check_client_state", "check_communication", "check_reduction", "client_vector", "identical", "least_squares",
    "minibatch_order", "run_algorithm",
]  # fmt: skip
