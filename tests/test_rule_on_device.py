"""The server rule on the device (fedsuite/server/placement.py, fedsuite/rules/vectors.py,
docs/running/batched.md#the-server-rule-on-the-device): in the in-process batched round, once a round's replies all
stayed on the device, the rule's x and state, its arithmetic and the fit instructions' arrays stay there too.

On a CUDA card the path is on by itself; here it runs on the CPU (`placement.ON_CPU` with `device_replies.ON_CPU`),
the same code. The operators round as NumPy's do, so every model and every state vector is the host path's bit for
bit; the rules that add up a sum over coordinates themselves (a norm or a dot product: FedSMOO's and FedGAMMA's s,
FedExP's η_g) or take a square root (the FedOpt family: torch's vectorised square root on the CPU is off by one unit
in the last place for about one entry in a hundred) differ in the last bits: a float64 difference that moves one
entry of the float32 model by one unit, carried through the rounds after it (within 1e-6 relative).
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
import torch

from fedsuite import testing as kit
from fedsuite.batched import device_replies
from fedsuite.codec.device_arrays import DeviceArrays
from fedsuite.codec.device_parameters import DeviceParameters
from fedsuite.registry import known as registry
from fedsuite.rules.vectors import HOST, OnDevice, host_array, map_vectors
from fedsuite.server import placement
from fedsuite.server.observers import RoundObserver, watches_vectors
from tests.test_batched_clients import BASE

RELATIVE = 1e-12
SETTINGS = {**BASE, "batch-clients": True, "num-server-rounds": 3}
# the rule stays on the host, and why (the log line's reason; None: its replies come to the host, so it is never asked)
HOST_RULE = {
    "fedpaq": None,  # its QSGD compression stage encodes the uploads
    "mimesvrg": "the rule asks the clients a query before training",
}
ROUNDED = {"fedsmoo", "fedgamma", "fedexp", "fedadam", "fedyogi", "fedadagrad"}  # norms, dot products, square roots


class Downlinks(RoundObserver):
    """The kind of every fit instruction's parameters, round by round (it watches no vector)."""

    watches_vectors = False

    def __init__(self):
        self.placed: list[bool] = []

    def aggregated(self, server_round, strategy, x_before, replies):
        self.placed.append(strategy.placement.on_device)


def _run(name: str, monkeypatch, on_device: bool, settings: dict = SETTINGS):
    monkeypatch.setattr(device_replies, "ON_CPU", on_device)
    monkeypatch.setattr(placement, "ON_CPU", on_device)
    seen = Downlinks()
    return kit.run_algorithm(name, settings, observers=[seen]), seen


def _refuse_numpy(tensor, *args, **kwargs):
    raise TypeError("NumPy read a tensor: on a CUDA card this call fails")


def _tensors_only(monkeypatch) -> None:
    """NumPy may not read a tensor, as on a CUDA card (on the CPU it silently would): a NumPy call left on a placed
    rule's vectors fails the run here too."""
    monkeypatch.setattr(torch.Tensor, "__array__", _refuse_numpy)


def _vectors(rule) -> list:
    """x and every declared d-vector the rule holds (tables' and histories' entries one by one)."""
    found = [rule.x]
    map_vectors([getattr(rule, spec.name) for spec in rule.state_specs()], found.append)
    return found


