"""Image datasets as numpy arrays, and their partition over the nodes of a population.

Loaders read the official file formats from a local folder (MNIST gzipped IDX files,
CIFAR-10 binary or python batches), fall back to tensorflow-datasets when the files are
absent, and otherwise fail with a `DataError` that says how to fix it. Partitions give each
node a fixed-shape, padded and masked list of indices into the training split, so that
per-node code can be lifted over N nodes without ragged shapes (STYLE.md §4).

Only numpy is needed here; tensorflow_datasets is imported lazily by the fallback.

References:
  Thesis §2.2.2.1 (i.i.d. split of the data over nodes), §3.2.2.1 and §4.2.1.2 (MNIST
  50k/10k train/validation split).
"""

from __future__ import annotations

import gzip
import importlib.resources
import operator
import os
import pathlib
import pickle
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

DATA_DIR_ENV = "JAXCOMM_DATA_DIR"
NUM_CLASSES = 10
DATASET_NAMES = ("mnist", "cifar10", "mnist_sample")
PARTITION_SCHEMES = ("iid", "dirichlet")
RAW_BYTES_PER_IMAGE = {"cifar10": 32 * 32 * 3, "mnist": 28 * 28, "mnist_sample": 28 * 28}
"""Bytes of one image as the loaders hold it (uint8 pixels): the ``raw`` encoding of the byte ledger."""
STORED_BYTES_PER_IMAGE = {"cifar10": 920.85, "mnist": 165.16, "mnist_sample": 165.16}
"""Mean bytes of one image as each dataset is stored (the ``stored`` encoding of the byte ledger), measured from
the files in ``shared/data`` (``tests/test_data.py`` measures them again where the files are present):
CIFAR-10, the mean size of its 60,000 JPEGs (``cifar10_jpg_official_order.tar.gz``, quality 75: 920.85 B, against
3,072 raw); MNIST, its four official gzipped IDX image files over their 70,000 images (9,912,422 + 1,648,877 B:
165.16 B, against 784 raw; gzip compresses the stream, so this is a mean, not a per-image size)."""

_IDX_IMAGES_MAGIC = 0x00000803  # uint8 data, 3 dims
_IDX_LABELS_MAGIC = 0x00000801  # uint8 data, 1 dim
_MNIST_FILES = {  # role -> official file name without ".gz"
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
_MNIST_SUBDIRS = (".", "mnist", "MNIST/raw")

_CIFAR_RECORD_BYTES = 1 + 32 * 32 * 3  # label byte, then R, G, B planes
_CIFAR_RECORDS_PER_FILE = 10_000  # tests shrink it to write tiny "official" files
_CIFAR_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)
_CIFAR_LAYOUTS = (  # (subdir, format), in order of preference: binary first
    ("cifar-10-batches-bin", "binary"),
    ("cifar10/cifar-10-batches-bin", "binary"),
    ("cifar-10-batches-py", "python"),
    ("cifar10/cifar-10-batches-py", "python"),
)

_SAMPLE_FILE = "mnist_sample.npz"
_PREPARE_CIFAR = "python ../shared/data/prepare_cifar10.py DIR"


LOSSY_CIFAR10_NOTE = ("CIFAR-10 here is the lossy JPEG-75 copy of shared/data (see its README); accuracies may sit "
                      "below published ones")


class DataError(RuntimeError):
    """A dataset is missing, unreadable or malformed; the message names the file and the fix."""


class ImageSplit(NamedTuple):
    """One split of an image classification dataset."""

    images: np.ndarray  # [M, H, W, C] uint8
    labels: np.ndarray  # [M] int32


class ImageDataset(NamedTuple):
    """Train, validation and test splits of an image classification dataset."""

    name: str  # "mnist", "mnist_sample" or "cifar10"
    train: ImageSplit
    validation: ImageSplit  # may hold M = 0 examples
    test: ImageSplit
    num_classes: int


class Shards(NamedTuple):
    """The training examples held by each of N nodes, padded to a common length S."""

    # [N, S] int32 into the training split; a padded slot repeats a real index of its node,
    # so gathers never leave the node's shard.
    indices: np.ndarray
    mask: np.ndarray  # [N, S] bool, True on real slots
    sizes: np.ndarray  # [N] int32 real shard sizes


# --------------------------------------------------------------------------- data folder


