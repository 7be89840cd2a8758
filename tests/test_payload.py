"""fedsuite/codec/payload.py: named arrays <-> Flower's ordered list plus a comma-separated name string."""

import numpy as np
import pytest

from fedsuite.codec.payload import PayloadError, nbytes, pack, unpack


def _named():
    return {
        "model": np.arange(12, dtype=np.float64).reshape(3, 4) / 4.0,
        "control": np.array([[1.5], [-2.25]], dtype=np.float32),
        "scalar": np.float64(7.0),
        "counts": np.array([1, 2, 3], dtype=np.int64),
    }


def test_pack_flattens_to_contiguous_float32_in_order():
    named = _named()
    arrays, names = pack(named)
    assert names == "model,control,scalar,counts"
    assert [a.shape for a in arrays] == [(12,), (2,), (1,), (3,)]
    for a, src in zip(arrays, named.values(), strict=True):
        assert a.dtype == np.float32
        assert a.flags.c_contiguous
        np.testing.assert_array_equal(a, np.asarray(src, dtype=np.float32).reshape(-1))


def test_pack_flattens_non_contiguous_input_in_logical_order():
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    (flat,), _ = pack({"t": base.T})  # Fortran-ordered view
    np.testing.assert_array_equal(flat, [0, 3, 1, 4, 2, 5])


def test_round_trip_by_name_preserves_order_and_values():
    named = _named()
    back = unpack(*pack(named))
    assert list(back) == list(named)
    for name, src in named.items():
        assert back[name].dtype == np.float32
        np.testing.assert_array_equal(back[name], np.asarray(src, dtype=np.float32).reshape(-1))


def test_round_trip_with_reversed_insertion_order():
    named = dict(reversed(list(_named().items())))
    arrays, names = pack(named)
    assert names == "counts,scalar,control,model"
    back = unpack(arrays, names)
    assert list(back) == ["counts", "scalar", "control", "model"]
    np.testing.assert_array_equal(back["counts"], [1, 2, 3])


def test_unpack_strips_by_name_not_position():
    arrays = [np.zeros(2, np.float32), np.ones(3, np.float32)]
    back = unpack(arrays, "delta,extra")
    assert back["delta"].shape == (2,) and back["extra"].shape == (3,)
    assert back["extra"] is arrays[1]


def test_empty_round_trip():
    arrays, names = pack({})
    assert arrays == [] and names == ""
    assert unpack(arrays, names) == {}


@pytest.mark.parametrize(
    "arrays, names",
    [
        ([np.zeros(1), np.zeros(1)], "model"),
        ([np.zeros(1)], "model,delta"),
        ([], "model"),
        ([np.zeros(1)], ""),
    ],
)
def test_unpack_wrong_count_raises(arrays, names):
    with pytest.raises(PayloadError, match=f"{len(arrays)} arrays"):
        unpack(arrays, names)


def test_unpack_duplicate_names_raises():
    with pytest.raises(PayloadError, match="duplicate") as exc:
        unpack([np.zeros(1), np.zeros(1)], "model,model")
    assert "model,model" in str(exc.value)


def test_payload_error_is_a_value_error():
    assert issubclass(PayloadError, ValueError)
    with pytest.raises(ValueError):
        unpack([np.zeros(1)], "a,b")


@pytest.mark.parametrize("bad", ["a,b", ",", "", "model,"])
def test_pack_rejects_empty_names_and_commas(bad):
    with pytest.raises(PayloadError, match="array name"):
        pack({"ok": np.zeros(1), bad: np.zeros(1)})


def test_nbytes_counts_every_array():
    arrays, _ = pack(_named())
    assert nbytes(arrays) == 4 * (12 + 2 + 1 + 3)
    assert isinstance(nbytes(arrays), int)
    assert nbytes([np.zeros(5, np.float64), np.zeros((2, 3), np.int8)]) == 40 + 6
    assert nbytes([]) == 0
