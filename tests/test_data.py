"""Tests for jaxcomm.data: file parsers on tiny synthetic files, partitions, the shipped sample.

Integration tests on the real datasets run only when $JAXCOMM_DATA_DIR points at them.
"""

from __future__ import annotations

import gzip
import os
import pathlib
import pickle
import struct
import sys
import types

import numpy as np
import pytest

from jaxcomm import data
from jaxcomm.data import DataError

_MNIST_NAMES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


# --------------------------------------------------------------------------- helpers


def _idx(array: np.ndarray, magic: int) -> bytes:
    """IDX bytes: big-endian magic and dims, then the uint8 payload."""
    header = struct.pack(f">{1 + array.ndim}I", magic, *array.shape)
    return header + array.astype(np.uint8).tobytes()


def _mnist_arrays(num_train: int = 7, num_test: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "train_images": rng.integers(0, 256, (num_train, 28, 28), dtype=np.uint8),
        "train_labels": rng.integers(0, 10, num_train, dtype=np.uint8),
        "test_images": rng.integers(0, 256, (num_test, 28, 28), dtype=np.uint8),
        "test_labels": rng.integers(0, 10, num_test, dtype=np.uint8),
    }


def _write_mnist(folder: pathlib.Path, arrays: dict[str, np.ndarray], *, gz: bool = True,
                 raw: dict[str, bytes] | None = None) -> dict[str, pathlib.Path]:
    """Writes the four IDX files; `raw` overrides a file's bytes (before gzip)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for role, name in _MNIST_NAMES.items():
        magic = 0x803 if role.endswith("images") else 0x801
        payload = (raw or {}).get(role, _idx(arrays[role], magic))
        path = folder / (name + ".gz" if gz else name)
        path.write_bytes(gzip.compress(payload) if gz else payload)
        paths[role] = path
    return paths


def _cifar_arrays(num: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (num, 32, 32, 3), dtype=np.uint8),
            rng.integers(0, 10, num).astype(np.int32))


def _cifar_records(images: np.ndarray, labels: np.ndarray) -> bytes:
    planes = images.transpose(0, 3, 1, 2).reshape(len(images), 3072)
    return np.concatenate([labels.astype(np.uint8)[:, None], planes], axis=1).tobytes()


def _write_cifar(folder: pathlib.Path, fmt: str, per_file: int,
                 seed: int) -> tuple[np.ndarray, ...]:
    """Writes data_batch_1..5 + test_batch; returns (x_train, y_train, x_test, y_test)."""
    folder.mkdir(parents=True, exist_ok=True)
    xs, ys = [], []
    for i, name in enumerate([f"data_batch_{j}" for j in range(1, 6)] + ["test_batch"]):
        x, y = _cifar_arrays(per_file, seed * 10 + i)
        if fmt == "binary":
            (folder / f"{name}.bin").write_bytes(_cifar_records(x, y))
        else:
            flat = x.transpose(0, 3, 1, 2).reshape(per_file, 3072)
            batch = {b"data": flat, b"labels": y.tolist()}
            (folder / name).write_bytes(pickle.dumps(batch))
        xs.append(x)
        ys.append(y)
    return np.concatenate(xs[:5]), np.concatenate(ys[:5]), xs[5], ys[5]


@pytest.fixture
def no_tfds(monkeypatch):
    """No data folder from the environment and no tensorflow_datasets."""
    monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)


# --------------------------------------------------------------------------- MNIST


@pytest.mark.parametrize("subdir", [".", "mnist", "MNIST/raw"])
@pytest.mark.parametrize("gz", [True, False])
def test_load_mnist_exact_arrays_and_split(tmp_path, no_tfds, subdir, gz):
    arrays = _mnist_arrays()
    _write_mnist(tmp_path / subdir, arrays, gz=gz)
    ds = data.load_mnist(tmp_path, validation_size=2)
    assert ds.name == "mnist" and ds.num_classes == 10
    np.testing.assert_array_equal(ds.train.images[..., 0], arrays["train_images"][:5])
    np.testing.assert_array_equal(ds.train.labels, arrays["train_labels"][:5])
    np.testing.assert_array_equal(ds.validation.images[..., 0], arrays["train_images"][5:])
    np.testing.assert_array_equal(ds.validation.labels, arrays["train_labels"][5:])
    np.testing.assert_array_equal(ds.test.images[..., 0], arrays["test_images"])
    np.testing.assert_array_equal(ds.test.labels, arrays["test_labels"])
    for split, size in ((ds.train, 5), (ds.validation, 2), (ds.test, 3)):
        assert split.images.shape == (size, 28, 28, 1) and split.images.dtype == np.uint8
        assert split.labels.shape == (size,) and split.labels.dtype == np.int32


def test_load_mnist_empty_validation_and_bad_size(tmp_path, no_tfds):
    _write_mnist(tmp_path, _mnist_arrays())
    ds = data.load_mnist(tmp_path, validation_size=0)
    assert ds.train.images.shape == (7, 28, 28, 1)
    assert ds.validation.images.shape == (0, 28, 28, 1) and ds.validation.labels.shape == (0,)
    with pytest.raises(ValueError, match="validation_size"):
        data.load_mnist(tmp_path, validation_size=8)


def test_mnist_bad_magic_names_file(tmp_path, no_tfds):
    arrays = _mnist_arrays()
    _write_mnist(tmp_path, arrays, raw={"train_images": _idx(arrays["train_images"], 0x801)})
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz.*magic"):
        data.load_mnist(tmp_path, validation_size=2)


def test_mnist_truncated_gzip_names_file(tmp_path, no_tfds):
    paths = _write_mnist(tmp_path, _mnist_arrays())
    blob = paths["test_labels"].read_bytes()
    paths["test_labels"].write_bytes(blob[:len(blob) // 2])
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte.gz"):
        data.load_mnist(tmp_path, validation_size=2)


def test_mnist_payload_length_mismatch(tmp_path, no_tfds):
    arrays = _mnist_arrays()
    short = _idx(arrays["train_images"], 0x803)[:-28]  # header says 7 images, holds 6.96
    _write_mnist(tmp_path, arrays, raw={"train_images": short})
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz.*truncated"):
        data.load_mnist(tmp_path, validation_size=2)


def test_mnist_count_mismatch(tmp_path, no_tfds):
    arrays = _mnist_arrays()
    arrays["test_labels"] = arrays["test_labels"][:2]
    _write_mnist(tmp_path, arrays)
    with pytest.raises(DataError, match="3 images.*2 labels"):
        data.load_mnist(tmp_path, validation_size=2)


def test_mnist_label_out_of_range(tmp_path, no_tfds):
    arrays = _mnist_arrays()
    arrays["train_labels"][4] = 10
    _write_mnist(tmp_path, arrays)
    with pytest.raises(DataError, match="train-labels.*label 10 at index 4"):
        data.load_mnist(tmp_path, validation_size=2)


def test_parse_idx_short_header():
    with pytest.raises(DataError, match="x.idx"):
        data.parse_idx_images(b"\x00\x00\x08", "x.idx")
    with pytest.raises(DataError, match="y.idx"):
        data.parse_idx_labels(b"", "y.idx")


# --------------------------------------------------------------------------- CIFAR-10


def test_parse_cifar_binary_plane_order():
    record = np.zeros(3073, np.uint8)
    record[0] = 7
    row, col = 2, 5
    for channel, value in enumerate((200, 100, 50)):  # R, G, B planes
        record[1 + channel * 1024 + row * 32 + col] = value
    split = data.parse_cifar_binary(record.tobytes(), "one.bin")
    assert split.images.shape == (1, 32, 32, 3) and split.images.dtype == np.uint8
    np.testing.assert_array_equal(split.images[0, row, col], [200, 100, 50])
    assert split.images.sum() == 350 and split.labels.tolist() == [7]
    assert split.labels.dtype == np.int32


def test_parse_cifar_binary_round_trip():
    x, y = _cifar_arrays(5, seed=1)
    split = data.parse_cifar_binary(_cifar_records(x, y), "five.bin")
    np.testing.assert_array_equal(split.images, x)
    np.testing.assert_array_equal(split.labels, y)


def test_parse_cifar_binary_errors():
    x, y = _cifar_arrays(2, seed=2)
    records = _cifar_records(x, y)
    with pytest.raises(DataError, match="cut.bin.*multiple of"):
        data.parse_cifar_binary(records[:-1], "cut.bin")
    with pytest.raises(DataError, match="empty.bin"):
        data.parse_cifar_binary(b"", "empty.bin")
    bad = bytearray(records)
    bad[3073] = 12  # label byte of the second record
    with pytest.raises(DataError, match="label.bin.*label 12 at index 1"):
        data.parse_cifar_binary(bytes(bad), "label.bin")


def test_parse_cifar_python_round_trip_and_errors():
    x, y = _cifar_arrays(4, seed=3)
    flat = x.transpose(0, 3, 1, 2).reshape(4, 3072)
    split = data.parse_cifar_python({b"data": flat, b"labels": y.tolist()}, "batch")
    np.testing.assert_array_equal(split.images, x)
    np.testing.assert_array_equal(split.labels, y)
    with pytest.raises(DataError, match="batch_x.*missing key b'labels'"):
        data.parse_cifar_python({b"data": flat}, "batch_x")
    with pytest.raises(DataError, match="batch_y.*shape"):
        data.parse_cifar_python({b"data": flat.reshape(4, 32, 96), b"labels": y.tolist()},
                                "batch_y")
    with pytest.raises(DataError, match="batch_z.*labels"):
        data.parse_cifar_python({b"data": flat, b"labels": y.tolist()[:3]}, "batch_z")


def test_load_cifar10_directory_layouts(tmp_path, no_tfds, monkeypatch):
    monkeypatch.setattr(data, "_CIFAR_RECORDS_PER_FILE", 3)
    py = _write_cifar(tmp_path / "cifar10" / "cifar-10-batches-py", "python", 3, seed=1)
    ds = data.load_cifar10(tmp_path, validation_size=4)
    np.testing.assert_array_equal(ds.train.images, py[0][:11])
    np.testing.assert_array_equal(ds.validation.labels, py[1][11:])
    np.testing.assert_array_equal(ds.test.images, py[2])
    assert ds.name == "cifar10" and ds.train.labels.dtype == np.int32

    # With both layouts present, the binary one is read.
    binary = _write_cifar(tmp_path / "cifar-10-batches-bin", "binary", 3, seed=2)
    ds = data.load_cifar10(tmp_path)
    np.testing.assert_array_equal(ds.train.images, binary[0])
    np.testing.assert_array_equal(ds.train.labels, binary[1])
    np.testing.assert_array_equal(ds.test.labels, binary[3])
    assert ds.validation.images.shape == (0, 32, 32, 3)


def test_load_cifar10_wrong_record_count(tmp_path, no_tfds, monkeypatch):
    monkeypatch.setattr(data, "_CIFAR_RECORDS_PER_FILE", 3)
    _write_cifar(tmp_path / "cifar-10-batches-bin", "binary", 2, seed=0)
    with pytest.raises(DataError, match="data_batch_1.bin: 2 records, expected 3"):
        data.load_cifar10(tmp_path)


def test_load_cifar10_truncated_pickle(tmp_path, no_tfds, monkeypatch):
    monkeypatch.setattr(data, "_CIFAR_RECORDS_PER_FILE", 3)
    folder = tmp_path / "cifar-10-batches-py"
    _write_cifar(folder, "python", 3, seed=0)
    blob = (folder / "test_batch").read_bytes()
    (folder / "test_batch").write_bytes(blob[:100])
    with pytest.raises(DataError, match="test_batch"):
        data.load_cifar10(tmp_path)


# --------------------------------------------------------------------------- locating data


def test_no_data_and_no_tfds_explains_both_fixes(no_tfds):
    for load in (data.load_mnist, data.load_cifar10):
        with pytest.raises(DataError) as info:
            load()
        message = str(info.value)
        for needle in ("JAXCOMM_DATA_DIR", "--data-dir", "tfds", "pip install 'jaxcomm[tfds]'"):
            assert needle in message
    assert "prepare_cifar10.py" in message


def test_missing_files_lists_searched_paths(tmp_path, no_tfds):
    (tmp_path / "mnist").mkdir()
    with pytest.raises(DataError) as info:
        data.load_mnist(tmp_path)
    message = str(info.value)
    assert str(tmp_path / "mnist") in message and str(tmp_path / "MNIST" / "raw") in message
    assert "train-images-idx3-ubyte" in message and "JAXCOMM_DATA_DIR" in message


def test_env_var_respected_and_argument_wins(tmp_path, no_tfds, monkeypatch):
    arrays = _mnist_arrays()
    _write_mnist(tmp_path / "good", arrays)
    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path / "good"))
    assert data.resolve_data_dir(None) == tmp_path / "good"
    ds = data.load_mnist(validation_size=2)
    np.testing.assert_array_equal(ds.test.labels, arrays["test_labels"])

    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path / "absent"))
    with pytest.raises(DataError, match="JAXCOMM_DATA_DIR.*absent"):
        data.load_mnist(validation_size=2)
    assert data.resolve_data_dir(tmp_path / "good") == tmp_path / "good"
    assert len(data.load_mnist(tmp_path / "good", validation_size=2).train.labels) == 5


def test_resolve_data_dir(tmp_path, no_tfds):
    assert data.resolve_data_dir(None) is None
    assert data.resolve_data_dir(str(tmp_path)) == tmp_path
    with pytest.raises(DataError, match="nope"):
        data.resolve_data_dir(tmp_path / "nope")


def test_tfds_fallback(monkeypatch):
    monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
    x, y = _cifar_arrays(6, seed=4)
    calls = []

    def load(name, split, batch_size, as_supervised):
        calls.append((name, split, batch_size, as_supervised))
        return [(x, y.astype(np.int64)), (x[:2], y[:2].astype(np.int64))]

    fake = types.SimpleNamespace(load=load, as_numpy=lambda tree: tree)
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", fake)
    ds = data.load_cifar10(validation_size=1)
    assert calls == [("cifar10", ["train", "test"], -1, True)]
    np.testing.assert_array_equal(ds.train.images, x[:5])
    np.testing.assert_array_equal(ds.validation.labels, y[5:])
    assert ds.test.labels.dtype == np.int32 and len(ds.test.labels) == 2


def test_tfds_download_failure_is_data_error(monkeypatch):
    monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)

    def load(*args, **kwargs):
        raise ConnectionError("no internet")

    monkeypatch.setitem(sys.modules, "tensorflow_datasets",
                        types.SimpleNamespace(load=load, as_numpy=lambda t: t))
    with pytest.raises(DataError, match="(?s)--data-dir.*no internet"):
        data.load_mnist()


def test_load_dataset_dispatch(tmp_path, no_tfds):
    _write_mnist(tmp_path, _mnist_arrays())
    assert data.load_dataset("mnist", tmp_path, validation_size=1).validation.labels.shape == (1,)
    assert data.load_dataset("mnist_sample", tmp_path).name == "mnist_sample"
    with pytest.raises(ValueError, match="mnist, cifar10, mnist_sample"):
        data.load_dataset("imagenet")


# --------------------------------------------------------------------------- partitions


def _assert_partition(shards: data.Shards, num_examples: int, num_nodes: int) -> None:
    assert shards.indices.shape == shards.mask.shape and shards.indices.shape[0] == num_nodes
    assert shards.indices.dtype == np.int32 and shards.sizes.dtype == np.int32
    assert shards.mask.dtype == np.bool_
    np.testing.assert_array_equal(shards.mask.sum(1), shards.sizes)
    real = shards.indices[shards.mask]
    np.testing.assert_array_equal(np.sort(real), np.arange(num_examples))  # disjoint, covering
    for node in range(num_nodes):  # padded slots stay inside the node's own shard
        own = set(shards.indices[node, shards.mask[node]].tolist())
        assert set(shards.indices[node, ~shards.mask[node]].tolist()) <= own
        assert shards.mask[node, :shards.sizes[node]].all()


def test_partition_iid():
    shards = data.partition_iid(1003, 10, seed=0)
    _assert_partition(shards, 1003, 10)
    assert shards.sizes.max() - shards.sizes.min() <= 1
    again = data.partition_iid(1003, 10, seed=0)
    np.testing.assert_array_equal(shards.indices, again.indices)
    other = data.partition_iid(1003, 10, seed=1)
    assert not np.array_equal(shards.indices, other.indices)


def test_partition_iid_padding():
    shards = data.partition_iid(10, 3, seed=0)
    _assert_partition(shards, 10, 3)
    assert shards.indices.shape == (3, 4)
    assert shards.sizes.tolist() == [4, 3, 3]
    np.testing.assert_array_equal(shards.mask, [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0]])
    np.testing.assert_array_equal(shards.indices[1:, 3], shards.indices[1:, 0])


def _mean_max_class_fraction(labels: np.ndarray, shards: data.Shards) -> float:
    counts = data.shard_label_counts(labels, shards)
    return float(np.mean(counts.max(1) / counts.sum(1)))


def test_partition_dirichlet_skew():
    labels = np.repeat(np.arange(10), 200)
    dirichlet = data.partition_dirichlet(labels, 10, alpha=0.1, seed=0)
    iid = data.partition(labels, 10, scheme="iid", seed=0)
    _assert_partition(dirichlet, len(labels), 10)
    counts = data.shard_label_counts(labels, dirichlet)
    np.testing.assert_array_equal(counts.sum(0), np.full(10, 200))
    skewed = _mean_max_class_fraction(labels, dirichlet)  # 0.61 with numpy 2.4
    uniform = _mean_max_class_fraction(labels, iid)  # 0.13; the 10 classes are balanced
    assert skewed > 0.45 and uniform < 0.2, (skewed, uniform)
    again = data.partition(labels, 10, scheme="dirichlet", alpha=0.1, seed=0)
    np.testing.assert_array_equal(again.indices, dirichlet.indices)
    # A large alpha is close to uniform.
    flat = data.partition_dirichlet(labels, 10, alpha=1000.0, seed=0)
    assert _mean_max_class_fraction(labels, flat) < 0.2


def test_partition_dirichlet_min_size():
    labels = np.repeat(np.arange(10), 100)
    loose = data.partition_dirichlet(labels, 20, alpha=0.05, seed=3, min_size=1)
    assert loose.sizes.min() < 20  # so the top-up below has work to do
    shards = data.partition_dirichlet(labels, 20, alpha=0.05, seed=3, min_size=20)
    _assert_partition(shards, 1000, 20)
    assert shards.sizes.min() >= 20
    tight = data.partition_dirichlet(labels, 20, alpha=0.05, seed=3, min_size=50)
    _assert_partition(tight, 1000, 20)
    assert tight.sizes.tolist() == [50] * 20


@pytest.mark.parametrize("kwargs, field", [
    (dict(scheme="random"), "scheme"),
    (dict(num_nodes=0), "num_nodes"),
    (dict(num_nodes=11), "num_nodes"),
    (dict(scheme="dirichlet", alpha=0.0), "alpha"),
    (dict(alpha=-1.0), "alpha"),
    (dict(scheme="dirichlet", alpha=float("nan")), "alpha"),
])
def test_partition_errors(kwargs, field):
    args = dict(num_nodes=3) | kwargs
    with pytest.raises(ValueError, match=field):
        data.partition(np.arange(10) % 3, **args)


def test_partition_scheme_error_lists_allowed():
    with pytest.raises(ValueError, match="iid, dirichlet"):
        data.partition(np.zeros(5, int), 2, scheme="shards")
    with pytest.raises(ValueError, match="min_size"):
        data.partition_dirichlet(np.zeros(10, int), 5, alpha=1.0, seed=0, min_size=3)


# --------------------------------------------------------------------------- the shipped sample


def test_mnist_sample():
    ds = data.load_mnist_sample()
    assert ds.name == "mnist_sample" and ds.num_classes == 10
    for split, size in ((ds.train, 4000), (ds.validation, 1000), (ds.test, 1000)):
        assert split.images.shape == (size, 28, 28, 1) and split.images.dtype == np.uint8
        assert split.labels.shape == (size,) and split.labels.dtype == np.int32
        assert 0 <= split.labels.min() and split.labels.max() <= 9
        counts = np.bincount(split.labels, minlength=10)
        assert counts.sum() == size and counts.min() > 0
    assert 20 < ds.train.images.mean() < 45  # a real digit image, not zeros
    full = data.load_mnist_sample(validation_size=0)
    assert len(full.train.labels) == 5000 and full.validation.images.shape == (0, 28, 28, 1)


# --------------------------------------------------------------------------- real data


_DATA_DIR = os.environ.get(data.DATA_DIR_ENV, "")
_HAS_DIR = bool(_DATA_DIR) and os.path.isdir(_DATA_DIR)
_HAS_MNIST = _HAS_DIR and data.find_mnist_files(_DATA_DIR) is not None
_CIFAR = data.find_cifar10_dir(_DATA_DIR) if _HAS_DIR else None
_MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


@pytest.mark.skipif(not _HAS_MNIST, reason="set JAXCOMM_DATA_DIR to a folder holding MNIST")
def test_real_mnist():
    ds = data.load_mnist()
    assert [len(s.labels) for s in (ds.train, ds.validation, ds.test)] == [50000, 10000, 10000]
    train_images = np.concatenate([ds.train.images, ds.validation.images])
    train_labels = np.concatenate([ds.train.labels, ds.validation.labels])
    assert np.bincount(train_labels).tolist() == _MNIST_TRAIN_COUNTS
    assert train_images.mean() == pytest.approx(33.318, abs=1e-3)
    assert ds.test.images.mean() == pytest.approx(33.791, abs=1e-3)
    # The shipped sample is the head of the official splits.
    sample = data.load_mnist_sample(validation_size=0)
    np.testing.assert_array_equal(sample.train.images, train_images[:5000])
    np.testing.assert_array_equal(sample.train.labels, train_labels[:5000])
    np.testing.assert_array_equal(sample.test.images, ds.test.images[:1000])
    np.testing.assert_array_equal(sample.test.labels, ds.test.labels[:1000])


@pytest.mark.skipif(_CIFAR is None or _CIFAR[1] != "binary",
                    reason="set JAXCOMM_DATA_DIR to a folder holding cifar-10-batches-bin")
def test_real_cifar10():
    ds = data.load_cifar10()
    assert ds.train.images.shape == (50000, 32, 32, 3)
    assert ds.test.images.shape == (10000, 32, 32, 3)
    assert np.bincount(ds.train.labels).tolist() == [5000] * 10
    assert np.bincount(ds.test.labels).tolist() == [1000] * 10
    # Official mean RGB 125.31, 122.95, 113.87; the lossy ../shared/data copy is within 0.05.
    np.testing.assert_allclose(ds.train.images.mean((0, 1, 2)), [125.3, 122.95, 113.87], atol=0.1)


_PREPARE = pathlib.Path(_DATA_DIR) / "prepare_cifar10.py" if _HAS_DIR else None


@pytest.mark.skipif(_CIFAR is not None or _PREPARE is None or not _PREPARE.is_file(),
                    reason="needs JAXCOMM_DATA_DIR = ../shared/data (with prepare_cifar10.py) and no prepared copy")
def test_shared_cifar10_prepared_then_loaded(tmp_path):
    """The README's CIFAR-10 recipe: prepare_cifar10.py once, then load_cifar10 reads the binary batches."""
    pytest.importorskip("PIL")
    import subprocess

    subprocess.run([sys.executable, str(_PREPARE), str(tmp_path)], check=True, capture_output=True)
    ds = data.load_cifar10(tmp_path, validation_size=5000)
    assert [len(s.labels) for s in (ds.train, ds.validation, ds.test)] == [45000, 5000, 10000]
    labels = np.concatenate([ds.train.labels, ds.validation.labels])
    assert np.bincount(labels).tolist() == [5000] * 10
    side = np.load(pathlib.Path(_DATA_DIR) / "cifar10" / "cifar10_labels_and_lossless_subset.npz")
    np.testing.assert_array_equal(labels, side["y_train"])
    np.testing.assert_array_equal(ds.train.images[side["train_lossless_index"]], side["x_train_lossless"])
    np.testing.assert_allclose(ds.train.images.mean((0, 1, 2)), [125.3, 123.0, 113.9], atol=0.3)