def resolve_data_dir(data_dir: str | os.PathLike | None) -> pathlib.Path | None:
    """Returns the folder to read datasets from.

    Args:
      data_dir: an explicit folder (e.g. from `--data-dir`); it wins over the environment.

    Returns:
      `data_dir`, else the folder in `$JAXCOMM_DATA_DIR`, else None when neither is set (an
      empty string counts as unset).

    Raises:
      DataError: the chosen folder does not exist or is not a folder.
    """
    if data_dir is not None and str(data_dir) != "":
        path, origin = pathlib.Path(data_dir).expanduser(), "data_dir (--data-dir)"
    elif os.environ.get(DATA_DIR_ENV):
        path, origin = pathlib.Path(os.environ[DATA_DIR_ENV]).expanduser(), f"${DATA_DIR_ENV}"
    else:
        return None
    if not path.is_dir():
        raise DataError(f"{origin} is {str(path)!r}, which is not an existing folder; "
                        f"fix the path or unset it")
    return path


# --------------------------------------------------------------------------- file readers


def _read_bytes(path: pathlib.Path) -> bytes:
    """Reads a file, decompressing it when its name ends in .gz."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise DataError(f"{path}: truncated or corrupt gzip file ({type(e).__name__}: {e}); "
                        f"replace it with a fresh copy") from e
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e})") from e


def parse_idx_images(data: bytes, source: str) -> np.ndarray:
    """Parses an uncompressed IDX image file (magic 0x00000803).

    Args:
      data: the whole file: a big-endian header (magic, count, rows, cols as uint32), then
        count * rows * cols pixel bytes.
      source: the file name, for error messages.

    Returns:
      [M, H, W] uint8 images.

    Raises:
      DataError: bad magic number, or a payload whose length disagrees with the header.
    """
    if len(data) < 16:
        raise DataError(f"{source}: only {len(data)} bytes, shorter than an IDX image header (16)")
    magic, count, rows, cols = struct.unpack(">IIII", data[:16])
    if magic != _IDX_IMAGES_MAGIC:
        raise DataError(f"{source}: bad magic number 0x{magic:08x}, expected "
                        f"0x{_IDX_IMAGES_MAGIC:08x} (IDX uint8 images); is this the right file?")
    expected = count * rows * cols
    if len(data) - 16 != expected:
        raise DataError(f"{source}: {len(data) - 16} pixel bytes, but the header says "
                        f"{count} x {rows} x {cols} = {expected}; the file is truncated or corrupt")
    # Copy so the arrays are writable and do not pin the bytes object.
    return np.frombuffer(data, np.uint8, offset=16).reshape(count, rows, cols).copy()


def parse_idx_labels(data: bytes, source: str) -> np.ndarray:
    """Parses an uncompressed IDX label file (magic 0x00000801).

    Args:
      data: the whole file: a big-endian header (magic, count as uint32), then count bytes.
      source: the file name, for error messages.

    Returns:
      [M] uint8 labels.

    Raises:
      DataError: bad magic number, or a payload whose length disagrees with the header.
    """
    if len(data) < 8:
        raise DataError(f"{source}: only {len(data)} bytes, shorter than an IDX label header (8)")
    magic, count = struct.unpack(">II", data[:8])
    if magic != _IDX_LABELS_MAGIC:
        raise DataError(f"{source}: bad magic number 0x{magic:08x}, expected "
                        f"0x{_IDX_LABELS_MAGIC:08x} (IDX uint8 labels); is this the right file?")
    if len(data) - 8 != count:
        raise DataError(f"{source}: {len(data) - 8} label bytes, but the header says {count}; "
                        f"the file is truncated or corrupt")
    return np.frombuffer(data, np.uint8, offset=8).copy()


def _check_labels(labels: np.ndarray, source: str, num_classes: int = NUM_CLASSES) -> None:
    """Raises DataError unless every label is in [0, num_classes)."""
    bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
    if bad.size:
        raise DataError(f"{source}: label {int(labels[bad[0]])} at index {int(bad[0])} is outside "
                        f"0..{num_classes - 1}")


def parse_cifar_binary(data: bytes, source: str) -> ImageSplit:
    """Parses one file of the CIFAR-10 binary version.

    Args:
      data: consecutive 3073-byte records: 1 label byte, then 1024 red, 1024 green and
        1024 blue bytes, each plane 32 x 32 row-major. Any number of records is accepted here;
        `load_cifar10` checks the official 10000 per file.
      source: the file name, for error messages.

    Returns:
      images [M, 32, 32, 3] uint8 HWC RGB, labels [M] int32.

    Raises:
      DataError: empty file, size not a multiple of 3073, or a label outside 0..9.
    """
    if not data or len(data) % _CIFAR_RECORD_BYTES:
        raise DataError(f"{source}: {len(data)} bytes is not a positive multiple of the "
                        f"{_CIFAR_RECORD_BYTES}-byte CIFAR-10 record; the file is truncated or "
                        f"not CIFAR-10 (CIFAR-100 records are 3074 bytes)")
    records = np.frombuffer(data, np.uint8).reshape(-1, _CIFAR_RECORD_BYTES)
    labels = records[:, 0].astype(np.int32)
    _check_labels(labels, source)
    images = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # planes -> HWC
    return ImageSplit(np.ascontiguousarray(images), labels)


def parse_cifar_python(batch: object, source: str) -> ImageSplit:
    """Parses one unpickled batch of the CIFAR-10 python version.

    Args:
      batch: a dict with b"data" [M, 3072] uint8 (R, G, B planes of 32 x 32, row-major) and
        b"labels", a list of M ints (str keys are accepted too).
      source: the file name, for error messages.

    Returns:
      images [M, 32, 32, 3] uint8 HWC RGB, labels [M] int32.

    Raises:
      DataError: missing keys, wrong shapes or dtypes, or a label outside 0..9.
    """
    if not isinstance(batch, dict):
        raise DataError(f"{source}: expected a pickled dict, got {type(batch).__name__}")

    def get(key: str) -> object:
        for k in (key.encode(), key):
            if k in batch:
                return batch[k]
        raise DataError(f"{source}: missing key {key.encode()!r} "
                        f"(keys: {sorted(map(repr, batch))})")

    data, labels = np.asarray(get("data")), np.asarray(get("labels"))
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DataError(f"{source}: b'data' has shape {data.shape}, expected [M, 3072]")
    if labels.shape != (data.shape[0],):
        raise DataError(f"{source}: b'labels' has shape {labels.shape}, expected "
                        f"({data.shape[0]},) to match b'data'")
    if data.dtype != np.uint8:
        if not np.issubdtype(data.dtype, np.integer) or data.min() < 0 or data.max() > 255:
            raise DataError(f"{source}: b'data' has dtype {data.dtype}, expected uint8 pixels")
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"{source}: b'labels' has dtype {labels.dtype}, expected integers")
    labels = labels.astype(np.int32)
    _check_labels(labels, source)
    images = data.astype(np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return ImageSplit(np.ascontiguousarray(images), labels)


def _unpickle(path: pathlib.Path) -> object:
    """Loads a CIFAR python batch. Pickle runs code: only open files you trust."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f, encoding="bytes")
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e})") from e
    except Exception as e:  # pickle raises many types on a damaged file
        raise DataError(f"{path}: not a readable pickle ({type(e).__name__}: {e}); "
                        f"the file is truncated or corrupt") from e


