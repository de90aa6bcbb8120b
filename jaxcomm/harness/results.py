"""The results envelope every experiment writes, and reading it back.

``summary.json`` holds ``{"experiment", "preset", "command", "git_commit", "device",
"host_cpu", "wall_seconds", "rows", ...}`` (DESIGN.md, "Results"); per-evaluation curves sit beside it
as JSON lines (``curves.jsonl``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping
from typing import Any


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


# The instruction sets XLA:CPU picks its kernels by: two hosts that differ here may round differently (issue 58).
_SIMD_FLAGS = re.compile(r"avx\w*|amx\w*|fma\w*|f16c|sse4\w*")


def host_cpu(cpuinfo: str | None = None) -> str:
    """The host CPU's model and the vector instruction sets it offers, in words (``"Intel(R) Xeon(R) Processor;
    avx avx2 avx512f ..."``): same seed, same result holds per such host, so a summary names it.

    Args:
      cpuinfo: the text of ``/proc/cpuinfo`` (read when None; where there is none, the platform's words).
    """
    if cpuinfo is None:
        try:
            cpuinfo = pathlib.Path("/proc/cpuinfo").read_text()
        except OSError:
            return platform.processor() or platform.machine()
    fields = dict(line.split(":", 1) for line in cpuinfo.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    model = fields.get("model name") or platform.processor() or platform.machine()
    flags = sorted({flag for flag in fields.get("flags", "").split() if _SIMD_FLAGS.fullmatch(flag)})
    return f"{model}; {' '.join(flags)}" if flags else model


def invocation() -> list[str]:
    """How this process was started, as it would be typed again: ``python -m NAME`` for a module run with ``-m``
    (an experiment: ``python -m experiments.language``), else ``python SCRIPT``."""
    python = pathlib.Path(sys.executable).name
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:  # python -m NAME (a package runs its NAME.__main__)
        return [python, "-m", spec.name.removesuffix(".__main__")]
    return [python, sys.argv[0]]


def command_line() -> str:
    """This process' command line, as ``summary.json`` records it."""
    return " ".join(shlex.quote(arg) for arg in [*invocation(), *sys.argv[1:]])


def write_summary(
    out_dir: str | os.PathLike,
    *,
    experiment: str,
    preset: str,
    rows: Mapping[str, Mapping[str, Any]],
    wall_seconds: float,
    command: str | None = None,
    commit: str | None = None,
    **extra: Any,
) -> pathlib.Path:
    """Writes ``summary.json`` in the common envelope and returns its path.

    The file is written whole or not at all (a temporary file renamed over it), so an
    interrupted write never leaves a summary that looks complete.

    Args:
      out_dir: created if missing.
      experiment, preset: names.
      rows: ``{row: {metric: value}}`` as the issue names them.
      wall_seconds: the whole run (over all its parts, for a resumed run), kept at full precision: a table rounds
        it once, where it prints it.
      command: how to reproduce it; defaults to this process' command line.
      commit: ``git_commit``, the code that ran (read when the run started); by default the commit checked out
        now.
      **extra: more top-level keys (the config, notes, ...).
    """
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    envelope = {"experiment": experiment, "preset": preset, "command": command or command_line(),
                "git_commit": commit or git_commit(), "device": device_description(), "host_cpu": host_cpu(),
                "wall_seconds": float(wall_seconds), "rows": rows, **extra}
    path = out / "summary.json"
    partial = out / "summary.json.partial"
    partial.write_text(json.dumps(envelope, indent=2, default=jsonable) + "\n")
    partial.replace(path)
    return path


def write_jsonl(path: str | os.PathLike, records: Iterable[Mapping[str, Any]]) -> pathlib.Path:
    """Writes one JSON object per line (per-step curves beside a summary)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for record in records:
            f.write(json.dumps(record, default=jsonable) + "\n")
    return path


def config_from(cls: type, saved: Mapping[str, Any], **changes: Any) -> Any:
    """The config dataclass ``cls`` rebuilt from a summary's ``config`` (JSON's lists back into tuples, nested
    too), with ``changes``; fields ``cls`` no longer has (a summary of older code) are left out."""
    def tuples(value: Any) -> Any:
        return tuple(tuples(v) for v in value) if isinstance(value, list) else value

    fields = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: tuples(v) for k, v in saved.items() if k in fields} | changes)


def read_run(out_dir: str | os.PathLike) -> tuple[dict, list[dict]]:
    """``(summary, curves)`` of a results folder: what :func:`write_summary` and :func:`write_jsonl` wrote,
    the summary with its folder as ``out_dir``."""
    out = pathlib.Path(out_dir)
    summary = json.loads((out / "summary.json").read_text()) | {"out_dir": str(out_dir)}
    curves_path = out / "curves.jsonl"
    curves = ([json.loads(line) for line in curves_path.read_text().splitlines() if line.strip()]
              if curves_path.is_file() else [])
    return summary, curves


def read_runs_below(out_dir: str | os.PathLike, *, experiment: str | None = None) -> list[tuple[dict, list[dict]]]:
    """:func:`read_run` of every subfolder of ``out_dir`` holding a ``summary.json``, by folder name: the
    later runs a ``report`` merges (points a time budget skipped) or tables (variants). With ``experiment``,
    runs that name another experiment are left out (e.g. the chapter-2 recipe search, kept beside the rows it
    chose, has its own report)."""
    runs = [read_run(path.parent) for path in sorted(pathlib.Path(out_dir).glob("*/summary.json"))]
    return [run for run in runs if experiment is None or run[0].get("experiment", experiment) == experiment]


def changed_settings(config: Mapping[str, Any], other: Mapping[str, Any], *,
                     selection: Iterable[str] = ()) -> dict[str, Any]:
    """``{field: other's value}`` for the fields both runs' configs (summary ``config`` dicts) have, outside
    ``selection`` (the fields that pick what to run or how fast: rows, studies, budgets, lifts), that differ."""
    skip = set(selection)
    return {k: other[k] for k in sorted(config.keys() & other.keys()) if k not in skip and config[k] != other[k]}


def same_settings(config: Mapping[str, Any], other: Mapping[str, Any], *, selection: Iterable[str] = ()) -> bool:
    """Whether two runs' configs train alike: no :func:`changed_settings`."""
    return not changed_settings(config, other, selection=selection)


def jsonable(value: Any) -> Any:
    """``json.dumps``' ``default=``: dataclasses as dicts, numpy and jax arrays as lists."""
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if hasattr(value, "tolist"):  # numpy and jax arrays and scalars
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