def test_accuracy_in_batches_weights_out_the_padding():
    """7 samples in batches of 3 (the last padded with 2 zero-weight rows): the answer counts only real rows."""
    from jaxcomm.data import ImageSplit, accuracy_in_batches

    labels = np.array([0, 1, 2, 0, 1, 2, 0], np.int32)
    split = ImageSplit(np.zeros((7, 2, 2, 1), np.uint8), labels)
    seen = []

    def correct(images, batch_labels, weight):  # a "model" that always says class 0, for two members
        seen.append(images.shape[0])
        right = (np.asarray(batch_labels) == 0) * np.asarray(weight)
        return np.stack([right.sum(), np.asarray(weight).sum()])

    np.testing.assert_allclose(accuracy_in_batches(correct, split, 3), [100 * 3 / 7, 100.0])
    assert seen == [3, 3, 3]  # one shape for every batch


SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.mark.skipif(not (SHARED / "cifar10" / "cifar10_jpg_official_order.tar.gz").is_file(), reason="no shared data")
def test_stored_bytes_per_image_are_measured_from_the_shared_files():
    import tarfile

    with tarfile.open(SHARED / "cifar10" / "cifar10_jpg_official_order.tar.gz") as archive:
        sizes = [m.size for m in archive if m.isfile() and m.name.endswith(".jpg")]
    assert len(sizes) == 60_000 and data.stored_bytes_per_image("cifar10") == pytest.approx(np.mean(sizes), abs=0.01)
    images = sum((SHARED / "mnist" / f).stat().st_size for f in ("train-images-idx3-ubyte.gz",
                                                                 "t10k-images-idx3-ubyte.gz"))
    assert data.stored_bytes_per_image("mnist") == pytest.approx(images / 70_000, abs=0.01)
    with pytest.raises(ValueError, match="synthetic"):
        data.stored_bytes_per_image("synthetic")