# --------------------------------------------------------------------------- locating files


def _mnist_candidates(root: pathlib.Path) -> list[pathlib.Path]:
    return [(root / sub) if sub != "." else root for sub in _MNIST_SUBDIRS]


def _mnist_files_in(folder: pathlib.Path) -> tuple[dict[str, pathlib.Path], list[str]]:
    """Returns the MNIST files found in `folder` by role, and the names missing there."""
    found, missing = {}, []
    for role, name in _MNIST_FILES.items():
        for candidate in (folder / f"{name}.gz", folder / name):  # the official .gz first
            if candidate.is_file():
                found[role] = candidate
                break
        else:
            missing.append(name + "[.gz]")
    return found, missing


def find_mnist_files(data_dir: str | os.PathLike) -> dict[str, pathlib.Path] | None:
    """Finds the four MNIST IDX files (gzipped or not) in DIR, DIR/mnist or DIR/MNIST/raw.

    Returns:
      {"train_images", "train_labels", "test_images", "test_labels"} -> path, from the first
      of those folders that holds all four; None if none does.
    """
    for folder in _mnist_candidates(pathlib.Path(data_dir)):
        found, missing = _mnist_files_in(folder)
        if not missing:
            return found
    return None


def find_cifar10_dir(data_dir: str | os.PathLike) -> tuple[pathlib.Path, str] | None:
    """Finds a CIFAR-10 batches folder in data_dir, binary version preferred.

    Returns:
      (folder, "binary" | "python") for the first of cifar-10-batches-bin,
      cifar10/cifar-10-batches-bin, cifar-10-batches-py, cifar10/cifar-10-batches-py that
      holds all six batch files; None if none does.
    """
    for sub, fmt in _CIFAR_LAYOUTS:
        folder = pathlib.Path(data_dir) / sub
        suffix = ".bin" if fmt == "binary" else ""
        if all((folder / f"{b}{suffix}").is_file() for b in _CIFAR_BATCHES):
            return folder, fmt
    return None


