"""The compressor library (fedsuite/compression/): bit packing, each compressor's maths against its stated
properties (unbiasedness and ω measured over many draws, top-k's choice, the sign's reconstruction, exact round
trips), the byte-size formulas, the one-line refusals, determinism, and error feedback on a least-squares federation
(EF21 reaches x* where top-k without feedback does not)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsuite.compression import (
    QSGD,
    CompressionSettings,
    Encoded,
    Identity,
    RandK,
    ScaledSign,
    TopK,
    bits,
    build_compressor,
    ef21_server_step,
    ef21_state,
    ef21_step,
    ef_state,
    ef_step,
    qsgd,
    topk,
)
from fedsuite.compression.bits import MAX_WIDTH, from_bytes, pack_bits, packed_size, to_bytes, unpack_bits

DRAWS = 2000  # draws per statistical check
SIGMAS = 5  # a statistical check allows 5 standard errors of the estimate


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def vector(d: int, seed: int = 1, dtype=torch.float32) -> torch.Tensor:
    """Entries of mixed scales and signs, a few exact zeros."""
    g = gen(seed)
    x = torch.randn(d, generator=g, dtype=torch.float64) * torch.exp(torch.randn(d, generator=g, dtype=torch.float64))
    x[:: max(1, d // 5)] = 0.0
    return x.to(dtype)


def draws(compressor, x: torch.Tensor, n: int = DRAWS) -> torch.Tensor:
    g = gen(7)
    return torch.stack([compressor.apply(x, g) for _ in range(n)])


def test_the_library_imports_neither_flower_nor_the_rest_of_fedsuite():
    package = Path(__file__).resolve().parent.parent / "fedsuite" / "compression"
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert name.split(".")[0] not in ("flwr", "simulation", "strategies", "clients"), (path, name)
                assert not name.startswith("fedsuite") or name.startswith("fedsuite.compression"), (path, name)


# --- bit packing -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [1, 2, 3, 5, 8, 9, 13, 24, 31, 56])
@pytest.mark.parametrize("count", [1, 7, 8, 9, 101])
def test_pack_bits_round_trips_in_the_stated_little_endian_layout(width, count):
    hi = 2**width if width < 56 else 2**55
    values = torch.randint(0, hi, (count,), generator=gen(width * 1000 + count))
    packed = pack_bits(values, width)
    assert packed.dtype == torch.uint8 and packed.numel() == packed_size(count, width) == math.ceil(count * width / 8)
    assert torch.equal(unpack_bits(from_bytes(to_bytes(packed)), count, width), values)
    stream = np.array([(int(v) >> j) & 1 for v in values for j in range(width)], dtype=np.uint8)
    assert to_bytes(packed) == np.packbits(stream, bitorder="little").tobytes()


@pytest.mark.parametrize("width", [0, 57])
def test_pack_bits_refuses_widths_it_cannot_hold(width):
    with pytest.raises(ValueError, match="bit width"):
        pack_bits(torch.zeros(3, dtype=torch.int64), width)


def reference_pack(values: list[int], width: int) -> bytes:
    """The stream of bits.py's docstring, bit by bit: value i's bit j is stream bit i·w + j, stream bit p is bit
    p mod 8 of byte p // 8."""
    out = bytearray(packed_size(len(values), width))
    for i, value in enumerate(values):
        for j in range(width):
            p = i * width + j
            out[p // 8] |= ((value >> j) & 1) << (p % 8)
    return bytes(out)


def random_codes(count: int, width: int, seed: int) -> torch.Tensor:
    """`count` random values below 2^width (int64), the extremes 0 and 2^width − 1 included when there is room."""
    values = torch.from_numpy(np.random.default_rng(seed).integers(0, 2**width, count, dtype=np.int64))
    values[: min(2, count)] = torch.tensor([0, 2**width - 1])[: min(2, count)]
    return values


@pytest.mark.parametrize("width", range(1, MAX_WIDTH + 1))
def test_every_packing_path_writes_the_reference_bytes_and_reads_them_back(width, monkeypatch):
    """The CPU path (numpy; blocks of 3 groups here so block edges are crossed), the device path (torch column
    operations, run on the CPU) and the reference agree byte for byte on counts that are and are not multiples of 8,
    from int64, int32, uint8 and bool values; unpacking either way returns the values."""
    monkeypatch.setattr(bits, "BLOCK", 3)
    for count in (1, 3, 8, 13, 24, 61, 64, 203):
        values = random_codes(count, width, seed=width * 1000 + count)
        expected = reference_pack(values.tolist(), width)
        typed = [values] + [values.to(t) for t, bound in ((torch.int32, 31), (torch.uint8, 8)) if width <= bound]
        typed += [values.bool()] if width == 1 else []
        for given in typed:
            assert to_bytes(pack_bits(given, width)) == expected, (count, given.dtype)
            assert to_bytes(bits._pack_device(given, width)) == expected, (count, given.dtype)
        packed = from_bytes(expected)
        assert torch.equal(unpack_bits(packed, count, width), values), count
        assert torch.equal(bits._unpack_device(packed, count, width).long(), values), count
        if width <= 31:
            assert torch.equal(unpack_bits(packed, count, width, torch.int32), values.int()), count
        if width <= 8:
            assert torch.equal(unpack_bits(packed, count, width, torch.uint8), values.to(torch.uint8)), count


@pytest.mark.parametrize("width", [1, 4, 5, 8, 13, 24])
def test_packing_a_long_vector_matches_a_bit_matrix_reference(width):
    """Many blocks at the default block size: numpy's bit matrix of the values (one row per value, bit j in column
    j), packed little-endian, is the stream."""
    count = 8 * bits.BLOCK * 2 + 5
    values = random_codes(count, width, seed=width)
    matrix = (values.numpy()[:, None] >> np.arange(width)) & 1
    expected = np.packbits(matrix.reshape(-1).astype(np.uint8), bitorder="little").tobytes()
    packed = pack_bits(values, width)
    assert to_bytes(packed) == expected
    assert torch.equal(unpack_bits(packed, count, width), values)


# --- unbiasedness and ω ------------------------------------------------------------------------------------------


def qsgd_variances(x: torch.Tensor, s: int) -> torch.Tensor:
    """Var C(x)_i = (‖x‖/s)² p_i (1 − p_i), p_i the fractional part of s|x_i|/‖x‖."""
    norm = x.norm()
    ratio = x.abs() * s / norm
    p = ratio - ratio.floor()
    return (norm / s) ** 2 * p * (1 - p)


UNBIASED = [
    (RandK(5), lambda x: x**2 * (x.numel() / 5 - 1)),
    (RandK(30), lambda x: x**2 * (x.numel() / 30 - 1)),
    (QSGD(1), lambda x: qsgd_variances(x, 1)),
    (QSGD(4), lambda x: qsgd_variances(x, 4)),
]


@pytest.mark.parametrize("compressor, variances", UNBIASED, ids=lambda c: repr(c) if not callable(c) else "")
def test_an_unbiased_compressor_averages_to_its_input(compressor, variances):
    """Each coordinate's mean over DRAWS lies within 5 standard errors, sqrt(Var_i / DRAWS), of x_i (float64 maths,
    so a coordinate without variance must come out exact up to rounding)."""
    x = vector(40, dtype=torch.float64)
    assert compressor.unbiased
    mean = draws(compressor, x).mean(0)
    allowed = SIGMAS * torch.sqrt(variances(x) / DRAWS) + 1e-12 * x.abs().max()
    assert torch.all((mean - x).abs() <= allowed), ((mean - x).abs() / allowed).max()


@pytest.mark.parametrize(
    "compressor",
    [RandK(5), RandK(30), RandK(5, scaled=False), QSGD(1), QSGD(4), QSGD(255), TopK(5), ScaledSign(), Identity()],
    ids=repr,
)
def test_the_measured_error_is_within_omega(compressor):
    """mean ‖C(x) − x‖² over DRAWS ≤ ω‖x‖² + 5 standard errors of that mean."""
    x = vector(40, dtype=torch.float64)
    errors = ((draws(compressor, x, 500) - x) ** 2).sum(1)
    standard_error = errors.std() / math.sqrt(errors.numel())
    assert errors.mean() <= compressor.omega(40) * x.square().sum() + SIGMAS * standard_error + 1e-12


@pytest.mark.parametrize("k, scaled", [(5, True), (30, True), (5, False), (30, False)])
def test_random_k_error_equals_its_omega(k, scaled):
    """Scaled: E‖C(x) − x‖² = (d/k − 1)‖x‖²; unscaled: (1 − k/d)‖x‖²; both within 5 standard errors."""
    compressor, d = RandK(k, scaled=scaled), 40
    x = vector(d, dtype=torch.float64)
    errors = ((draws(compressor, x) - x) ** 2).sum(1)
    expected = (d / k - 1 if scaled else 1 - k / d) * x.square().sum()
    assert compressor.omega(d) == pytest.approx(d / k - 1 if scaled else 1 - k / d)
    assert (errors.mean() - expected).abs() <= SIGMAS * errors.std() / math.sqrt(DRAWS)


@pytest.mark.parametrize("s", [1, 4])
def test_qsgd_error_equals_the_sum_of_its_variances(s):
    x = vector(40, dtype=torch.float64)
    errors = ((draws(QSGD(s), x) - x) ** 2).sum(1)
    assert (errors.mean() - qsgd_variances(x, s).sum()).abs() <= SIGMAS * errors.std() / math.sqrt(DRAWS)
    assert QSGD(s).omega(40) == min(40 / s**2, math.sqrt(40) / s)


# --- top-k, sign, exact round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 4, 9, 10, 17, 30])
def test_top_k_keeps_exactly_the_k_largest_and_breaks_ties_to_the_lowest_index(k):
    g = gen(3)
    x = torch.randint(1, 4, (30,), generator=g).float() * torch.where(torch.rand(30, generator=g) < 0.5, -1.0, 1.0)
    order = np.lexsort((np.arange(30), -x.abs().numpy()))  # by |x| descending, then by index
    expected = torch.zeros(30)
    expected[order[:k]] = x[order[:k]]
    compressor = TopK(k)
    assert torch.equal(compressor.apply(x), expected)
    assert torch.equal(compressor.decompress(compressor.compress(x), 30), expected)
    assert int((compressor.apply(x) != 0).sum()) == k


def lexsort_top(magnitudes: np.ndarray, k: int) -> np.ndarray:
    """The k largest entries, ties to the lowest index, by a full sort: by magnitude descending, then by index."""
    return np.sort(np.lexsort((np.arange(magnitudes.size), -magnitudes))[:k])


def hard_vectors(d: int, seed: int) -> dict[str, np.ndarray]:
    """Magnitudes that test a selection: continuous, few distinct values (many ties), all equal, mostly zero, and
    large values only where a stride of d // 8 looks (so a sample at that stride overestimates the threshold)."""
    rng = np.random.default_rng(seed)
    strided = np.zeros(d, np.float32)
    strided[:: max(1, d // 8)] = 1.0
    return {
        "continuous": np.abs(rng.standard_normal(d)).astype(np.float32),
        "ties": rng.integers(0, 4, d).astype(np.float32),
        "equal": np.full(d, 0.5, np.float32),
        "sparse": (rng.random(d) < 0.05).astype(np.float32) * rng.integers(1, 3, d).astype(np.float32),
        "strided": strided,
        "float64": np.abs(rng.standard_normal(d)),
    }


@pytest.mark.parametrize("d", [1, 2, 3, 9, 64, 1000, 5003])
def test_the_sampled_top_k_picks_what_the_full_selection_picks(d):
    """`sampled_top_indices` (with small samples) returns the full selection's indices, or None (then top_indices
    falls back to the full selection) — for k = 1, k = d, k < d at several shares, on ties, equal and strided values."""
    answered = 0
    for name, magnitudes in hard_vectors(d, seed=d).items():
        for k in sorted({min(k, d) for k in (1, 2, 3, d // 100, d // 16, d // 3, d - 1, d)} - {0}):
            expected = lexsort_top(magnitudes, k)
            full = topk.full_top_indices(torch.from_numpy(magnitudes), k)
            assert np.array_equal(full.numpy(), expected), (name, k)
            for sample in (1, 4, 64):
                found = topk.sampled_top_indices(magnitudes, k, sample)
                assert found is None or np.array_equal(found, expected), (name, k, sample)
                answered += found is not None
    assert answered > 0  # the sampled path itself was checked, not only its fallback


@pytest.mark.parametrize("name", ["continuous", "ties", "equal", "sparse", "float64"])
def test_the_sampled_top_k_answers_where_its_sample_represents_the_vector(name):
    """With a sample of 256 from 20011 entries and k ≤ d/16 the threshold lets at least k entries through, so the
    sampled path itself answers (ties at the k-th value broken among its candidates), with the k largest."""
    magnitudes = hard_vectors(20011, seed=4)[name]
    for k in (1, 7, 200, 1250):
        found = topk.sampled_top_indices(magnitudes, k, 256)
        assert found is not None and np.array_equal(found, lexsort_top(magnitudes, k)), k


def test_a_threshold_the_sample_misplaces_falls_back_to_the_full_selection(monkeypatch):
    """The stride sees only the 8 large values, so its threshold lets 8 entries through where k = 100: the sampled
    path says so (None) and top_indices still returns the k largest."""
    monkeypatch.setattr(topk, "SAMPLED_FROM", 16)
    monkeypatch.setattr(topk, "SAMPLE", 8)
    magnitudes = hard_vectors(4096, seed=1)["strided"]
    assert topk.sampled_top_indices(magnitudes, 100, 8) is None
    chosen = topk.top_indices(torch.from_numpy(magnitudes), 100)
    assert np.array_equal(chosen.numpy(), lexsort_top(magnitudes, 100))


def test_top_k_of_a_large_vector_takes_the_sampled_path_and_the_same_coordinates(monkeypatch):
    """Above SAMPLED_FROM entries the CPU samples (checked by counting calls), and TopK's bytes and reconstruction
    equal those of the full selection."""
    d, k = topk.SAMPLED_FROM + 7, topk.SAMPLED_FROM // 100
    x = vector(d, seed=5)
    x[: d // 2 : 3] = 1.0  # many ties below the threshold
    calls = []
    sampled = topk.sampled_top_indices
    monkeypatch.setattr(topk, "sampled_top_indices", lambda *a: calls.append(1) or sampled(*a))
    encoded = TopK(k).compress(x)
    assert calls and np.array_equal(topk.top_indices(x.abs(), k).numpy(), lexsort_top(x.abs().numpy(), k))
    monkeypatch.setattr(topk, "SAMPLED_FROM", d + 1)
    assert TopK(k).compress(x) == encoded
    assert torch.equal(TopK(k).decompress(encoded, d), TopK(k).apply(x))


@pytest.mark.parametrize("s", [1, 7, 15, 127, 255, 65535])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_qsgd_codes_and_values_are_the_same_on_the_cpu_path_and_the_device_path(s, dtype, monkeypatch):
    """The CPU's numpy quantization (blocks of 7 here) gives the codes of the torch path other devices take, from
    the same draws; the table lookup gives the values of the elementwise formula; a zero vector is all level 0."""
    monkeypatch.setattr(qsgd, "BLOCK", 7)
    for x in (vector(300, dtype=dtype), torch.zeros(20, dtype=dtype), vector(5, dtype=dtype) * 1e-30):
        parts = qsgd.quantize(x, s, gen(3))
        draws = torch.rand(x.numel(), generator=gen(3), dtype=dtype)
        scale = (s / parts["norm"].clamp_min(torch.finfo(dtype).tiny)).clamp_max(torch.finfo(dtype).max)
        device_codes = qsgd._device_codes(x, draws, scale, s)
        assert parts["codes"].dtype == device_codes.dtype == qsgd.code_dtype(s)
        assert torch.equal(parts["codes"], device_codes)
        levels = parts["codes"].long() >> 1
        assert int(levels.max()) <= s and torch.equal(parts["codes"].long() & 1, (x < 0).long())
        elementwise = qsgd._values(parts["codes"], parts["norm"] / s)
        assert torch.equal(qsgd.dequantize(parts, s), elementwise)
        assert torch.equal(elementwise.abs(), levels.to(dtype) * (parts["norm"] / s))
        if not x.any():
            assert not levels.any()


def test_qsgd_refuses_a_level_above_s():
    """s = 10 codes in 5 bits, which can carry levels up to 15: a payload with a level 11 is refused."""
    data = np.float32(1.0).tobytes() + to_bytes(pack_bits(torch.tensor([2 * 11, 3, 0]), 5))
    with pytest.raises(ValueError, match="qsgd: a level 11 above s = 10"):
        QSGD(10).decompress(Encoded(data), 3)


def test_the_cpu_reconstructions_equal_their_torch_formulas():
    """The sign's ±s, top-k's scatter and the identity's copy on the CPU (numpy memory) equal the torch
    expressions, and none of them shares memory with the input."""
    x = vector(100)
    scale = x.abs().sum() / 100
    assert torch.equal(ScaledSign().apply(x), torch.where(x < 0, -scale, scale))
    indices = torch.tensor([3, 50, 99])
    dense = torch.zeros(100)
    dense[indices] = x[indices]
    assert torch.equal(topk.scatter(indices, x[indices], 100), dense)
    copy = Identity().apply(x)
    assert torch.equal(copy, x) and copy.data_ptr() != x.data_ptr()


def test_top_k_error_is_the_mass_it_drops():
    x = vector(100)
    kept = TopK(10).apply(x)
    dropped = x.abs().sort(descending=True).values[10:]
    assert torch.isclose((kept - x).square().sum(), dropped.square().sum())


def test_scaled_sign_reconstructs_the_mean_magnitude_with_each_sign():
    x = vector(21)
    compressor = ScaledSign()
    encoded = compressor.compress(x)
    scale = x.abs().sum() / 21
    expected = torch.where(x < 0, -scale, scale)  # sign(0) = +1
    assert torch.equal(compressor.decompress(encoded, 21), expected)
    assert encoded.data[:4] == np.float32(scale.item()).astype("<f4").tobytes()
    assert encoded.data[4:] == np.packbits((x < 0).numpy(), bitorder="little").tobytes()
    assert ((expected - x) ** 2).sum().item() == pytest.approx((x.square().sum() - x.abs().sum() ** 2 / 21).item())


ALL = [Identity(), TopK(1), TopK(7), TopK(64), RandK(7), RandK(7, scaled=False), QSGD(1), QSGD(15), ScaledSign()]


@pytest.mark.parametrize("compressor", ALL, ids=repr)
def test_decompress_of_compress_is_apply_bit_for_bit(compressor):
    x = vector(64)
    encoded = compressor.compress(x, gen(11))
    assert torch.equal(compressor.decompress(encoded, 64), compressor.apply(x, gen(11)))


@pytest.mark.parametrize("compressor", [Identity(), TopK(64), TopK(9), RandK(9, scaled=False)], ids=repr)
def test_a_compressor_is_exact_on_the_coordinates_it_keeps(compressor):
    x = vector(64)
    y = compressor.decompress(compressor.compress(x, gen(5)), 64)
    kept = y != 0
    assert torch.equal(y[kept], x[kept])
    if compressor.omega(64) == 0.0:
        assert torch.equal(y, x)


def test_decompress_refuses_bytes_of_the_wrong_length():
    encoded = TopK(3).compress(vector(10))
    with pytest.raises(ValueError, match="topk: 14 bytes for d=100; the encoding has 15"):
        TopK(3).decompress(encoded, 100)


# --- sizes -------------------------------------------------------------------------------------------------------


def index_bits(d: int) -> int:
    return max(1, math.ceil(math.log2(d))) if d > 1 else 1


@pytest.mark.parametrize("d", [1, 7, 8, 9, 100, 1000, 4097])
def test_encoded_sizes_follow_the_formulas(d):
    x = vector(d)
    ks = sorted({1, min(3, d), d})
    sizes = {Identity(): 4 * d, ScaledSign(): 4 + math.ceil(d / 8)}
    sizes |= {TopK(k): 4 * k + math.ceil(k * index_bits(d) / 8) for k in ks}
    sizes |= {RandK(k): 4 * k for k in ks}
    sizes |= {QSGD(s): 4 + math.ceil(d * (1 + math.ceil(math.log2(s + 1))) / 8) for s in (1, 2, 3, 4, 15, 255, 65535)}
    for compressor, size in sizes.items():
        assert compressor.encoded_bytes(d) == size, compressor
        assert len(compressor.compress(x, gen()).data) == size, compressor


# --- refusals ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, key",
    [
        (lambda: TopK(0), "compress-k=0"),
        (lambda: TopK(-2), "compress-k=-2"),
        (lambda: TopK(2.5), "compress-k=2.5"),
        (lambda: RandK(True), "compress-k=True"),
        (lambda: TopK(11).compress(vector(10)), "compress-k=11"),
        (lambda: RandK(11).encoded_bytes(10), "compress-k=11"),
        (lambda: QSGD(0), "compress-levels=0"),
        (lambda: QSGD(2**16), "compress-levels=65536"),
        (lambda: build_compressor(CompressionSettings(name="topk")), "compress-k=0"),
        (lambda: build_compressor(CompressionSettings(name="zip")), "compress='zip'"),
    ],
)
def test_a_bad_parameter_is_a_one_line_value_error_naming_its_key(make, key):
    with pytest.raises(ValueError) as caught:
        make()
    message = str(caught.value)
    assert message.startswith(key) and "\n" not in message
    assert "≤" in message or "≥" in message or "allowed values are none, topk, randk, qsgd, sign" in message


def test_the_registry_builds_each_compressor_from_its_settings():
    built = {
        name: build_compressor(CompressionSettings(name=name, k=3, levels=7))
        for name in ("none", "topk", "randk", "qsgd", "sign")
    }
    assert [type(c) for c in built.values()] == [Identity, TopK, RandK, QSGD, ScaledSign]
    assert built["topk"].k == built["randk"].k == 3 and built["qsgd"].levels == 7 and built["randk"].unbiased


def test_the_same_generator_seed_gives_the_same_bytes():
    x = vector(300)
    for compressor in (RandK(20), QSGD(3), TopK(20), ScaledSign()):
        first, again = compressor.compress(x, gen(42)), compressor.compress(x, gen(42))
        assert first == again, compressor
    assert RandK(20).compress(x, gen(42)) != RandK(20).compress(x, gen(43))
    assert QSGD(3).compress(x, gen(42)).data != QSGD(3).compress(x, gen(43)).data


# --- error feedback ----------------------------------------------------------------------------------------------


class LeastSquares:
    """n clients with f_i(x) = ‖A_i x − b_i‖² / (2m) whose own minimisers differ (heterogeneous), float64; x* is the
    minimiser of the mean f = (1/n) Σ f_i, the fixed point of uncompressed distributed gradient descent."""

    def __init__(self, clients: int = 5, d: int = 20, rows: int = 40):
        g = gen(0)
        dtype = torch.float64
        self.a = [torch.randn(rows, d, generator=g, dtype=dtype) for _ in range(clients)]
        self.b = [
            a @ (3 * torch.randn(d, generator=g, dtype=dtype) + i) + 0.1 * torch.randn(rows, generator=g, dtype=dtype)
            for i, a in enumerate(self.a)
        ]
        self.clients, self.d, self.rows = clients, d, rows
        hessian = sum(a.T @ a for a in self.a) / (clients * rows)
        gradient_at_zero = sum(a.T @ b for a, b in zip(self.a, self.b, strict=True)) / (clients * rows)
        self.x_star = torch.linalg.solve(hessian, gradient_at_zero)
        self.smoothness = float(torch.linalg.eigvalsh(hessian).max())
        each = [float(torch.linalg.eigvalsh(a.T @ a / rows).max()) for a in self.a]
        self.smoothness_mean = math.sqrt(sum(s * s for s in each) / clients)

    def gradient(self, i: int, x: torch.Tensor) -> torch.Tensor:
        return self.a[i].T @ (self.a[i] @ x - self.b[i]) / self.rows

    def error(self, x: torch.Tensor) -> float:
        return float((x - self.x_star).norm() / self.x_star.norm())

    def ef21_step_size(self, k: int) -> float:
        """EF21's step size for a contractive compressor with δ = k/d (Richtárik et al., 2021, Theorem 1):
        1 / (L + L̃ sqrt(β/θ)), θ = 1 − sqrt(1 − δ), β = (1 − δ)/θ."""
        delta = k / self.d
        theta = 1 - math.sqrt(1 - delta)
        return 1 / (self.smoothness + self.smoothness_mean * math.sqrt((1 - delta) / theta / theta))


def test_ef21_reaches_the_uncompressed_fixed_point_where_top_k_alone_does_not():
    """Distributed gradient descent with every client's full gradient compressed by top-4 of 20: with EF21 the
    iterate reaches x* to 1e-6 relative error within 800 rounds; without feedback it stalls more than 10% away (the
    mean of the clients' top-k gradients vanishes elsewhere than at x*, as the clients differ)."""
    problem, compressor = LeastSquares(), TopK(4)
    step = problem.ef21_step_size(4)
    x = torch.zeros(problem.d, dtype=torch.float64)
    states = [ef21_state(x) for _ in range(problem.clients)]
    estimate = torch.zeros_like(x)
    for _ in range(800):
        x = x - step * estimate
        steps = [ef21_step(compressor, problem.gradient(i, x), states[i]) for i in range(problem.clients)]
        states = [s.state for s in steps]
        estimate = ef21_server_step(estimate, [s.sent for s in steps], problem.clients)
    assert problem.error(x) < 1e-6

    x, errors = torch.zeros_like(x), []
    for _ in range(800):
        x = x - step * torch.stack([compressor.apply(problem.gradient(i, x)) for i in range(problem.clients)]).mean(0)
        errors.append(problem.error(x))
    assert min(errors[400:]) > 0.1


def test_classic_error_feedback_on_one_client_reaches_its_minimiser_and_keeps_what_it_did_not_send():
    """One client (no heterogeneity): e + x = C(e + x) + e' exactly for top-k, and gradient descent with error
    feedback reaches x* to 1e-6 (the error-corrected iterate x − e follows plain gradient descent)."""
    problem, compressor = LeastSquares(clients=1), TopK(4)
    step = 1 / problem.smoothness / 4
    x = torch.zeros(problem.d, dtype=torch.float64)
    state = ef_state(x)
    for _ in range(2000):
        update = step * problem.gradient(0, x)
        result = ef_step(compressor, update, state)
        assert torch.equal(result.state["compression_error"] + result.sent, state["compression_error"] + update)
        state, x = result.state, x - result.sent
    assert problem.error(x) < 1e-6


def test_ef21_server_keeps_the_mean_of_the_client_estimates_under_partial_participation():
    g, clients = gen(9), 6
    x0 = torch.zeros(50)
    states = [ef21_state(x0, start=torch.randn(50, generator=g)) for _ in range(clients)]
    estimate = torch.stack([s["compression_estimate"] for s in states]).mean(0)
    for _ in range(20):
        chosen = torch.randperm(clients, generator=g)[:3].tolist()
        sent = []
        for i in chosen:
            result = ef21_step(QSGD(3), torch.randn(50, generator=g), states[i], g)
            states[i] = result.state
            sent.append(result.sent)
        estimate = ef21_server_step(estimate, sent, clients)
    assert torch.allclose(estimate, torch.stack([s["compression_estimate"] for s in states]).mean(0), atol=1e-5)


@pytest.mark.parametrize("step", [ef_step, ef21_step])
def test_feedback_through_bytes_equals_feedback_through_apply(step):
    x = vector(200)
    start = {"compression_error": vector(200, seed=4), "compression_estimate": vector(200, seed=4)}
    for compressor in (TopK(13), RandK(13), QSGD(7), ScaledSign()):
        plain = step(compressor, x, start, gen(2))
        wired = step(compressor, x, start, gen(2), encode=True)
        assert plain.encoded is None and len(wired.encoded.data) == compressor.encoded_bytes(200)
        assert torch.equal(plain.sent, wired.sent)
        assert all(torch.equal(plain.state[name], wired.state[name]) for name in plain.state)
