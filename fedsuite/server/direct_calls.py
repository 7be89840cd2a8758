"""A `NumPyClient`'s fit and evaluate called in this process as Flower's own wrapper calls them
(`flwr.compat.client.numpy_client`: decode the instruction's arrays, call, check the result's types, encode the
reply), with the copies of `fedsuite.server.wire` instead of Flower's `np.save` / `np.load` round trips. The client
gets writable arrays of the same values (a client that declares READ_ONLY_ARRAYS gets read-only views instead) and
the reply carries the same bytes, so a run is the same bit for bit.
A client that is not a wrapped NumPyClient is called as it is."""

from __future__ import annotations

from flwr.client import Client
from flwr.common import Code, EvaluateIns, EvaluateRes, FitIns, FitRes, Status
from flwr.compat.client.numpy_client import (
    EXCEPTION_MESSAGE_WRONG_RETURN_TYPE_EVALUATE,
    EXCEPTION_MESSAGE_WRONG_RETURN_TYPE_FIT,
)

from fedsuite.codec.device_parameters import device_tensors
from fedsuite.server.wire import arrays_of, to_parameters, writable_arrays_of


def fit(client: Client, ins: FitIns) -> FitRes:
    """`client.fit(ins)`."""
    numpy_client = getattr(client, "numpy_client", None)
    if numpy_client is None:
        return client.fit(ins)
    results = numpy_client.fit(_arrays_for(numpy_client, ins.parameters), ins.config)
    if not (
        len(results) == 3
        and isinstance(results[0], list)
        and isinstance(results[1], int)
        and isinstance(results[2], dict)
    ):
        raise TypeError(EXCEPTION_MESSAGE_WRONG_RETURN_TYPE_FIT)
    arrays, num_examples, metrics = results
    return FitRes(Status(Code.OK, "Success"), to_parameters(arrays), num_examples, metrics)


def evaluate(client: Client, ins: EvaluateIns) -> EvaluateRes:
    """`client.evaluate(ins)`."""
    numpy_client = getattr(client, "numpy_client", None)
    if numpy_client is None:
        return client.evaluate(ins)
    results = numpy_client.evaluate(_arrays_for(numpy_client, ins.parameters), ins.config)
    if not (
        len(results) == 3
        and isinstance(results[0], float)
        and isinstance(results[1], int)
        and isinstance(results[2], dict)
    ):
        raise TypeError(EXCEPTION_MESSAGE_WRONG_RETURN_TYPE_EVALUATE)
    loss, num_examples, metrics = results
    return EvaluateRes(Status(Code.OK, "Success"), loss, num_examples, metrics)


def _arrays_for(numpy_client, parameters) -> list:
    """Writable copies, as Flower's np.load gives them; read-only views of the message's bytes for a client that
    declares it copies what it keeps (READ_ONLY_ARRAYS, fedsuite.node.client.RuleClient): one copy less. A message
    whose arrays are device tensors (fedsuite/server/placement.py) gives such a client the tensors, any other host
    copies."""
    tensors = device_tensors(parameters)
    if tensors is not None:
        if getattr(numpy_client, "READ_ONLY_ARRAYS", False):
            return list(tensors)
        return [t.detach().cpu().numpy().copy() for t in tensors]
    return arrays_of(parameters) if getattr(numpy_client, "READ_ONLY_ARRAYS", False) else writable_arrays_of(parameters)