def _describe_search(folders: Sequence[pathlib.Path],
                     missing_of: Callable[[pathlib.Path], list[str]]) -> list[str]:
    """One line per searched folder, saying what was missing there."""
    lines = []
    for folder in folders:
        if not folder.is_dir():
            lines.append(f"  {folder} (no such folder)")
        else:
            lines.append(f"  {folder} (missing {', '.join(missing_of(folder))})")
    return lines


# --------------------------------------------------------------------------- tfds fallback


class _FallbackFailed(Exception):
    """tensorflow-datasets is not installed or could not provide the dataset."""


def _load_tfds(name: str) -> tuple[ImageSplit, ImageSplit]:
    """Loads the official train and test splits with tensorflow-datasets.

    Note that TFDS stores examples in its own (hashed) order, not the official file order,
    so a validation split taken from it holds different examples than from the files.
    """
    try:
        import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
    except Exception as e:  # ImportError, or a broken tensorflow install
        raise _FallbackFailed(
            f"tensorflow_datasets is not importable ({type(e).__name__}: {e})") from e
    try:
        splits = tfds.as_numpy(tfds.load(name, split=["train", "test"], batch_size=-1,
                                         as_supervised=True))
        (x_train, y_train), (x_test, y_test) = splits
    except Exception as e:  # download and preparation fail in many ways
        raise _FallbackFailed(f"tfds.load({name!r}) failed ({type(e).__name__}: {e})") from e
    source = f"tensorflow-datasets {name!r}"
    out = []
    for x, y in ((x_train, y_train), (x_test, y_test)):
        x, y = np.asarray(x), np.asarray(y)
        if x.ndim != 4 or x.dtype != np.uint8 or y.shape != x.shape[:1]:
            raise DataError(f"{source}: unexpected arrays {x.shape} {x.dtype} / "
                            f"{y.shape} {y.dtype}")
        y = y.astype(np.int32)
        _check_labels(y, source)
        out.append(ImageSplit(x, y))
    return out[0], out[1]


def _not_found(what: str, data_dir: pathlib.Path | None, searched: list[str], layout: str,
               reason: str) -> DataError:
    """The error for a dataset found neither on disk nor through tensorflow-datasets."""
    if data_dir is None:
        where = f"No data folder given (neither --data-dir / data_dir nor ${DATA_DIR_ENV} is set)."
    else:
        where = "Searched:\n" + "\n".join(searched)
    return DataError(
        f"{what} not found. {where}\n"
        f"Fix: pass --data-dir DIR or set {DATA_DIR_ENV}=DIR to a folder holding {layout}, "
        f"or `pip install 'jaxcomm[tfds]'` on a machine with internet.\n"
        f"(tensorflow-datasets (tfds) fallback: {reason})")


# --------------------------------------------------------------------------- loaders


def _split_validation(split: ImageSplit, validation_size: int, name: str
                      ) -> tuple[ImageSplit, ImageSplit]:
    """Splits off the last `validation_size` examples of a training split."""
    size = len(split.labels)
    validation_size = operator.index(validation_size)
    if not 0 <= validation_size <= size:
        raise ValueError(f"validation_size={validation_size} must be in [0, {size}] "
                         f"(the {name} training split has {size} examples)")
    cut = size - validation_size
    return (ImageSplit(split.images[:cut], split.labels[:cut]),
            ImageSplit(split.images[cut:], split.labels[cut:]))


def _dataset(name: str, train: ImageSplit, test: ImageSplit, validation_size: int) -> ImageDataset:
    train, validation = _split_validation(train, validation_size, name)
    return ImageDataset(name, train, validation, test, NUM_CLASSES)


def _read_mnist_split(images_path: pathlib.Path, labels_path: pathlib.Path) -> ImageSplit:
    """Reads one MNIST split from its IDX image and label files; images [M, 28, 28, 1]."""
    images = parse_idx_images(_read_bytes(images_path), str(images_path))
    labels = parse_idx_labels(_read_bytes(labels_path), str(labels_path))
    if images.shape[1:] != (28, 28):
        raise DataError(f"{images_path}: images are {images.shape[1]}x{images.shape[2]}, "
                        f"expected 28x28")
    if len(images) != len(labels):
        raise DataError(f"{images_path} holds {len(images)} images but {labels_path} holds "
                        f"{len(labels)} labels; the files do not belong together")
    _check_labels(labels, str(labels_path))
    return ImageSplit(images[..., None], labels.astype(np.int32))


