"""Training curves for TensorBoard, written while a run trains: every evaluation record as scalars::

    from jaxcomm import curves
    with curves.tensorboard("logs/mine"):          # then: tensorboard --logdir logs
        result = methods.train(method, config, model, dataset)

Inside the ``with``, every run :func:`jaxcomm.driver.train` trains (networks, baselines, sweeps, chapters 3 and 4)
writes each new evaluation record to ``<log_dir>/<its desc>/events.out.tfevents.*``: every number in the record
(nested keys joined by ``/``, e.g. ``collective_accuracy/negentropy``, ``counters/sent``; lists and strings left
out) at the record's ``step``. A sweep trained as one population writes each run apart
(``<desc>/run_<r>``). Experiments take ``--log-dir DIR`` (:mod:`jaxcomm.harness.cli`). A resumed run writes a
new events file beside the first; the records its checkpoint restored are not written again.

The event files are TensorBoard's format (TFRecord frames of ``Event`` protocol buffers with masked CRC-32C
checksums), written here with no dependency; :func:`read_events` reads them back.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import numbers
import os
import pathlib
import re
import socket
import struct
import time
from collections.abc import Iterator

import jax
import numpy as np

_WRITERS: contextvars.ContextVar[_Writers | None] = contextvars.ContextVar("jaxcomm_curves", default=None)


@contextlib.contextmanager
def tensorboard(log_dir: str | os.PathLike) -> Iterator[pathlib.Path]:
    """Writes the evaluation records of every run trained inside the ``with`` under ``log_dir`` (created);
    yields its path. Only process 0 of a multi-process run writes."""
    root = pathlib.Path(log_dir).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    writers = _Writers(root)
    token = _WRITERS.set(writers)
    try:
        yield root
    finally:
        _WRITERS.reset(token)
        writers.close()


def emit(desc: str | None, record: dict) -> None:
    """Writes one evaluation record of the run labelled ``desc`` to the enclosing :func:`tensorboard`, if any
    (called by the driver after each evaluation)."""
    writers = _WRITERS.get()
    if writers is None or jax.process_index() != 0:
        return
    step, shared = int(record["step"]), {k: v for k, v in record.items() if k != "runs"}
    run = run_name(desc)
    if isinstance(record.get("runs"), list):  # a population sweep: one curve per run
        for r, rec in enumerate(record["runs"]):
            writers.get(f"{run}/run_{r}").write(step, scalars(shared | rec))
    else:
        writers.get(run).write(step, scalars(shared))


def scalars(record: dict, prefix: str = "") -> dict[str, float]:
    """The finite numbers of a (nested) record, keyed by their path joined with ``/``; ``step``, booleans,
    lists and strings left out."""
    out: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= scalars(value, name + "/")
        elif isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_) and name != "step" \
                and math.isfinite(value):  # numpy scalars too
            out[name] = float(value)
    return out


def run_name(desc: str | None) -> str:
    """A folder name for a run's label (``desc``): runs of characters other than letters, digits, ``.``, ``_``,
    ``=`` and ``-`` become ``_``; no label: ``run``."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", desc).strip("_") if desc else "run"


# --------------------------------------------------------------------------- the event-file format


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``; ``crc32c(b"123456789") == 0xE3069283``."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _frame(payload: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the payload, its masked CRC."""
    length = struct.pack("<Q", len(payload))
    return length + _masked(length) + payload + _masked(payload)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:  # a length-delimited field (wire type 2)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _event(wall_time: float, step: int, *, file_version: str | None = None,
           values: dict[str, float] | None = None) -> bytes:
    """An ``Event``: wall_time (1, double), step (2, int64), file_version (3) or summary (5) of
    ``Summary.Value``s (tag 1, simple_value 2 as float)."""
    out = b"\x09" + struct.pack("<d", wall_time) + b"\x10" + _varint(step & 0xFFFFFFFFFFFFFFFF)
    if file_version is not None:
        out += _field(3, file_version.encode())
    if values:
        summary = b"".join(_field(1, _field(1, tag.encode()) + b"\x15" + struct.pack("<f", value))
                           for tag, value in values.items())
        out += _field(5, summary)
    return out


class EventWriter:
    """One TensorBoard event file in ``directory`` (created), flushed after every write."""

    def __init__(self, directory: pathlib.Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"events.out.tfevents.{time.time():.6f}.{socket.gethostname()}.{os.getpid()}"
        self._file = open(self.path, "wb")  # noqa: SIM115  (closed by close())
        self._file.write(_frame(_event(time.time(), 0, file_version="brain.Event:2")))
        self._file.flush()

    def write(self, step: int, values: dict[str, float]) -> None:
        """Scalars at ``step``."""
        if values:
            self._file.write(_frame(_event(time.time(), step, values=values)))
            self._file.flush()

    def close(self) -> None:
        self._file.close()


class _Writers:
    """An event writer per run folder, opened at its first record."""

    def __init__(self, root: pathlib.Path):
        self.root, self._open = root, {}

    def get(self, run: str) -> EventWriter:
        if run not in self._open:
            self._open[run] = EventWriter(self.root / run)
        return self._open[run]

    def close(self) -> None:
        for writer in self._open.values():
            writer.close()


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protocol buffer message: varints as ints, fixed64/32 and length-delimited
    fields as bytes."""
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _read_varint(data, at)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, at = data[at:at + size], at + size
        elif wire == 2:
            size, at = _read_varint(data, at)
            value, at = data[at:at + size], at + size
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, value


def read_events(path: str | os.PathLike) -> list[tuple[int, str, float]]:
    """The scalars of one event file, ``(step, tag, value)`` in the order written; every frame's checksums
    are checked (ValueError on a corrupt file)."""
    data, at, out = pathlib.Path(path).read_bytes(), 0, []
    while at < len(data):
        length_bytes = data[at:at + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        if data[at + 8:at + 12] != _masked(length_bytes):
            raise ValueError(f"{path}: bad length checksum at byte {at}")
        payload = data[at + 12:at + 12 + length]
        if data[at + 12 + length:at + 16 + length] != _masked(payload):
            raise ValueError(f"{path}: bad payload checksum at byte {at}")
        at += 16 + length
        fields = dict(_fields(payload))
        step = fields.get(2, 0)
        for number, summary in _fields(payload):
            if number != 5:
                continue
            for _, value in _fields(summary):
                parts = dict(_fields(value))
                out.append((step, parts[1].decode(), struct.unpack("<f", parts[2])[0]))
    return out
