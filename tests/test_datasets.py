"""fedsuite/data/datasets.py loaders on tiny fake files, the real Fashion-MNIST, and fedsuite/data/synthetic.py."""

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsuite.data import datasets as D
from fedsuite.data.datasets import DatasetNotFound, Images, Split
from fedsuite.data.synthetic import make_federation

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


# --- helpers -----------------------------------------------------------------------------------------------


def idx_bytes(array: np.ndarray) -> bytes:
    array = np.asarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + array.tobytes()


def write_idx(path: Path, array: np.ndarray, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = idx_bytes(array)
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def fake_mnist(folder: Path, n_train=6, n_test=4, gz=False, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    for stem, a in arrays.items():
        write_idx(folder / stem, a, gz=gz)
    return arrays


def write_pickle(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def fake_cifar10(root: Path, per_batch=2, n_test=3):
    rng = np.random.default_rng(1)
    base = root / "cifar-10-batches-py"
    batches = []
    for i in range(1, 6):
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, per_batch)]
        write_pickle(base / f"data_batch_{i}", {b"data": data, b"labels": labels, b"batch_label": b"x"})
        batches.append((data, labels))
    test = rng.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    test_labels = [int(v) for v in rng.integers(0, 10, n_test)]
    write_pickle(base / "test_batch", {b"data": test, b"labels": test_labels})
    return batches, (test, test_labels)


def fake_cifar100(root: Path, n_train=5, n_test=2):
    rng = np.random.default_rng(2)
    base = root / "cifar-100-python"
    out = {}
    for name, n in (("train", n_train), ("test", n_test)):
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        fine = [int(v) for v in rng.integers(20, 100, n)]
        coarse = [int(v) for v in rng.integers(0, 20, n)]
        write_pickle(base / name, {b"data": data, b"fine_labels": fine, b"coarse_labels": coarse})
        out[name] = (data, fine)
    return out


# --- read_idx ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("shape", [(7,), (3, 4, 5), (2, 1), (0,)])
def test_read_idx_plain_and_gz(tmp_path, gz, shape):
    a = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    path = write_idx(tmp_path / "x-idx", a, gz=gz)
    assert path.suffix == (".gz" if gz else "")
    out = D.read_idx(path)
    assert out.dtype == np.uint8
    assert out.shape == shape
    np.testing.assert_array_equal(out, a)


def test_read_idx_large_dims_are_big_endian(tmp_path):
    a = np.arange(300 * 2, dtype=np.uint32).astype(np.uint8).reshape(300, 2)  # 300 needs two bytes
    out = D.read_idx(write_idx(tmp_path / "big", a))
    assert out.shape == (300, 2)
    np.testing.assert_array_equal(out, a)


# --- MNIST / Fashion-MNIST (IDX) -----------------------------------------------------------------------------


def _check_image_split(split: Split, images: np.ndarray, labels: np.ndarray):
    assert split.x.dtype == torch.uint8 and split.y.dtype == torch.int64
    assert tuple(split.x.shape) == (len(images), 1, *images.shape[1:])
    assert len(split) == len(labels)
    np.testing.assert_array_equal(split.x[:, 0].numpy(), images)
    np.testing.assert_array_equal(split.y.numpy(), labels.astype(np.int64))


def test_load_mnist_torchvision_layout(tmp_path):
    arrays = fake_mnist(tmp_path / "MNIST" / "raw")
    ds = D.load_mnist(data_dir=str(tmp_path))
    assert isinstance(ds, Images)
    assert ds.name == "mnist" and ds.num_classes == 10 and ds.crop_pad == 0
    assert ds.input_shape == (1, 28, 28)
    assert len(ds.mean) == len(ds.std) == 1
    _check_image_split(ds.train, arrays["train-images-idx3-ubyte"], arrays["train-labels-idx1-ubyte"])
    _check_image_split(ds.test, arrays["t10k-images-idx3-ubyte"], arrays["t10k-labels-idx1-ubyte"])


def test_load_mnist_flat_gz_layout(tmp_path):
    arrays = fake_mnist(tmp_path, gz=True, n_train=3, n_test=2)
    ds = D.load_mnist(data_dir=str(tmp_path))
    _check_image_split(ds.train, arrays["train-images-idx3-ubyte"], arrays["train-labels-idx1-ubyte"])
    _check_image_split(ds.test, arrays["t10k-images-idx3-ubyte"], arrays["t10k-labels-idx1-ubyte"])


def test_load_fashion_mnist_from_data_dir(tmp_path):
    arrays = fake_mnist(tmp_path / "FashionMNIST" / "raw", n_train=4, n_test=3, seed=5)
    ds = D.load_fashion_mnist(data_dir=str(tmp_path))
    assert ds.name == "fashion-mnist"
    _check_image_split(ds.train, arrays["train-images-idx3-ubyte"], arrays["train-labels-idx1-ubyte"])


def test_loaded_tensors_do_not_wrap_read_only_buffers(tmp_path, monkeypatch):
    fake_mnist(tmp_path)
    assert not D.read_idx(tmp_path / "train-images-idx3-ubyte").flags.writeable
    # writing through a tensor that wraps a read-only numpy buffer is undefined: the loader must copy first
    from_numpy = torch.from_numpy
    wrapped = []

    def checked(array):
        wrapped.append(array)
        assert array.flags.writeable, "torch.from_numpy on a read-only array"
        return from_numpy(array)

    monkeypatch.setattr(torch, "from_numpy", checked)
    ds = D.load_mnist(data_dir=str(tmp_path))
    assert len(wrapped) == 4
    ds.train.x[0, 0, 0, 0] = 1
    ds.train.y[0] = 1


@pytest.mark.parametrize("missing", ["train-labels-idx1-ubyte", "t10k-images-idx3-ubyte"])
def test_load_mnist_missing_file_raises(tmp_path, missing):
    fake_mnist(tmp_path / "MNIST" / "raw")
    (tmp_path / "MNIST" / "raw" / missing).unlink()
    with pytest.raises(DatasetNotFound) as exc:
        D.load_mnist(data_dir=str(tmp_path))
    msg = str(exc.value)
    assert "'mnist'" in msg and "data-dir" in msg and str(tmp_path) in msg
    assert isinstance(exc.value, FileNotFoundError)


def test_load_fashion_mnist_missing_raises(tmp_path):
    with pytest.raises(DatasetNotFound, match="fashion-mnist") as exc:
        D.load_fashion_mnist(data_dir=str(tmp_path / "nowhere"))
    assert "data-dir" in str(exc.value)


# --- CIFAR (python pickles) ----------------------------------------------------------------------------------


def test_load_cifar10(tmp_path):
    batches, (test, test_labels) = fake_cifar10(tmp_path)
    ds = D.load_cifar("cifar10", str(tmp_path))
    assert ds.name == "cifar10" and ds.num_classes == 10 and ds.crop_pad == 4
    assert ds.input_shape == (3, 32, 32)
    assert len(ds.mean) == len(ds.std) == 3
    assert ds.train.x.dtype == torch.uint8 and ds.train.y.dtype == torch.int64
    assert tuple(ds.train.x.shape) == (10, 3, 32, 32) and tuple(ds.test.x.shape) == (3, 3, 32, 32)
    # batches in order 1..5
    np.testing.assert_array_equal(ds.train.y.numpy(), sum((labels for _, labels in batches), []))
    np.testing.assert_array_equal(ds.test.y.numpy(), test_labels)
    # a row is 1024 red, then 1024 green, then 1024 blue values, each row-major 32x32
    row = batches[2][0][1]  # batch 3, second image = training index 5
    x = ds.train.x[5].numpy()
    assert x[0, 0, 0] == row[0] and x[0, 0, 1] == row[1] and x[0, 1, 0] == row[32]
    assert x[1, 0, 0] == row[1024] and x[2, 0, 0] == row[2048] and x[2, 31, 31] == row[3071]
    np.testing.assert_array_equal(ds.test.x.numpy().reshape(3, -1), test)


def test_load_cifar100_uses_fine_labels(tmp_path):
    fake = fake_cifar100(tmp_path)
    ds = D.load_cifar("cifar100", str(tmp_path))
    assert ds.name == "cifar100" and ds.num_classes == 100
    assert tuple(ds.train.x.shape) == (5, 3, 32, 32) and tuple(ds.test.x.shape) == (2, 3, 32, 32)
    assert ds.train.x.dtype == torch.uint8 and ds.test.y.dtype == torch.int64
    np.testing.assert_array_equal(ds.train.y.numpy(), fake["train"][1])
    np.testing.assert_array_equal(ds.test.y.numpy(), fake["test"][1])
    np.testing.assert_array_equal(ds.train.x.numpy().reshape(5, -1), fake["train"][0])


def test_load_cifar10_missing_batch_names_it(tmp_path):
    fake_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DatasetNotFound) as exc:
        D.load_cifar("cifar10", str(tmp_path))
    msg = str(exc.value)
    assert "'cifar10'" in msg and "data_batch_3" in msg and "data-dir" in msg
    assert "data_batch_2" not in msg