def _read_mnist_files(files: dict[str, pathlib.Path]) -> tuple[ImageSplit, ImageSplit]:
    return (_read_mnist_split(files["train_images"], files["train_labels"]),
            _read_mnist_split(files["test_images"], files["test_labels"]))


def load_mnist(data_dir: str | os.PathLike | None = None, *,
               validation_size: int = 10_000) -> ImageDataset:
    """Loads MNIST: train/validation from the official 60k train split, test = official 10k.

    Files are read from the first of DIR, DIR/mnist, DIR/MNIST/raw holding the four official
    IDX files (gzipped or not), where DIR is `data_dir` or `$JAXCOMM_DATA_DIR`; without them,
    from tensorflow-datasets if installed.

    Args:
      data_dir: folder holding the files; None to use `$JAXCOMM_DATA_DIR`.
      validation_size: how many of the LAST official training examples form the validation
        split (10000 gives the thesis' 50k/10k split).

    Returns:
      An ImageDataset named "mnist"; images [M, 28, 28, 1] uint8, labels [M] int32.

    Raises:
      DataError: the files are malformed, or neither they nor tensorflow-datasets are available.
      ValueError: validation_size is outside [0, number of training examples].

    References:
      Thesis §3.2.2.1, §4.2.1.2 (50k/10k train/validation split).
    """
    root = resolve_data_dir(data_dir)
    if root is not None:
        files = find_mnist_files(root)
        if files is not None:
            return _dataset("mnist", *_read_mnist_files(files), validation_size)
    try:
        return _dataset("mnist", *_load_tfds("mnist"), validation_size)
    except _FallbackFailed as e:
        searched = [] if root is None else _describe_search(
            _mnist_candidates(root), lambda folder: _mnist_files_in(folder)[1])
        names = ", ".join(f"{n}.gz" for n in _MNIST_FILES.values())
        layout = (f"the four official MNIST files {names}"
                  " (or unzipped), directly or in mnist/ or MNIST/raw/ (e.g. ../shared/data, "
                  "which holds mnist/)")
        raise _not_found("MNIST", root, searched, layout, str(e)) from e


def _read_cifar_dir(folder: pathlib.Path, fmt: str) -> tuple[ImageSplit, ImageSplit]:
    """Reads the five training batches and the test batch of a CIFAR-10 folder."""
    splits = []
    for batch in _CIFAR_BATCHES:
        if fmt == "binary":
            path = folder / f"{batch}.bin"
            split = parse_cifar_binary(_read_bytes(path), str(path))
        else:
            path = folder / batch
            split = parse_cifar_python(_unpickle(path), str(path))
        if len(split.labels) != _CIFAR_RECORDS_PER_FILE:
            raise DataError(f"{path}: {len(split.labels)} records, expected "
                            f"{_CIFAR_RECORDS_PER_FILE} as in the official release; the file is "
                            f"truncated or not the official one")
        splits.append(split)
    train = ImageSplit(np.concatenate([s.images for s in splits[:-1]]),
                       np.concatenate([s.labels for s in splits[:-1]]))
    return train, splits[-1]


def load_cifar10(data_dir: str | os.PathLike | None = None, *,
                 validation_size: int = 0) -> ImageDataset:
    """Loads CIFAR-10: 50k train (minus validation) and the official 10k test.

    Files are read from DIR/cifar-10-batches-bin or DIR/cifar10/cifar-10-batches-bin (binary
    version, preferred) or DIR/cifar-10-batches-py or DIR/cifar10/cifar-10-batches-py (python
    version), where DIR is `data_dir` or `$JAXCOMM_DATA_DIR`; without them, from
    tensorflow-datasets if installed.

    Args:
      data_dir: folder holding the batches folder; None to use `$JAXCOMM_DATA_DIR`.
      validation_size: how many of the LAST training examples form the validation split.

    Returns:
      An ImageDataset named "cifar10"; images [M, 32, 32, 3] uint8 HWC RGB, labels [M] int32.

    Raises:
      DataError: the files are malformed, or neither they nor tensorflow-datasets are available.
      ValueError: validation_size is outside [0, number of training examples].
    """
    root = resolve_data_dir(data_dir)
    if root is not None:
        found = find_cifar10_dir(root)
        if found is not None:
            return _dataset("cifar10", *_read_cifar_dir(*found), validation_size)
    try:
        return _dataset("cifar10", *_load_tfds("cifar10"), validation_size)
    except _FallbackFailed as e:
        def missing_of(folder: pathlib.Path) -> list[str]:
            suffix = ".bin" if folder.name.endswith("-bin") else ""
            names = [f"{b}{suffix}" for b in _CIFAR_BATCHES]
            return [n for n in names if not (folder / n).is_file()]

        searched = [] if root is None else _describe_search(
            [root / sub for sub, _ in _CIFAR_LAYOUTS], missing_of)
        layout = ("cifar-10-batches-bin/ (official binary version: data_batch_1..5.bin, "
                  "test_batch.bin) or cifar-10-batches-py/ (official python version), "
                  "directly or in cifar10/ "
                  f"(for CIFAR-10 from ../shared/data: run `{_PREPARE_CIFAR}` once)")
        raise _not_found("CIFAR-10", root, searched, layout, str(e)) from e