def _close(a, b) -> bool:
    """Equal within 1e-6 of each vector's largest entry (tables and histories entry by entry)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, (deque, list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        scale = max(float(np.max(np.abs(a), initial=0.0)), 1e-300)
        return a.shape == b.shape and a.dtype == b.dtype and float(np.max(np.abs(a - b), initial=0.0)) <= 1e-6 * scale
    return a == b or (isinstance(a, float) and np.isnan(a) and np.isnan(b))


@pytest.mark.parametrize("name", tuple(registry.ALGORITHMS))
def test_every_algorithm_gives_the_same_models_with_its_rule_on_the_device(name, monkeypatch, caplog):
    host, host_seen = _run(name, monkeypatch, on_device=False)
    _tensors_only(monkeypatch)
    with caplog.at_level("INFO", logger="flwr.fedsuite"):
        device, device_seen = _run(name, monkeypatch, on_device=True)
    assert host_seen.placed and not any(host_seen.placed)
    if name in HOST_RULE:
        assert not any(device_seen.placed)
        if HOST_RULE[name] is not None:
            assert f"the server rule's vectors stay on the host: {HOST_RULE[name]}" in caplog.text
        return
    assert device_seen.placed == [True] * 3  # placed after round 1's replies, before its aggregate
    assert "from round 1 the server rule's vectors stay on cpu" in caplog.text
    assert all(isinstance(v, torch.Tensor) for v in _vectors(device.strategy.rule))
    assert isinstance(device.strategy.x, np.ndarray)
    same = kit.identical if name not in ROUNDED else _close
    for a, b in zip(host.rounds, device.rounds, strict=True):
        assert same(a.x, b.x), f"round {a.round}"
    assert same(host.strategy.state_dict(), device.strategy.state_dict())


def test_a_rule_class_places_only_where_its_own_body_says_it_runs_on_the_device():
    from types import SimpleNamespace

    from strategies.fedavg import FedAvg

    class NumpyFedAvg(FedAvg):  # a plug-in's override of a built-in rule, free to use NumPy on its vectors
        def aggregate(self, server_round, replies):
            return np.add(self.x, self.server_lr * np.asarray(self.displacement(replies)))

    def why(rule_class, stages=(), observers=()):
        strategy = SimpleNamespace(rule=rule_class.__new__(rule_class), stages=list(stages), observers=list(observers))
        return placement.placeable(strategy)

    assert why(FedAvg) is None
    assert why(NumpyFedAvg) == "NumpyFedAvg does not say runs_on_device = True"
    from fedsuite.server.sample_budget import SampleLevelBudget
    from fedsuite.stages.server import ServerStage

    assert why(FedAvg, stages=[ServerStage()]) == "round stage ServerStage handles the round's arrays as host arrays"
    assert why(FedAvg, stages=[SampleLevelBudget(0.0)]) is None  # DP-SGD's budget reads metrics, never an array


@pytest.mark.parametrize("name", ["fedavg", "scaffold"])
def test_a_dp_sgd_run_places_its_rule_and_gives_the_host_rules_models(name, monkeypatch, caplog):
    """DP-SGD's client stage leaves the upload alone and its server stage reads metrics only: the rule goes to the
    device, NumPy never reads its vectors, and every round's model is the host rule's, bit for bit."""
    pytest.importorskip("dp_accounting")
    settings = {**SETTINGS, "dp-sgd": True, "dp-sgd-noise": 1.0, "dp-sgd-clip": 0.3, "dp-noise-source": "seeded",
                "local-steps": 3}  # fmt: skip
    host, _ = _run(name, monkeypatch, on_device=False, settings=settings)
    _tensors_only(monkeypatch)
    with caplog.at_level("INFO", logger="flwr.fedsuite"):
        device, seen = _run(name, monkeypatch, on_device=True, settings=settings)
    assert seen.placed == [True] * 3 and "from round 1 the server rule's vectors stay on cpu" in caplog.text
    for a, b in zip(host.rounds, device.rounds, strict=True):
        assert kit.identical(a.x, b.x), f"round {a.round}"
    assert [r.row.get("dp_sgd_epsilon") for r in host.rounds] == [r.row.get("dp_sgd_epsilon") for r in device.rounds]


def test_an_observer_that_reads_the_vectors_keeps_the_rule_on_the_host(monkeypatch, caplog):
    class Reader(RoundObserver):
        def replied(self, server_round, replies):
            self.delta = np.asarray(replies[0].arrays["delta"])  # NumPy reads host arrays

    seen = Downlinks()
    monkeypatch.setattr(device_replies, "ON_CPU", True)
    monkeypatch.setattr(placement, "ON_CPU", True)
    with caplog.at_level("INFO", logger="flwr.fedsuite"):
        kit.run_algorithm("scaffold", SETTINGS, observers=[Reader(), seen])
    assert not any(seen.placed)
    assert "observer Reader reads the round's vectors as host arrays" in caplog.text
    assert watches_vectors(Reader()) and not watches_vectors(seen) and not watches_vectors(RoundObserver())


def test_the_fit_instructions_carry_tensors_once_the_rule_is_placed(monkeypatch):
    sent: list[type] = []
    from fedsuite.batched import server as batched_server

    train = batched_server.BatchedDispatcher.train

    def recording(self, members):
        sent.append(type(members[0].arrays()[0]))
        return train(self, members)

    monkeypatch.setattr(batched_server.BatchedDispatcher, "train", recording)
    run, seen = _run("scaffold", monkeypatch, on_device=True)
    assert sent == [np.ndarray, torch.Tensor, torch.Tensor]  # round 1 went out before the rule was placed
    assert seen.placed == [True, True, True]


@pytest.mark.parametrize("name", ["feddyn", "fedmim", "fedexp", "fedspeed-ing", "fadamgt"])
def test_a_placed_run_resumes_from_its_checkpoint_as_if_never_stopped(name, monkeypatch, tmp_path):
    """The checkpoint holds host arrays; the resumed run places its rule again and ends where the whole run does."""
    monkeypatch.setattr(device_replies, "ON_CPU", True)
    monkeypatch.setattr(placement, "ON_CPU", True)
    settings = {**SETTINGS, "dual-storage": "server"} if name == "feddyn" else SETTINGS
    kit.check_checkpoint_round_trip(name, tmp_path, settings, stop_after=2, rounds=4)


def test_a_run_with_invariants_keeps_its_rule_on_the_host(monkeypatch, caplog):
    kinds = []

    def c_is_an_array(strategy):
        kinds.append(type(strategy.rule.c))

    with caplog.at_level("INFO", logger="flwr.fedsuite"):
        run, seen = _run_with(monkeypatch, "scaffold", invariants=[c_is_an_array])
    assert kinds == [np.ndarray] * 3 and not any(seen.placed)
    assert "observer KitObserver reads the round's vectors as host arrays" in caplog.text


def _run_with(monkeypatch, name: str, **options):
    monkeypatch.setattr(device_replies, "ON_CPU", True)
    monkeypatch.setattr(placement, "ON_CPU", True)
    seen = Downlinks()
    return kit.run_algorithm(name, SETTINGS, observers=[seen], **options), seen


# ---- the pieces ------------------------------------------------------------------------------------------------
def test_the_device_operations_round_as_numpys():
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(500, generator=generator, dtype=torch.float64)
    on = OnDevice(torch.device("cpu"))
    for op in ("sign", "wide", "narrow", "copy"):
        assert kit.identical(host_array(getattr(on, op)(a)), getattr(HOST, op)(a.numpy())), op
    b = a.abs() + 0.5
    assert _close(host_array(on.sqrt(b)), HOST.sqrt(b.numpy()))  # to one unit in the last place on the CPU
    assert on.zeros(4, "float32").dtype == torch.float32 and HOST.zeros(4).dtype == np.float64
    assert abs(on.dot(a, a) - HOST.dot(a.numpy(), a.numpy())) <= RELATIVE * HOST.dot(a.numpy(), a.numpy())
    assert abs(on.norm(a) - HOST.norm(a.numpy())) <= RELATIVE * HOST.norm(a.numpy())


def test_held_values_never_share_memory_and_keep_their_shape():
    table = {3: np.arange(4.0), 7: np.ones(4)}
    history = deque([np.zeros(4), np.ones(4)], maxlen=2)
    on = OnDevice(torch.device("cpu"))
    moved = on.held({"t": table, "h": history, "n": 5, "none": None})
    assert isinstance(moved["t"][3], torch.Tensor) and moved["h"].maxlen == 2 and moved["n"] == 5
    moved["t"][3].add_(1.0)
    assert table[3][0] == 0.0  # the host array is untouched
    back = HOST.held(moved)
    assert isinstance(back["t"][7], np.ndarray) and kit.identical(back["h"][1], np.ones(4))
    back["t"][3][0] = 99.0
    assert float(moved["t"][3][0]) == 1.0  # and the host copy is its own
    assert map_vectors((1, np.ones(2)), lambda v: v * 2)[1].tolist() == [2.0, 2.0]


def test_a_reply_that_came_to_the_host_is_read_on_the_device():
    from fedsuite.rules.rounds import Reply

    device = placement.DevicePlacement(OnDevice(torch.device("cpu")))
    host = Reply(2, 5, 3, 0.1, {"delta": np.linspace(-1, 1, 6, dtype=np.float32).astype(np.float64)})
    moved = device.reply(host)
    assert isinstance(moved.arrays, DeviceArrays) and moved.arrays.wide_on_device
    assert isinstance(moved.arrays["delta"], torch.Tensor) and moved.arrays["delta"].dtype == torch.float64
    assert kit.identical(host_array(moved.arrays["delta"]), host.arrays["delta"])
    kept = Reply(1, 5, 3, 0.1, DeviceArrays({"delta": torch.ones(6)}))
    assert device.reply(kept) is kept and kept.arrays.wide_on_device


def test_the_device_placement_packs_float32_tensors_of_their_own():
    device = placement.DevicePlacement(OnDevice(torch.device("cpu")))
    c = torch.arange(4, dtype=torch.float64)
    arrays, names = device.pack(
        {"model": torch.ones(4), "c": c, "h": np.full(4, 2.0), "bytes": np.arange(3, dtype=np.uint8)}
    )
    assert names == "model,c,h,bytes" and all(a.dtype == torch.float32 and a.shape == (4,) for a in arrays[:3])
    assert arrays[3].dtype == torch.uint8  # bytes travel as they are, as the host path's pack keeps them
    arrays[1].add_(1.0)
    assert float(c[0]) == 0.0  # the message's own copy
    params = device.parameters(arrays)
    assert (
        isinstance(params, DeviceParameters)
        and params.tensors == []
        and all(a is b for a, b in zip(params.arrays, arrays, strict=True))
    )


def test_a_replys_float64_copy_on_the_device_is_made_at_each_read_and_never_kept():
    arrays = DeviceArrays({"delta": torch.linspace(-1, 1, 5)}, wide_on_device=True)
    first, second = arrays["delta"], arrays["delta"]
    assert first is not second and first.dtype == torch.float64 and torch.equal(first, second)
    assert arrays._wide == {}  # nothing widened stays on the card


def test_a_host_reply_moves_to_the_device_as_the_float32_it_travelled_as():
    from fedsuite.rules.rounds import Reply

    device = placement.DevicePlacement(OnDevice(torch.device("cpu")))
    wide = np.linspace(-1, 1, 6, dtype=np.float32).astype(np.float64)
    moved = device.reply(Reply(2, 5, 3, 0.1, {"delta": wide}))
    assert moved.arrays.tensor("delta").dtype == torch.float32
    assert kit.identical(host_array(moved.arrays["delta"]), wide)


def test_no_reply_gives_a_zero_mean_on_either_placement():
    from types import SimpleNamespace

    from fedsuite.rules.server_rule import ServerRule

    settings = SimpleNamespace(expected_cohort=None, weighting="uniform")
    for vectors in (HOST, OnDevice(torch.device("cpu"))):
        rule = SimpleNamespace(dim=3, settings=settings, vectors=vectors)
        rule.cohort_weights = lambda rs, rule=rule: ServerRule.cohort_weights(rule, rs)
        assert kit.identical(host_array(ServerRule.cohort_mean(rule, [], lambda r: r)), np.zeros(3))


def test_the_rules_state_is_counted_at_its_largest_against_the_cards_free_memory():
    from types import SimpleNamespace

    from fedsuite.rules.declared import History, Table, Vector

    rule = SimpleNamespace(dim=1000, num_clients=50)
    rule.state_specs = lambda: (Vector("h_sum"), Table("h_table"), History("history", length=2), Vector("p", "float32"))
    assert placement.state_bytes(rule) == 1000 * (4 + 8 + 50 * 8 + 2 * 8 + 4)
    assert placement.too_large(rule, torch.device("cpu")) is None  # only a card's memory is counted


def test_the_rule_goes_to_a_card_only_while_a_fifth_of_it_stays_free_after_its_state(monkeypatch):
    from types import SimpleNamespace

    from fedsuite.rules.declared import Table, Vector

    rule = SimpleNamespace(dim=1000, num_clients=10)
    rule.state_specs = lambda: (Vector("h_sum"), Table("h_table"))
    need = placement.state_bytes(rule)  # 4 000 + 8 000 + 80 000 bytes
    card = torch.device("cuda")  # the device's memory is what is read: no card is needed to name one
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (need + 200_000, 1_000_000))
    assert placement.too_large(rule, card) is None  # 200 000 bytes, a fifth, stay free
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (need + 199_999, 1_000_000))
    assert "would leave less than 20% of the card free" in placement.too_large(rule, card)
