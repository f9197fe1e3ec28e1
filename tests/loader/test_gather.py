"""The C copy loop on its own: hand-made documents, rows out of order, and every refused input."""

import numpy as np
import numpy.typing as npt
import pytest

from shipyard.loader._gather import widen_into


def _documents(
    docs: list[npt.NDArray[np.unsignedinteger]],
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    addresses = np.array([d.ctypes.data for d in docs], dtype=np.uint64)
    bounds = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    return addresses, bounds


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_copies_a_stretch_into_the_given_rows(dtype: type) -> None:
    rng = np.random.default_rng(0)
    top = np.iinfo(dtype).max  # the widest ids survive the widening
    docs = [rng.integers(0, top, n, endpoint=True).astype(dtype) for n in (5, 0, 9, 1, 13)]
    docs[2][0] = top
    addresses, bounds = _documents(docs)
    stream = np.concatenate(docs).astype(np.int64)
    out = np.full((5, 4), -1, dtype=np.int64)
    rows = np.array([3, 0, 4], dtype=np.intp)  # stream tokens [6, 18), 4 to a row
    widen_into(addresses, bounds, 6, np.dtype(dtype).itemsize, rows, 4, out)
    np.testing.assert_array_equal(out[rows].reshape(-1), stream[6:18])
    np.testing.assert_array_equal(out[[1, 2]], -1)  # rows not named are left alone


def test_refuses_what_it_cannot_copy_safely() -> None:
    docs = [np.arange(10, dtype=np.uint16), np.arange(6, dtype=np.uint16)]
    addresses, bounds = _documents(docs)
    out = np.zeros((2, 4), dtype=np.int64)
    rows = np.array([0, 1], dtype=np.intp)
    cases = [
        ((addresses, bounds, 9, 2, rows, 4, out), "do not cover"),  # needs tokens up to 17
        ((addresses, bounds[::-1].copy(), 0, 2, rows, 4, out), "do not cover"),
        ((addresses, np.array([0, 12, 8], dtype=np.int64), 0, 2, rows, 4, out), "decrease"),
        ((addresses, bounds, 0, 2, np.array([0, 2], dtype=np.intp), 4, out), "outside"),
        ((addresses, bounds, 0, 3, rows, 4, out), "itemsize"),
        ((addresses, bounds[:2], 0, 2, rows, 4, out), "one bound more"),
        ((addresses, bounds, 0, 2, rows, 0, out), "seq_len"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError, match=message):
            widen_into(*args)
    assert not out.any()
    with pytest.raises(TypeError, match="read-write"):  # strided: refused, not written past
        widen_into(addresses, bounds, 0, 2, rows, 4, np.zeros((2, 8), dtype=np.int64)[:, ::2])