def load_mnist_sample(*, validation_size: int = 1000) -> ImageDataset:
    """Loads the small real MNIST sample shipped with the package (no download, no data dir).

    The sample holds the first 5000 official training digits and the first 1000 official test
    digits (see jaxcomm/assets/README.md).

    Args:
      validation_size: how many of the last sample training digits form the validation split.

    Returns:
      An ImageDataset named "mnist_sample"; with the default, train = digits 0..3999,
      validation = 4000..4999, test = the 1000 test digits; images [M, 28, 28, 1] uint8,
      labels [M] int32.

    Raises:
      DataError: the sample file is missing or malformed (a broken install).
    """
    ref = importlib.resources.files("jaxcomm") / "assets" / _SAMPLE_FILE
    try:
        with importlib.resources.as_file(ref) as path, np.load(path) as npz:
            arrays = {k: npz[k] for k in ("x_train", "y_train", "x_test", "y_test")}
    except (OSError, KeyError, ValueError) as e:
        raise DataError(f"{ref}: cannot load the shipped MNIST sample ({type(e).__name__}: {e}); "
                        f"reinstall jaxcomm or rebuild it with write_mnist_sample") from e
    splits = []
    for x, y in (("x_train", "y_train"), ("x_test", "y_test")):
        images, labels = arrays[x], arrays[y]
        if images.ndim != 3 or images.shape[1:] != (28, 28) or images.dtype != np.uint8 \
                or labels.shape != images.shape[:1]:
            raise DataError(f"{ref}: {x} {images.shape} {images.dtype} / {y} {labels.shape} do not "
                            f"form [M, 28, 28] uint8 images with [M] labels")
        labels = labels.astype(np.int32)
        _check_labels(labels, f"{ref}:{y}")
        splits.append(ImageSplit(images[..., None], labels))
    return _dataset("mnist_sample", splits[0], splits[1], validation_size)


def stored_bytes_per_image(name: str) -> float:
    """Mean stored bytes of one image of dataset ``name`` (:data:`STORED_BYTES_PER_IMAGE`); raises ValueError naming
    the datasets with one for any other (synthetic test data has no stored encoding)."""
    if name not in STORED_BYTES_PER_IMAGE:
        raise ValueError(f"no stored encoding known for dataset {name!r}; known: {sorted(STORED_BYTES_PER_IMAGE)}")
    return STORED_BYTES_PER_IMAGE[name]


def padded_batches(split: ImageSplit, batch: int):
    """Yields ``(images, labels, weight)`` device batches of one fixed shape over ``split``.

    The last batch is padded with zeros of weight 0, so one compiled evaluation
    serves every batch: sum ``weight * correct`` and divide by ``len(split.labels)``.
    """
    import jax.numpy as jnp  # noqa: PLC0415

    size = len(split.labels)
    batch = min(batch, size)
    for start in range(0, size, batch):
        images, labels = split.images[start:start + batch], split.labels[start:start + batch]
        pad = batch - len(labels)
        weight = np.ones(batch, np.float32)
        if pad:
            images = np.concatenate([images, np.zeros((pad, *images.shape[1:]), images.dtype)])
            labels = np.concatenate([labels, np.zeros(pad, labels.dtype)])
            weight[-pad:] = 0
        yield jnp.asarray(images), jnp.asarray(labels), jnp.asarray(weight)


def accuracy_in_batches(correct, split: ImageSplit, batch: int = 2000) -> np.ndarray:
    """Accuracy (%) of ``correct(images, labels, weight) -> [...]`` weighted correct answers, summed over
    :func:`padded_batches` of ``split``: one compiled shape for every batch, padding weighted 0.

    ``correct`` may count for a whole population at once (``[S]`` counts give ``[S]`` accuracies).
    """
    counts = sum(correct(*b) for b in padded_batches(split, batch))
    return 100.0 * np.asarray(counts) / len(split.labels)