def test_load_cifar100_missing_raises(tmp_path):
    with pytest.raises(DatasetNotFound) as exc:
        D.load_cifar("cifar100", str(tmp_path))
    msg = str(exc.value)
    assert "'cifar100'" in msg and "cifar-100-python" in msg and "data-dir" in msg


# --- TinyImageNet (JPEG folder tree) ---------------------------------------------------------------------------

# listed out of alphabetical order on purpose: labels follow wnids.txt, not the folder names
WNIDS = ["n02000002", "n01000001"]
COLOURS = {"n02000002": (250, 10, 10), "n01000001": (10, 10, 250)}


def fake_tinyimagenet(root: Path, per_class=3) -> Path:
    from PIL import Image

    base = root / "tiny-imagenet-200"
    base.mkdir(parents=True)
    (base / "wnids.txt").write_text("\n".join(WNIDS) + "\n")
    for w in WNIDS:
        folder = base / "train" / w / "images"
        folder.mkdir(parents=True)
        for k in range(per_class):
            Image.new("RGB", (64, 64), COLOURS[w]).save(folder / f"{w}_{k}.JPEG", format="JPEG", quality=95)
    val = base / "val" / "images"
    val.mkdir(parents=True)
    rows = []
    for j, w in enumerate(["n01000001", "n02000002", "n01000001"]):
        Image.new("RGB", (64, 64), COLOURS[w]).save(val / f"val_{j}.JPEG", format="JPEG", quality=95)
        rows.append(f"val_{j}.JPEG\t{w}\t0\t0\t64\t64")
    (base / "val" / "val_annotations.txt").write_text("\n".join(rows) + "\n")
    return base


