"""dataset='imagefolder': data-dir/train/<class>/<image> and data-dir/test/<class>/<image> (torchvision's
ImageFolder layout), decoded once into uint8 tensors resized to `image-size` and cached beside the images
(`fedsuite-imagefolder-<size>-<fingerprint>.npz`, the fingerprint covering every file's path, size and mtime, so a
changed folder is decoded again). Classes are the sorted folder names of train/; normalisation uses the training
split's per-channel mean and std. An image that cannot be decoded is named (replace or remove it), and so is a
symbolic link whose target does not exist: an image left out silently would change the results.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from fedsuite.data.datasets import DatasetCorrupt, DatasetNotFound, Images, Split

EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")


def _dangling(link: Path) -> DatasetNotFound:
    return DatasetNotFound(f"dataset='imagefolder': {link} is a symbolic link to {os.readlink(link)}, which does not "
                           "exist; restore its target or remove the link (an image left out silently would change "
                           "the results)")  # fmt: skip


def _files(folder: Path, classes: list[str]) -> list[tuple[Path, int]]:
    """Every image below each class folder, with its label; a dangling symbolic link is an error naming it."""
    found = []
    for label, name in enumerate(classes):
        for p in sorted((folder / name).rglob("*")):
            if p.is_symlink() and not p.exists():
                raise _dangling(p)
            if p.is_file() and p.suffix.lower() in EXTENSIONS:
                found.append((p, label))
    return found


def _class_folders(split: Path) -> list[Path]:
    """The class folders of train/ or test/; a dangling symbolic link among them is an error naming it."""
    for p in sorted(split.iterdir()):
        if p.is_symlink() and not p.exists():
            raise _dangling(p)
    return [p for p in split.iterdir() if p.is_dir()]


def _unreadable(path: Path, err: BaseException) -> DatasetCorrupt:
    return DatasetCorrupt(f"dataset='imagefolder': {path} cannot be decoded as an image ({type(err).__name__}: "
                          f"{err}); replace it with a readable image or remove it")  # fmt: skip


def _fingerprint(files: list[tuple[Path, int]], root: Path, size: int) -> str:
    h = hashlib.sha1(str(size).encode())
    for path, label in files:
        st = path.stat()
        h.update(f"{path.relative_to(root)}|{label}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _decode(files: list[tuple[Path, int]], size: int) -> tuple[np.ndarray, np.ndarray]:
    from PIL import Image

    images = np.empty((len(files), 3, size, size), np.uint8)
    for i, (path, _) in enumerate(files):
        try:
            with Image.open(path) as img:
                rgb = img.convert("RGB").resize((size, size), Image.BILINEAR)
        except Exception as err:  # PIL raises UnidentifiedImageError, OSError, SyntaxError …
            raise _unreadable(path, err) from err
        images[i] = np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1)
    return images, np.array([label for _, label in files], np.int64)


def load_imagefolder(data_dir: str, size: int) -> Images:
    root = Path(data_dir).expanduser() if data_dir else Path.cwd()
    train_dir, test_dir = root / "train", root / "test"
    if not train_dir.is_dir() or not test_dir.is_dir():
        raise DatasetNotFound(f"dataset='imagefolder': {root} needs train/<class>/ and test/<class>/ folders; "
                              "set data-dir to it")  # fmt: skip
    classes = sorted(p.name for p in _class_folders(train_dir))
    unknown = sorted(p.name for p in _class_folders(test_dir) if p.name not in classes)
    if not classes or unknown:
        why = f"test/ has classes missing from train/: {unknown[:5]}" if unknown else "train/ has no class folder"
        raise DatasetNotFound(f"dataset='imagefolder': {root}: {why}")
    train, test = _files(train_dir, classes), _files(test_dir, classes)
    untested = sorted(set(classes) - {classes[label] for _, label in test})
    if untested and test:
        logging.getLogger("flwr.fedsuite").warning(
            "dataset='imagefolder': %s has no image of %d class(es) of train/ (%s): test accuracy leaves them out",
            test_dir, len(untested), ", ".join(untested[:5]) + (" …" if len(untested) > 5 else ""),
        )  # fmt: skip
    if not train or not test:
        raise DatasetNotFound(f"dataset='imagefolder': {train_dir if not train else test_dir} holds no image")
    cache = root / f"fedsuite-imagefolder-{size}-{_fingerprint(train + test, root, size)}.npz"
    if cache.is_file():
        z = np.load(cache)
        arrays = [z[k] for k in ("xs", "ys", "xt", "yt")]
    else:
        arrays = [*_decode(train, size), *_decode(test, size)]
        try:  # written beside and renamed: a process reading it never sees half a file
            fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{cache.name}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                np.savez(f, xs=arrays[0], ys=arrays[1], xt=arrays[2], yt=arrays[3])
            os.replace(tmp, cache)
        except OSError:
            pass  # a read-only folder: decoded again next time
    xs, ys, xt, yt = (torch.from_numpy(a) for a in arrays)
    pixels = xs.float().div(255.0)
    mean = tuple(float(m) for m in pixels.mean(dim=(0, 2, 3)))
    std = tuple(max(float(s), 1e-6) for s in pixels.std(dim=(0, 2, 3)))
    return Images("imagefolder", Split(xs, ys), Split(xt, yt), len(classes), mean, std)