def load_dataset(name: str, data_dir: str | os.PathLike | None = None, **kwargs) -> ImageDataset:
    """Loads a dataset by name.

    Args:
      name: one of "mnist", "cifar10", "mnist_sample".
      data_dir: folder holding the files (ignored by "mnist_sample", which ships with the package).
      **kwargs: passed to the loader (e.g. validation_size).

    Returns:
      The ImageDataset.

    Raises:
      ValueError: unknown name.
    """
    if name == "mnist":
        return load_mnist(data_dir, **kwargs)
    if name == "cifar10":
        return load_cifar10(data_dir, **kwargs)
    if name == "mnist_sample":
        return load_mnist_sample(**kwargs)
    raise ValueError(f"dataset name={name!r} is unknown; expected one of "
                     f"{', '.join(DATASET_NAMES)}")


def write_mnist_sample(data_dir: str | os.PathLike, out_path: str | os.PathLike, *,
                       num_train: int = 5000, num_test: int = 1000) -> pathlib.Path:
    """Writes the first digits of the official MNIST train and test files to a compressed npz.

    Args:
      data_dir: folder holding the official MNIST files (as for `load_mnist`).
      out_path: the .npz file to write.
      num_train: how many of the first official training digits to keep.
      num_test: how many of the first official test digits to keep.

    Returns:
      out_path, holding x_train [num_train, 28, 28] uint8, y_train [num_train] uint8,
      x_test [num_test, 28, 28] uint8, y_test [num_test] uint8.

    Raises:
      DataError: the MNIST files are not in data_dir or are malformed.
    """
    root = resolve_data_dir(data_dir)
    files = None if root is None else find_mnist_files(root)
    if files is None:
        raise DataError(f"write_mnist_sample: no MNIST files in {root} "
                        f"(nor in its mnist/ or MNIST/raw/)")
    train, test = _read_mnist_files(files)
    out_path = pathlib.Path(out_path)
    np.savez_compressed(
        out_path,
        x_train=train.images[:num_train, ..., 0], y_train=train.labels[:num_train].astype(np.uint8),
        x_test=test.images[:num_test, ..., 0], y_test=test.labels[:num_test].astype(np.uint8))
    return out_path


# --------------------------------------------------------------------------- partitions


def _check_num_nodes(num_nodes: int, num_examples: int) -> int:
    num_nodes = operator.index(num_nodes)
    if not 1 <= num_nodes <= num_examples:
        raise ValueError(f"num_nodes={num_nodes} must be in [1, num_examples={num_examples}] "
                         f"so that every node holds at least one example")
    return num_nodes


def _check_labels_arg(labels: np.ndarray) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be a [M] integer array, got shape {labels.shape} "
                         f"dtype {labels.dtype}")
    return labels


def _pad_shards(shards: Sequence[np.ndarray]) -> Shards:
    """Packs N non-empty index arrays into [N, S] indices and mask, padding with first indices."""
    sizes = np.array([len(s) for s in shards], np.int32)
    width = int(sizes.max())
    indices = np.empty((len(shards), width), np.int32)
    for node, shard in enumerate(shards):
        indices[node, :] = shard[0]  # any real index of the node keeps padded gathers in-shard
        indices[node, :len(shard)] = shard
    mask = np.arange(width)[None, :] < sizes[:, None]
    return Shards(indices, mask, sizes)


def partition_iid(num_examples: int, num_nodes: int, *, seed: int) -> Shards:
    """Splits examples uniformly at random into N disjoint shards of near-equal size.

    Args:
      num_examples: M, the size of the training split.
      num_nodes: N, the number of nodes.
      seed: seed of the random permutation.

    Returns:
      Shards covering all M examples once; sizes differ by at most 1 (the first M mod N nodes
      hold one more).

    Raises:
      ValueError: num_nodes outside [1, num_examples].

    References:
      Thesis §2.2.2.1 (the data is split i.i.d. over the nodes).
    """
    num_examples = operator.index(num_examples)
    num_nodes = _check_num_nodes(num_nodes, num_examples)
    perm = np.random.default_rng(seed).permutation(num_examples)
    return _pad_shards(np.array_split(perm, num_nodes))