def _check_tiny(ds: Images):
    assert ds.name == "tinyimagenet" and ds.num_classes == 200 and ds.crop_pad == 8
    assert ds.train.x.dtype == torch.uint8 and ds.train.y.dtype == torch.int64
    assert ds.test.x.dtype == torch.uint8 and ds.test.y.dtype == torch.int64
    assert tuple(ds.train.x.shape) == (6, 3, 64, 64) and tuple(ds.test.x.shape) == (3, 3, 64, 64)
    assert ds.input_shape == (3, 64, 64)
    assert sorted(ds.train.y.tolist()) == [0, 0, 0, 1, 1, 1]
    assert ds.test.y.tolist() == [1, 0, 1]  # val_annotations order, labels by wnids.txt position
    for split in (ds.train, ds.test):
        # NCHW: channel 0 is red; class 0 (n02000002) is red, class 1 (n01000001) is blue
        means = split.x.float().mean(dim=(2, 3))
        for colour, label in zip(means, split.y.tolist(), strict=True):
            r, g, b = colour.tolist()
            if label == 0:
                assert r > 240 and b < 25
            else:
                assert b > 240 and r < 25
            assert g < 25


def test_load_tinyimagenet_decodes_and_caches(tmp_path):
    base = fake_tinyimagenet(tmp_path)
    cache = base / "fedsuite-decoded.npz"
    assert not cache.exists()
    ds = D.load_tinyimagenet(str(tmp_path))
    _check_tiny(ds)
    assert cache.is_file()
    with np.load(cache) as z:
        assert set(z.files) == {"xs", "ys", "xt", "yt"}
        np.testing.assert_array_equal(z["xs"], ds.train.x.numpy())
        np.testing.assert_array_equal(z["yt"], ds.test.y.numpy())
    # the cache is reused: with the JPEGs gone, loading (from the folder itself this time) still works
    for jpeg in base.rglob("*.JPEG"):
        jpeg.unlink()
    again = D.load_tinyimagenet(str(base))
    _check_tiny(again)
    assert torch.equal(again.train.x, ds.train.x) and torch.equal(again.test.y, ds.test.y)


