"""Plumbing every experiment script shares: presets, ``key=value`` overrides, results.

An experiment file defines a frozen dataclass config (validated in
``__post_init__``), a dict of presets (``smoke``, ``cpu``, ``thesis``) and
``run(config) -> dict``; its ``__main__`` is one call to :func:`main`. Results go
to ``results/<experiment>/summary.json`` in the envelope DESIGN.md fixes:
``{"experiment", "preset", "command", "git_commit", "device", "wall_seconds",
"rows"}``, with per-step curves beside it as JSON lines.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _parse_value(name: str, text: str, current: Any) -> Any:
    """Parses ``text`` as the type of the field's current value; ``none`` is None."""
    if text.lower() == "none":
        return None
    try:
        if isinstance(current, bool):
            if text.lower() not in _TRUE + _FALSE:
                raise ValueError(f"expected one of {_TRUE + _FALSE}")
            return text.lower() in _TRUE
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
        if isinstance(current, tuple):
            items = [item for item in text.split(",") if item.strip()]
            kind = type(current[0]) if current else int
            return tuple(_parse_value(name, item.strip(), kind()) for item in items)
        if current is None:
            return json.loads(text) if text[:1] in "-0123456789[{\"" else text
        return text
    except ValueError as error:
        raise ValueError(f"override {name}={text!r}: cannot parse as {type(current).__name__} ({error})") from None


def apply_overrides(config: Any, pairs: Iterable[str]) -> Any:
    """Returns ``config`` with ``key=value`` overrides applied (and re-validated).

    Args:
      config: a dataclass instance.
      pairs: strings ``"field=value"``; values are parsed as the field's current
        type (ints, floats, bools, comma-separated tuples, strings; ``none``).

    Raises:
      ValueError: a malformed pair, an unknown field (the message lists the
        fields) or a value the config's own validation rejects.
    """
    fields = {f.name for f in dataclasses.fields(config)}
    changes = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"override {pair!r} must look like field=value")
        if name not in fields:
            raise ValueError(f"unknown config field {name!r}; fields are: {', '.join(sorted(fields))}")
        changes[name] = _parse_value(name, text, getattr(config, name))
    return dataclasses.replace(config, **changes)


def git_commit(cwd: str | os.PathLike | None = None) -> str | None:
    """The checked-out commit (with ``+dirty`` if the tree has changes), or None."""
    try:
        run = lambda *args: subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
        commit = run("rev-parse", "HEAD").stdout.strip()
        dirty = run("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def device_description() -> str:
    """The accelerator JAX runs on, or the CPU, in words (for results envelopes)."""
    import jax  # noqa: PLC0415  (keeps this module importable without initialising a backend)

    devices = jax.devices()
    kinds = sorted({d.device_kind for d in devices})
    return (f"{len(devices)} x {'/'.join(kinds)} ({devices[0].platform}), host {platform.machine()} "
            f"with {os.cpu_count()} CPU cores, jax {jax.__version__}")


def write_summary(
    out_dir: str | os.PathLike,
    *,
    experiment: str,
    preset: str,
    rows: Mapping[str, Mapping[str, Any]],
    wall_seconds: float,
    command: str | None = None,
    **extra: Any,
) -> pathlib.Path:
    """Writes ``summary.json`` in the common envelope and returns its path.

    Args:
      out_dir: created if missing.
      experiment, preset: names.
      rows: ``{row: {metric: value}}`` as the issue names them.
      wall_seconds: the whole run.
      command: how to reproduce it; defaults to this process' command line.
      **extra: more top-level keys (the config, notes, ...).
    """
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if command is None:
        command = " ".join(shlex.quote(arg) for arg in [pathlib.Path(sys.executable).name, *sys.argv])
    envelope = {"experiment": experiment, "preset": preset, "command": command, "git_commit": git_commit(),
                "device": device_description(), "wall_seconds": round(wall_seconds, 1), "rows": rows, **extra}
    path = out / "summary.json"
    path.write_text(json.dumps(envelope, indent=2, default=_jsonable) + "\n")
    return path


def write_jsonl(path: str | os.PathLike, records: Iterable[Mapping[str, Any]]) -> pathlib.Path:
    """Writes one JSON object per line (per-step curves beside a summary)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for record in records:
            f.write(json.dumps(record, default=_jsonable) + "\n")
    return path


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if hasattr(value, "tolist"):  # numpy and jax arrays and scalars
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def main(
    argv: Sequence[str] | None,
    *,
    experiment: str,
    presets: Mapping[str, Callable[[], Any]],
    run: Callable[[Any], Mapping[str, Any]],
    description: str,
) -> int:
    """The command line of an experiment: ``--preset``, ``--out``, ``field=value`` overrides.

    ``run(config)`` returns a dict with ``rows`` (and optionally ``curves``, a
    list of records, and any other keys for the envelope); this writes them to
    ``--out`` (default ``results/<experiment>``). A bad preset, override or
    config value is reported before anything runs, with exit status 2.
    """
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu", choices=sorted(presets), help="configuration preset (default cpu)")
    parser.add_argument("--out", default=None, help=f"results folder (default results/{experiment})")
    parser.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("overrides", nargs="*", metavar="field=value", help="override config fields")
    args = parser.parse_args(argv)
    try:
        config = apply_overrides(presets[args.preset](), args.overrides)
    except ValueError as error:
        parser.error(str(error))
    if args.show_config:
        print(json.dumps(dataclasses.asdict(config), indent=2))
        return 0
    start = time.perf_counter()
    result = dict(run(config))
    wall = time.perf_counter() - start
    out_dir = pathlib.Path(args.out or pathlib.Path("results") / experiment)
    curves = result.pop("curves", None)
    rows = result.pop("rows")
    path = write_summary(out_dir, experiment=experiment, preset=args.preset, rows=rows, wall_seconds=wall,
                         config=dataclasses.asdict(config), **result)
    if curves is not None:
        write_jsonl(out_dir / "curves.jsonl", curves)
    print(f"wrote {path} ({wall:.0f} s)")
    return 0