def partition_dirichlet(labels: np.ndarray, num_nodes: int, *, alpha: float, seed: int,
                        min_size: int = 1) -> Shards:
    """Splits examples into N disjoint label-skewed (non-IID) shards.

    For each class, the node proportions are drawn from Dirichlet(alpha * ones(N)) and the
    class's examples (shuffled) are cut in those proportions, the per-class scheme of
    Yurochkin et al. 2019 used by NIID-Bench (Li et al. 2022). Small alpha
    gives nodes dominated by few classes; large alpha approaches the i.i.d. split.

    Nodes left with fewer than `min_size` examples are then topped up by moving randomly
    chosen examples from the currently largest node (never taking it below min_size). This is
    deterministic and bounded, unlike re-drawing until every node is large enough, which can
    take very long for small alpha and many nodes; it moves at most N * min_size examples.

    Args:
      labels: [M] integer class labels of the training split.
      num_nodes: N, the number of nodes.
      alpha: Dirichlet concentration, > 0.
      seed: seed of all random draws.
      min_size: the fewest examples a node may hold, >= 1.

    Returns:
      Shards covering all M examples once, each shard in random order.

    Raises:
      ValueError: bad labels, num_nodes outside [1, M], alpha <= 0, or min_size outside
        [1, M // N].
    """
    labels = _check_labels_arg(labels)
    num_nodes = _check_num_nodes(num_nodes, len(labels))
    if not (np.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha={alpha} must be a finite number > 0 (Dirichlet concentration)")
    min_size = operator.index(min_size)
    if not 1 <= min_size <= len(labels) // num_nodes:
        raise ValueError(f"min_size={min_size} must be in [1, num_examples // num_nodes = "
                         f"{len(labels) // num_nodes}]")
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_nodes)]
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        proportions = rng.dirichlet(np.full(num_nodes, float(alpha)))
        cuts = (np.cumsum(proportions)[:-1] * len(members)).astype(np.int64)
        cuts = np.minimum(cuts, len(members))  # the cumsum may round above 1
        for node, chunk in enumerate(np.split(members, cuts)):
            parts[node].append(chunk)
    shards = [np.concatenate(p) for p in parts]
    sizes = np.array([len(s) for s in shards])
    while (sizes < min_size).any():
        taker, donor = int(np.argmin(sizes)), int(np.argmax(sizes))
        # A donor above min_size exists since M >= N * min_size.
        count = min(min_size - sizes[taker], sizes[donor] - min_size)
        moved = rng.choice(len(shards[donor]), size=count, replace=False)
        keep = np.ones(len(shards[donor]), bool)
        keep[moved] = False
        shards[taker] = np.concatenate([shards[taker], shards[donor][moved]])
        shards[donor] = shards[donor][keep]
        sizes[taker] += count
        sizes[donor] -= count
    return _pad_shards([rng.permutation(s) for s in shards])


def partition(labels: np.ndarray, num_nodes: int, *, scheme: str = "iid", alpha: float = 0.5,
              seed: int = 0) -> Shards:
    """Splits a training split over N nodes with the named scheme.

    Args:
      labels: [M] integer class labels of the training split.
      num_nodes: N, the number of nodes, in [1, M].
      scheme: "iid" (`partition_iid`) or "dirichlet" (`partition_dirichlet`).
      alpha: Dirichlet concentration, > 0 (checked for both schemes, used by "dirichlet").
      seed: seed of the split.

    Returns:
      The Shards.

    Raises:
      ValueError: a bad scheme, num_nodes or alpha; the message names the field.
    """
    labels = _check_labels_arg(labels)
    if scheme not in PARTITION_SCHEMES:
        raise ValueError(f"scheme={scheme!r} is unknown; expected one of "
                         f"{', '.join(PARTITION_SCHEMES)}")
    num_nodes = _check_num_nodes(num_nodes, len(labels))
    if not (np.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha={alpha} must be a finite number > 0 (Dirichlet concentration)")
    if scheme == "iid":
        return partition_iid(len(labels), num_nodes, seed=seed)
    return partition_dirichlet(labels, num_nodes, alpha=alpha, seed=seed)


def shard_label_counts(labels: np.ndarray, shards: Shards,
                       num_classes: int = NUM_CLASSES) -> np.ndarray:
    """Counts the examples of each class held by each node.

    Args:
      labels: [M] integer labels in [0, num_classes).
      shards: a partition of those M examples over N nodes.
      num_classes: K.

    Returns:
      [N, K] int64 counts; padded slots are not counted.
    """
    labels = np.asarray(labels)
    node = np.broadcast_to(np.arange(len(shards.sizes))[:, None], shards.indices.shape)
    counts = np.zeros((len(shards.sizes), num_classes), np.int64)
    np.add.at(counts, (node[shards.mask], labels[shards.indices[shards.mask]]), 1)
    return counts