def test_load_tinyimagenet_missing_raises(tmp_path):
    with pytest.raises(DatasetNotFound) as exc:
        D.load_tinyimagenet(str(tmp_path))
    msg = str(exc.value)
    assert "'tinyimagenet'" in msg and "wnids.txt" in msg and "data-dir" in msg


def test_load_tinyimagenet_download_is_refused_without_network(tmp_path):
    with pytest.raises(DatasetNotFound, match="tinyimagenet") as exc:
        D.load_tinyimagenet(str(tmp_path), download=True)
    assert "data-dir" in str(exc.value)


# --- Images.features -----------------------------------------------------------------------------------------


def test_features_normalises_per_channel(tmp_path):
    fake_cifar10(tmp_path)
    ds = D.load_cifar("cifar10", str(tmp_path))
    before = ds.train.x.clone()
    feats = ds.features(ds.train)
    assert feats.dtype == torch.float32 and feats.shape == ds.train.x.shape
    for n, c, h, w in [(0, 0, 0, 0), (3, 1, 5, 7), (9, 2, 31, 30), (6, 2, 0, 31)]:
        raw = float(ds.train.x[n, c, h, w])
        want = (raw / 255.0 - ds.mean[c]) / ds.std[c]
        assert float(feats[n, c, h, w]) == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert torch.equal(ds.train.x, before), "features must not modify the stored uint8 images"


def test_features_with_index_subset(tmp_path):
    fake_mnist(tmp_path, n_train=6)
    ds = D.load_mnist(data_dir=str(tmp_path))
    idx = np.array([4, 1])
    feats = ds.features(ds.train, idx)
    assert feats.shape == (2, 1, 28, 28)
    for row, n in enumerate(idx):
        for h, w in [(0, 0), (13, 27)]:
            want = (float(ds.train.x[n, 0, h, w]) / 255.0 - ds.mean[0]) / ds.std[0]
            assert float(feats[row, 0, h, w]) == pytest.approx(want, rel=1e-5, abs=1e-6)


# --- the real Fashion-MNIST ----------------------------------------------------------------------------------


def test_real_fashion_mnist():
    if not FASHION_DIR.is_dir():
        pytest.skip(f"{FASHION_DIR} not present")
    ds = D.load_fashion_mnist()
    assert len(ds.train) == 60000 and len(ds.test) == 10000
    assert tuple(ds.train.x.shape) == (60000, 1, 28, 28) and tuple(ds.test.x.shape) == (10000, 1, 28, 28)
    assert ds.train.x.dtype == torch.uint8 and ds.train.y.dtype == torch.int64
    assert ds.train.y[:10].tolist() == [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]
    assert np.bincount(ds.train.y.numpy()).tolist() == [6000] * 10
    # the dataset's own normalisation constants match its pixels
    x = ds.train.x.float() / 255.0
    assert float(x.mean()) == pytest.approx(ds.mean[0], abs=1e-3)
    assert float(x.std()) == pytest.approx(ds.std[0], abs=1e-3)


# --- synthetic federations -------------------------------------------------------------------------------------


def _lsq_grad(fed, x):
    a, b = fed.features_x, fed.targets
    return a.T @ (a @ x - b) / len(b) + fed.weight_decay * x


def _logistic_grad(fed, x):
    a, b = fed.features_x, fed.targets
    return a.T @ (1.0 / (1.0 + np.exp(-(a @ x))) - b) / len(b) + fed.weight_decay * x


def _numeric_grad(fed, x, h=1e-5):
    eye = np.eye(len(x))
    return np.array([(fed.objective(x + h * e) - fed.objective(x - h * e)) / (2 * h) for e in eye])


