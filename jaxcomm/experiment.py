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
import inspect
import json
import os
import pathlib
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _parse_value(name: str, text: str, current: Any) -> Any:
    """Parses ``text`` as the type of the field's current value; ``none`` is None, but for a
    string field, where it is the string (``norm=none``)."""
    if text.lower() == "none" and not isinstance(current, str):
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
            if current:
                return tuple(_parse_value(name, item.strip(), type(current[0])()) for item in items)
            return tuple(_guess_value(item.strip()) for item in items)  # an empty default says no item type
        if current is None:
            return json.loads(text) if text[:1] in "-0123456789[{\"" else text
        return text
    except ValueError as error:
        raise ValueError(f"override {name}={text!r}: cannot parse as {type(current).__name__} ({error})") from None


def _guess_value(text: str) -> int | float | str:
    """An int, else a float, else the string itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


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


def read_run(out_dir: str | os.PathLike) -> tuple[dict, list[dict]]:
    """``(summary, curves)`` of a results folder: what :func:`write_summary` and :func:`write_jsonl` wrote,
    the summary with its folder as ``out_dir``."""
    out = pathlib.Path(out_dir)
    summary = json.loads((out / "summary.json").read_text()) | {"out_dir": str(out_dir)}
    curves = [json.loads(line) for line in (out / "curves.jsonl").read_text().splitlines() if line.strip()]
    return summary, curves


def read_runs_below(out_dir: str | os.PathLike) -> list[tuple[dict, list[dict]]]:
    """:func:`read_run` of every subfolder of ``out_dir`` holding a ``summary.json``, by folder name: the
    later runs a ``report`` merges (points a time budget skipped) or tables (variants)."""
    return [read_run(path.parent) for path in sorted(pathlib.Path(out_dir).glob("*/summary.json"))]


def changed_settings(config: Mapping[str, Any], other: Mapping[str, Any], *,
                     selection: Iterable[str] = ()) -> dict[str, Any]:
    """``{field: other's value}`` for the fields both runs' configs (summary ``config`` dicts) have, outside
    ``selection`` (the fields that pick what to run or how fast: rows, studies, budgets, lifts), that differ."""
    skip = set(selection)
    return {k: other[k] for k in sorted(config.keys() & other.keys()) if k not in skip and config[k] != other[k]}


def same_settings(config: Mapping[str, Any], other: Mapping[str, Any], *, selection: Iterable[str] = ()) -> bool:
    """Whether two runs' configs train alike: no :func:`changed_settings`."""
    return not changed_settings(config, other, selection=selection)


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

    If ``run`` takes a ``checkpoints`` keyword, it gets a
    :class:`jaxcomm.checkpoint.Checkpoints` in ``<out>/checkpoints``: training
    state is saved every ``--checkpoint-every`` steps and on SIGINT/SIGTERM
    (exit status 130), ``--resume`` continues from there, and the folder is
    removed once the run has written its results. A non-finite loss stops the
    run with exit status 1 and a message naming the node and step.
    """
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu", choices=sorted(presets), help="configuration preset (default cpu)")
    parser.add_argument("--out", default=None, help=f"results folder (default results/{experiment})")
    parser.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    resumable = "checkpoints" in inspect.signature(run).parameters
    if resumable:
        parser.add_argument("--resume", action="store_true",
                            help="continue from the checkpoints of an interrupted run in <out>/checkpoints")
        parser.add_argument("--checkpoint-every", type=int, default=1000, metavar="STEPS",
                            help="save the training state every STEPS steps (default 1000; also on Ctrl-C/SIGTERM)")
    parser.add_argument("overrides", nargs="*", metavar="field=value", help="override config fields")
    args = parser.parse_args(argv)
    try:
        config = apply_overrides(presets[args.preset](), args.overrides)
    except ValueError as error:
        parser.error(str(error))
    if args.show_config:
        print(json.dumps(dataclasses.asdict(config), indent=2))
        return 0
    out_dir = pathlib.Path(args.out or pathlib.Path("results") / experiment)
    kwargs = {}
    if resumable:
        if args.checkpoint_every < 1:
            parser.error(f"--checkpoint-every must be an integer >= 1, got {args.checkpoint_every}")
        from jaxcomm.checkpoint import Checkpoints  # noqa: PLC0415  (orbax is slow to import)

        saved_config = out_dir / "checkpoints" / "config.json"
        resolved = {"preset": args.preset, "config": json.loads(json.dumps(dataclasses.asdict(config),
                                                                             default=_jsonable))}
        if args.resume:
            if not saved_config.is_file():
                parser.error(f"--resume: no checkpoints in {out_dir / 'checkpoints'}")
            if json.loads(saved_config.read_text()) != resolved:
                parser.error(f"--resume: the checkpoints in {out_dir / 'checkpoints'} were made with another "
                             f"config ({saved_config}); rerun with the same preset and overrides, or without --resume")
        else:
            shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)
        saved_config.parent.mkdir(parents=True, exist_ok=True)
        saved_config.write_text(json.dumps(resolved, indent=1))
        kwargs["checkpoints"] = Checkpoints(out_dir / "checkpoints", every=args.checkpoint_every, resume=args.resume)
    from jaxcomm.runner import Interrupted, NonFiniteLoss  # noqa: PLC0415

    start = time.perf_counter()
    try:
        result = dict(run(config, **kwargs))
    except Interrupted as error:
        command = " ".join(shlex.quote(arg) for arg in ["python", *sys.argv, *([] if args.resume else ["--resume"])])
        print(f"\n{error}\nresume with: {command}", file=sys.stderr)
        return 130
    except NonFiniteLoss as error:
        print(f"\nstopped: {error}", file=sys.stderr)
        return 1
    wall = time.perf_counter() - start
    curves = result.pop("curves", None)
    rows = result.pop("rows")
    path = write_summary(out_dir, experiment=experiment, preset=args.preset, rows=rows, wall_seconds=wall,
                         config=dataclasses.asdict(config), **result)
    if curves is not None:
        write_jsonl(out_dir / "curves.jsonl", curves)
    if resumable:
        shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)
    print(f"wrote {path} ({wall:.0f} s)")
    return 0


def out_dir_of(argv: Sequence[str], experiment: str) -> pathlib.Path:
    """The ``--out`` folder named in ``argv`` (default ``results/<experiment>``)."""
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--out" and i + 1 < len(args):
            return pathlib.Path(args[i + 1])
        if arg.startswith("--out="):
            return pathlib.Path(arg.split("=", 1)[1])
    return pathlib.Path("results") / experiment


def cli(
    argv: Sequence[str] | None,
    *,
    experiment: str,
    presets: Mapping[str, Callable[[], Any]],
    run: Callable[..., Mapping[str, Any]],
    description: str,
    write_report: Callable[[pathlib.Path], None] | None = None,
) -> int:
    """:func:`main`, plus ``report [DIR]``, which redraws tables and plots from a run's files.

    After a successful run, ``write_report(out_dir)`` draws them too (unless
    ``JAXCOMM_NO_REPORT=1``, as the tests set).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["report"] and write_report is not None:
        write_report(pathlib.Path(argv[1]) if len(argv) > 1 else out_dir_of([], experiment))
        return 0
    status = main(argv, experiment=experiment, presets=presets, run=run, description=description)
    if (status == 0 and write_report is not None and "--show-config" not in argv
            and os.environ.get("JAXCOMM_NO_REPORT") != "1"):
        write_report(out_dir_of(argv, experiment))
    return status


def pyplot():
    """``matplotlib.pyplot`` on the headless Agg backend (imported on first use: plotting is optional)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def cell(value: Any, digits: int = 1, missing: str = "-") -> str:
    """A table cell: ``missing`` for None, floats to ``digits`` places, ints with thousands separators."""
    if value is None:
        return missing
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def write_table(out_dir: pathlib.Path, table: str) -> pathlib.Path:
    """Writes ``table.md``: the generated ``table`` plus the hand-written ``notes.md`` beside it, if any.

    The notes (how a run went, how to read it) survive ``report`` redraws.
    """
    notes = pathlib.Path(out_dir) / "notes.md"
    text = table.rstrip("\n") + "\n"
    if notes.is_file():
        text += "\n" + notes.read_text().strip("\n") + "\n"
    path = pathlib.Path(out_dir) / "table.md"
    path.write_text(text)
    return path