@pytest.mark.parametrize("wd", [0.0, 1e-3])
def test_lsq_x_star_solves_the_normal_equations(wd):
    fed = make_federation(
        "lsq", num_clients=8, samples=30, dim=6, heterogeneity=1.0, noise=0.1, weight_decay=wd, seed=0
    )
    assert fed.task == "regression" and fed.name == "synthetic-lsq"
    assert fed.features_x.shape == (240, 6) and fed.targets.shape == (240,)
    x = fed.x_star
    a = fed.features_x
    # normal equations (A^T A / n + wd I) x = A^T b / n
    lhs = (a.T @ a / len(a) + wd * np.eye(6)) @ x
    np.testing.assert_allclose(lhs, a.T @ fed.targets / len(a), atol=1e-10)
    assert np.linalg.norm(_lsq_grad(fed, x)) < 1e-8
    # the objective the federation reports has the same stationary point
    assert np.linalg.norm(_numeric_grad(fed, x)) < 1e-5
    assert fed.objective(x) == fed.f_star
    rng = np.random.default_rng(0)
    for _ in range(20):
        assert fed.objective(x + 1e-3 * rng.normal(size=6)) > fed.f_star
    assert fed.relative_error(x) == 0.0


def test_lsq_objective_matches_its_definition():
    fed = make_federation("lsq", 4, 10, 3, 0.5, 0.1, 0.01, 1)
    x = np.array([0.3, -1.0, 2.0])
    a, b = fed.features_x, fed.targets
    per_client = [0.5 * np.mean((a[p] @ x - b[p]) ** 2) for p in fed.client_parts]
    assert fed.objective(x) == pytest.approx(np.mean(per_client) + 0.005 * x @ x, rel=1e-12)


def test_logistic_x_star_is_stationary():
    fed = make_federation("logistic", 10, 40, 8, 1.0, 0.1, 1e-3, 0)
    assert fed.task == "binary" and fed.name == "synthetic-logistic"
    assert set(np.unique(fed.targets)) == {0.0, 1.0}
    assert np.linalg.norm(_logistic_grad(fed, fed.x_star)) < 1e-8
    assert np.linalg.norm(_numeric_grad(fed, fed.x_star)) < 1e-6
    assert fed.objective(fed.x_star) == fed.f_star
    rng = np.random.default_rng(1)
    for _ in range(20):
        assert fed.objective(fed.x_star + 1e-2 * rng.normal(size=8)) > fed.f_star


def test_federation_layout_and_determinism():
    a = make_federation("lsq", 5, 12, 4, 1.0, 0.1, 0.0, 3)
    b = make_federation("lsq", 5, 12, 4, 1.0, 0.1, 0.0, 3)
    c = make_federation("lsq", 5, 12, 4, 1.0, 0.1, 0.0, 4)
    np.testing.assert_array_equal(a.features_x, b.features_x)
    np.testing.assert_array_equal(a.x_star, b.x_star)
    assert not np.allclose(a.features_x, c.features_x)
    assert len(a.client_parts) == 5
    np.testing.assert_array_equal(np.concatenate(a.client_parts), np.arange(60))
    assert all(len(p) == 12 for p in a.client_parts)
    assert a.train.x.dtype == torch.float32 and tuple(a.train.x.shape) == (60, 4)
    assert a.input_shape == (4,)


def _client_optima_spread(fed):
    sols = [np.linalg.lstsq(fed.features_x[p], fed.targets[p], rcond=None)[0] for p in fed.client_parts]
    sols = np.array(sols)
    return float(np.mean(np.linalg.norm(sols - sols.mean(axis=0), axis=1)))


def test_heterogeneity_spreads_client_optima():
    same = make_federation("lsq", 10, 50, 20, 0.0, 0.1, 0.0, 0)
    spread = make_federation("lsq", 10, 50, 20, 2.0, 0.1, 0.0, 0)
    s0, s2 = _client_optima_spread(same), _client_optima_spread(spread)
    assert s0 < 0.5  # only label noise separates the clients
    assert s2 > 10 * s0
    # with h = 0 every client shares one optimum, so x* sits close to each client's own solution
    p0 = same.client_parts[0]
    own = np.linalg.lstsq(same.features_x[p0], same.targets[p0], rcond=None)[0]
    assert np.linalg.norm(own - same.x_star) < 0.5
