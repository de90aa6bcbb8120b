"""The command line every experiment script shares: presets, ``field=value`` overrides, where runs go.

An experiment (a package ``experiments/NAME/``) defines a frozen dataclass config (validated in
``__post_init__``), a dict of presets (``smoke``, ``cpu``, ``thesis``), ``run(config) -> dict`` and
``write_report(out_dir, *, plots=True)``; its ``main`` is one call to :func:`cli`, run by its ``__main__``
from the repository root::

    python -m experiments.NAME --preset smoke [--out DIR] [--data-dir DIR] [field=value ...]
    python -m experiments.NAME report [DIR] [--no-plots]

What it guarantees:

- A run writes to a fresh folder, ``runs/<experiment>/<preset>-<YYYYmmdd-HHMMSS>``, unless
  ``--out`` names one; it refuses a folder holding another preset's ``summary.json`` unless
  ``--force``, so committed results are replaced only on purpose.
- A run that can checkpoint (``run`` takes ``checkpoints=``) keeps them in ``<out>/checkpoints``
  (created when first needed) beside ``config.json``: the preset, config, original command and
  the wall time of the parts so far. A rerun into a folder holding checkpoints refuses unless
  ``--resume`` (continue; the summary then reports the total wall time and the original
  command) or ``--fresh`` (delete them).
- Exit statuses: 0 done; 1 a stopped run (non-finite or diverging loss) or a failed report;
  2 a bad flag, preset, override, config value or missing data, in one line (the traceback
  with ``--debug``), leaving no empty folder behind; 130 interrupted (SIGINT or SIGTERM),
  with the command that resumes it, and no ``summary.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import os
import pathlib
import shlex
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from jaxcomm.harness import results
from jaxcomm.validation import did_you_mean, scalar

RUNS = "runs"  # default root of run folders, relative to the working directory
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
_STATE = "config.json"  # beside the checkpoints: preset, config, command, wall time so far


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
            return tuple(scalar(item.strip()) for item in items)  # an empty default says no item type
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
            raise ValueError(f"unknown config field {name!r}; fields are: {', '.join(sorted(fields))}"
                             f"{did_you_mean(name, fields)}")
        changes[name] = _parse_value(name, text, getattr(config, name))
    return dataclasses.replace(config, **changes)


def default_out_dir(experiment: str, preset: str, *, root: str | os.PathLike = RUNS,
                    now: float | None = None) -> pathlib.Path:
    """A fresh ``<root>/<experiment>/<preset>-<YYYYmmdd-HHMMSS>`` (``-2``, ``-3``, ... if taken)."""
    base = pathlib.Path(root) / experiment / f"{preset}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}"
    path, k = base, 1
    while path.exists():
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    return path


def newest_run(experiment: str, *, root: str | os.PathLike = RUNS, preset: str | None = None,
               unfinished: bool = False) -> pathlib.Path | None:
    """The run folder under ``<root>/<experiment>`` written last, or None.

    Args:
      preset: only folders of this preset (``<preset>-<time>``).
      unfinished: folders holding checkpoints of an interrupted run instead of a ``summary.json``.
    """
    marker = f"checkpoints/{_STATE}" if unfinished else "summary.json"
    pattern = f"{preset}-*/{marker}" if preset else f"*/{marker}"
    found = sorted(pathlib.Path(root, experiment).glob(pattern), key=lambda p: (p.stat().st_mtime, str(p)))
    return found[-1].parents[marker.count("/")] if found else None


def out_dir_of(argv: Sequence[str], experiment: str) -> pathlib.Path | None:
    """The ``--out`` folder named in ``argv``, else the newest run of ``experiment`` under ``runs/``."""
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--out" and i + 1 < len(args):
            return pathlib.Path(args[i + 1])
        if arg.startswith("--out="):
            return pathlib.Path(arg.split("=", 1)[1])
    return newest_run(experiment)


class _Refused(Exception):
    """A run the command line refuses before it starts: one line, exit status 2."""


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _has_checkpoints(folder: pathlib.Path) -> bool:
    """Whether ``folder`` holds saved training state (anything beside the run's ``config.json``)."""
    return folder.is_dir() and any(p.name != _STATE for p in folder.iterdir())


@contextlib.contextmanager
def interrupts(seen: list[int]):
    """Within the block, SIGINT and SIGTERM raise KeyboardInterrupt and are recorded in ``seen``.

    A run that swallows the KeyboardInterrupt (a training loop without checkpoints stops and
    returns what it has) is still known to be interrupted, so no summary claims it complete.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        seen.append(signum)
        raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _module_command(experiment: str) -> str:
    """How an experiment is started from the repository root: ``python -m experiments.<experiment>``."""
    return f"python -m experiments.{experiment}"


def _command(argv: Sequence[str] | None, experiment: str, args: Sequence[str]) -> str:
    """How to run ``args`` again: this process' command when run from the shell (``python -m experiments.NAME``
    for an experiment), else the experiment's module."""
    start = results.invocation() if argv is None else [pathlib.Path(sys.executable).name, "-m",
                                                         f"experiments.{experiment}"]
    return " ".join(shlex.quote(a) for a in [*start, *args])


def _resume_args(args: Sequence[str], out_dir: pathlib.Path) -> list[str]:
    """``args`` without ``--out``/``--fresh``/``--resume``/``--force``, plus ``--out out_dir --resume``."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not (arg.startswith("--out=") or arg in ("--fresh", "--resume", "--force")):
            kept.append(arg)
    return [*kept, "--out", str(out_dir), "--resume"]


@dataclasses.dataclass
class _Run:
    """One run of an experiment from the command line: what :func:`main` settled before it trains, and the clock
    of the part it trains."""

    experiment: str
    args: argparse.Namespace
    argv: list[str]  # the arguments, as typed
    given: Sequence[str] | None  # main's argv (None: this process' own command line)
    config: Any
    out_dir: pathlib.Path
    resumable: bool
    resume: bool
    state: dict  # the saved state of the run it resumes ({} if none)
    created: bool = False  # out_dir did not exist before this run
    before: float = 0.0  # wall seconds of the parts before this one
    start: float = 0.0  # perf_counter when this part started training

    @property
    def ckpt_dir(self) -> pathlib.Path:
        return self.out_dir / "checkpoints"


def _fail(experiment: str, message: str) -> int:
    print(f"{experiment}: error: {message}", file=sys.stderr)
    return 2


def main(
    argv: Sequence[str] | None,
    *,
    experiment: str,
    presets: Mapping[str, Callable[[], Any]],
    run: Callable[..., Mapping[str, Any]],
    description: str,
    write_report: Callable[..., None] | None = None,
) -> int:
    """Runs an experiment from the command line; returns the exit status (see the module docstring).

    ``run(config)`` returns a dict with ``rows`` (and optionally ``curves``, a list of
    records, and any other keys for the envelope), written to ``<out>/summary.json`` and
    ``<out>/curves.jsonl``. If ``run`` takes a ``checkpoints`` keyword, it gets a
    :class:`jaxcomm.checkpoint.Checkpoints` in ``<out>/checkpoints``, saved every
    ``--checkpoint-every`` steps and on SIGINT/SIGTERM, and removed once the results are
    written. After a run, ``write_report(out_dir)`` draws the table and plots (unless
    ``JAXCOMM_NO_REPORT=1``, as tests set).
    """
    given = argv
    argv = list(sys.argv[1:] if argv is None else argv)
    resumable = "checkpoints" in inspect.signature(run).parameters
    args = _parser(experiment, presets, description, write_report, resumable=resumable).parse_args(argv)
    resume, fresh = resumable and args.resume, resumable and args.fresh
    try:
        _apply_flags(args)
        config = apply_overrides(presets[args.preset](), args.overrides)
        if args.show_config:
            print(json.dumps(dataclasses.asdict(config), indent=2, default=results.jsonable))
            return 0
        out_dir = _out_dir_for(args, experiment, resumable=resumable, resume=resume, fresh=fresh)
        state = _check_out_dir(out_dir, args, config, resumable=resumable, resume=resume, fresh=fresh)
    except (ValueError, _Refused) as error:
        if args.debug:
            traceback.print_exc()
        return _fail(experiment, _one_line(error))
    job = _Run(experiment, args, argv, given, config, out_dir, resumable, resume, state)
    return _run_and_write(job, run, write_report)


def _parser(experiment: str, presets: Mapping[str, Callable[[], Any]], description: str, write_report, *,
            resumable: bool) -> argparse.ArgumentParser:
    """The command line of an experiment (``--checkpoint-every``, ``--resume``, ... where its run is
    ``resumable``)."""
    parser = argparse.ArgumentParser(prog=_module_command(experiment), description=description,
                                     epilog=_epilog(experiment, presets, write_report),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu", choices=sorted(presets), help="configuration preset (default cpu)")
    parser.add_argument("--out", default=None,
                        help=f"results folder (default a fresh {RUNS}/{experiment}/<preset>-<YYYYmmdd-HHMMSS>)")
    parser.add_argument("--force", action="store_true",
                        help="write into --out even if it holds the results of another preset")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="folder holding the datasets (sets $JAXCOMM_DATA_DIR for this run)")
    parser.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a data or config error")
    parser.add_argument("--log-dir", default=None, metavar="DIR",
                        help="also write every run's evaluation curves for TensorBoard under DIR "
                             "(tensorboard --logdir DIR; jaxcomm.curves)")
    parser.add_argument("--deterministic", action="store_true",
                        help="bitwise-repeatable GPU kernels (slower on a GPU; CPU runs already are)")
    if resumable:
        parser.add_argument("--resume", action="store_true",
                            help="continue the interrupted run in <out>/checkpoints (default --out: the newest "
                                 "interrupted run of this preset)")
        parser.add_argument("--fresh", action="store_true",
                            help="delete the checkpoints of an interrupted run in <out> and start again")
        parser.add_argument("--keep-checkpoints", action="store_true",
                            help="keep <out>/checkpoints once the results are written (trained states to load with "
                                 "jaxcomm.methods.load)")
        parser.add_argument("--checkpoint-every", type=int, default=1000, metavar="STEPS",
                            help="save the training state every STEPS steps (default 1000; also on Ctrl-C/SIGTERM)")
    parser.add_argument("overrides", nargs="*", metavar="field=value", help="override config fields")
    return parser


def _apply_flags(args: argparse.Namespace) -> None:
    """``--deterministic`` and ``--data-dir``, set for this process before the config is built."""
    if args.deterministic:
        from jaxcomm import speed  # noqa: PLC0415

        try:
            speed.deterministic()
        except RuntimeError as error:
            raise _Refused(str(error)) from None
    if args.data_dir is not None:
        from jaxcomm.data import DATA_DIR_ENV  # noqa: PLC0415

        if not pathlib.Path(args.data_dir).expanduser().is_dir():
            raise _Refused(f"--data-dir {args.data_dir}: not an existing folder")
        os.environ[DATA_DIR_ENV] = str(pathlib.Path(args.data_dir).expanduser().absolute())


def _out_dir_for(args: argparse.Namespace, experiment: str, *, resumable: bool, resume: bool,
                 fresh: bool) -> pathlib.Path:
    """The folder a run writes: ``--out``, else the newest interrupted run under ``--resume``, else a fresh one."""
    if resumable and args.checkpoint_every < 1:
        raise _Refused(f"--checkpoint-every must be an integer >= 1, got {args.checkpoint_every}")
    if resume and fresh:
        raise _Refused("--resume continues the checkpoints --fresh deletes; pass one of them")
    if args.out is not None:
        out_dir = pathlib.Path(args.out)
    elif resume:
        out_dir = newest_run(experiment, preset=args.preset, unfinished=True)
        if out_dir is None:
            raise _Refused(f"--resume: no interrupted {args.preset} run under {RUNS}/{experiment}; "
                           "name its folder with --out")
    else:
        out_dir = default_out_dir(experiment, args.preset)
    return out_dir.expanduser()


def _run_and_write(job: _Run, run: Callable[..., Mapping[str, Any]], write_report) -> int:
    """Trains ``job`` (its checkpoints set up first, where it can resume), then writes its summary, curves and
    report; the exit status."""
    typed = _command(job.given, job.experiment, job.argv)
    resumed = bool(job.resume and job.state)
    # the command that started the checkpoints defines the run; each one that resumed them is recorded beside it
    command = job.state.get("command") or typed
    resumed_with = [*job.state.get("resumed_with", []), typed] if resumed else []
    # the code that ran: read before it runs (an edit made during a long run is not the run's); a resumed run
    # keeps its first part's commit, with this part's beside it where they differ
    now = results.git_commit()
    first = job.state.get("git_commit", now) if resumed else now
    commit = first if now == first else f"{first}; resumed at {now}"
    job.before = float(job.state.get("wall_seconds", 0.0))
    job.created = not job.out_dir.exists()
    kwargs = {}
    if job.resumable:
        kwargs["checkpoints"] = _checkpoints(job, command=command, first=first, resumed_with=resumed_with)
    result = _train(job, run, kwargs)
    if isinstance(result, int):
        return result
    wall = job.before + time.perf_counter() - job.start
    curves = result.pop("curves", None)
    rows = result.pop("rows")
    path = results.write_summary(job.out_dir, experiment=job.experiment, preset=job.args.preset, rows=rows,
                                 wall_seconds=wall, command=command, commit=commit,
                                 config=dataclasses.asdict(job.config),
                                 **({"resumed_with": resumed_with} if resumed_with else {}), **result)
    if curves is not None:
        results.write_jsonl(job.out_dir / "curves.jsonl", curves)
    if job.resumable and not job.args.keep_checkpoints:
        shutil.rmtree(job.ckpt_dir, ignore_errors=True)
    elif job.resumable:
        print(f"kept the trained states in {job.ckpt_dir} (jaxcomm.harness.frontier.load_run(out, row, seed) loads a "
              "frontier's row; jaxcomm.methods.load a run's folder)")
    print(f"wrote {path} ({wall:.0f} s)")
    if write_report is not None and os.environ.get("JAXCOMM_NO_REPORT") != "1":
        return _report(write_report, job.out_dir, experiment=job.experiment, debug=job.args.debug)
    return 0


def _checkpoints(job: _Run, *, command: str, first: str | None, resumed_with: list[str]):
    """The run's :class:`jaxcomm.checkpoint.Checkpoints` in ``<out>/checkpoints``, beside the ``config.json``
    that names the run (preset, config, command, wall time so far, commit)."""
    from jaxcomm.checkpoint import Checkpoints  # noqa: PLC0415  (orbax is slow to import)

    state = {"preset": job.args.preset, "config": _plain(job.config), "command": command, "wall_seconds": job.before,
             "git_commit": first, **({"resumed_with": resumed_with} if resumed_with else {})}
    job.ckpt_dir.mkdir(parents=True, exist_ok=True)
    (job.ckpt_dir / _STATE).write_text(json.dumps(state, indent=1) + "\n")
    # every checkpoint records the wall time so far: a run killed outright (kill -9) resumes counting it
    return Checkpoints(job.ckpt_dir, every=job.args.checkpoint_every, resume=job.resume, on_save=lambda: (
        _save_state(job.ckpt_dir, wall_seconds=job.before + time.perf_counter() - job.start)))


def _clean_up(job: _Run) -> None:
    """Removes what this run created and left empty: a checkpoints folder without checkpoints, the folder."""
    if job.resumable and not _has_checkpoints(job.ckpt_dir):
        shutil.rmtree(job.ckpt_dir, ignore_errors=True)
    if job.created and job.out_dir.is_dir() and not any(job.out_dir.iterdir()):
        job.out_dir.rmdir()


def _train(job: _Run, run: Callable[..., Mapping[str, Any]], kwargs: dict) -> dict | int:
    """``run(config, **kwargs)``'s result, or the exit status of a run interrupted (130), stopped (1) or refused
    for its data or a value (2)."""
    from jaxcomm import curves  # noqa: PLC0415
    from jaxcomm.data import DataError  # noqa: PLC0415

    seen: list[int] = []
    job.start = time.perf_counter()
    try:
        with interrupts(seen), (curves.tensorboard(job.args.log_dir) if job.args.log_dir else contextlib.nullcontext()):
            result = dict(run(job.config, **kwargs))
        if seen:
            raise KeyboardInterrupt(f"signal {seen[0]}")
    except KeyboardInterrupt as error:  # jaxcomm's Interrupted (checkpoint saved) is one
        return _interrupted(job, error, seen)
    except FloatingPointError as error:  # jaxcomm's NonFiniteLoss and divergence stops
        if job.resumable and _has_checkpoints(job.ckpt_dir):
            _save_state(job.ckpt_dir, wall_seconds=job.before + time.perf_counter() - job.start)
        _clean_up(job)
        print(f"\n{job.experiment}: stopped: {error}", file=sys.stderr)
        return 1
    except (DataError, ValueError) as error:
        _clean_up(job)
        if job.args.debug:
            traceback.print_exc()
        return _fail(job.experiment, _one_line(error) + ("" if job.args.debug else " (--debug shows the traceback)"))
    except BaseException:
        _clean_up(job)
        raise
    return result


def _interrupted(job: _Run, error: KeyboardInterrupt, seen: list[int]) -> int:
    """Says how an interrupted run ends (resume it from its checkpoints, or run it again) and returns 130."""
    wall = time.perf_counter() - job.start
    what = "interrupted" + (f" by signal {seen[0]}" if seen else "") + f" after {wall:.0f} s"
    if job.resumable and _has_checkpoints(job.ckpt_dir):
        _save_state(job.ckpt_dir, wall_seconds=job.before + wall)
        detail = f" ({error})" if str(error) and not str(error).startswith("signal") else ""
        print(f"\n{job.experiment}: {what}{detail}; no results written.\n"
              f"resume with: {_command(job.given, job.experiment, _resume_args(job.argv, job.out_dir))}",
              file=sys.stderr)
    else:
        _clean_up(job)
        print(f"\n{job.experiment}: {what}, before any checkpoint; no results written.\n"
              f"run again with: {_command(job.given, job.experiment, job.argv)}", file=sys.stderr)
    return 130


def _check_out_dir(out_dir: pathlib.Path, args: argparse.Namespace, config: Any, *, resumable: bool,
                   resume: bool, fresh: bool) -> dict:
    """Refuses a folder this run must not write into; returns the saved state of the run it resumes ({} if none).

    Deletes the checkpoints there under ``--fresh``.
    """
    summary = out_dir / "summary.json"
    if summary.is_file() and not args.force:
        try:
            preset = json.loads(summary.read_text()).get("preset")
        except (OSError, ValueError):
            preset = None
        if preset != args.preset:
            raise _Refused(f"{out_dir} holds the results of preset {preset!r} (summary.json); choose another --out "
                           f"or pass --force to replace them")
    ckpt_dir = out_dir / "checkpoints"
    if not resumable:
        return {}
    if resume:
        if not _has_checkpoints(ckpt_dir) or not (ckpt_dir / _STATE).is_file():
            raise _Refused(f"--resume: no checkpoints in {ckpt_dir}")
        state = json.loads((ckpt_dir / _STATE).read_text())
        if (state.get("preset"), state.get("config")) != (args.preset, _plain(config)):
            raise _Refused(f"--resume: the checkpoints in {ckpt_dir} were made with another config "
                           f"({ckpt_dir / _STATE}); rerun with the same preset and overrides, or pass --fresh")
        return state
    if _has_checkpoints(ckpt_dir):
        if not fresh:
            raise _Refused(f"{ckpt_dir} holds the checkpoints of an unfinished run: pass --resume to continue it "
                           f"or --fresh to delete them")
        shutil.rmtree(ckpt_dir)
    return {}


def _plain(config: Any) -> Any:
    """The config as JSON would give it back (tuples as lists), to compare with a saved one."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=results.jsonable))


def _save_state(ckpt_dir: pathlib.Path, **changes: Any) -> None:
    path = ckpt_dir / _STATE
    state = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps(state | changes, indent=1) + "\n")


def _report(write_report: Callable[..., None], out_dir: pathlib.Path | None, *, experiment: str,
            debug: bool = False, plots: bool = True) -> int:
    """Draws a run's table and plots; a failure is one line (traceback with ``debug``) and exit status 1."""
    try:
        if plots:
            write_report(out_dir)
        else:
            write_report(out_dir, plots=False)
    except Exception as error:  # noqa: BLE001  (the results are on disk; say how to redraw them)
        if debug:
            traceback.print_exc()
        print(f"{experiment}: report failed: {type(error).__name__}: {_one_line(error)}; the results are in "
              f"{out_dir}, redraw with: {_module_command(experiment)} report {out_dir} --debug", file=sys.stderr)
        return 1
    return 0


def _epilog(experiment: str, presets: Mapping[str, Callable[[], Any]], write_report) -> str:
    """``--help``'s end: every config field with the default preset's value, and the ``report`` subcommand."""
    preset = "cpu" if "cpu" in presets else next(iter(presets))
    config = presets[preset]()
    lines = [f"config fields (field=value; the {preset} preset's values, --show-config for another preset's):"]
    lines += [f"  {f.name} = {getattr(config, f.name)!r}" for f in dataclasses.fields(config)] \
        if dataclasses.is_dataclass(config) else []
    if write_report is not None:
        lines += ["", f"{_module_command(experiment)} report [DIR] [--no-plots] redraws a run's table and plots "
                  "from its summary.json (default DIR: the newest run)"]
    return "\n".join(lines)


def cli(
    argv: Sequence[str] | None,
    *,
    experiment: str,
    presets: Mapping[str, Callable[[], Any]],
    run: Callable[..., Mapping[str, Any]],
    description: str,
    write_report: Callable[..., None] | None = None,
) -> int:
    """:func:`main`, plus ``report [DIR] [--no-plots] [--debug]``, which redraws a run's table and plots
    from its files (default DIR: the newest run under ``runs/<experiment>``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["report"] and write_report is not None:
        return report_command(args[1:], experiment=experiment, write_report=write_report)
    status = main(argv, experiment=experiment, presets=presets, run=run, description=description,
                  write_report=write_report)
    if status == 130 and argv is None:
        exit_interrupted()
    return status


def report_command(args: Sequence[str], *, experiment: str, write_report: Callable[..., None]) -> int:
    """``report [DIR] [--no-plots] [--debug]`` (``args``: what follows "report"): redraws a run's table and plots
    from its files (default DIR: the newest run under ``runs/<experiment>``); the exit status."""
    flags = {a for a in args if a.startswith("--")}
    folders = [a for a in args if not a.startswith("--")]
    if flags - {"--no-plots", "--debug"} or len(folders) > 1:
        print(f"usage: {_module_command(experiment)} report [DIR] [--no-plots] [--debug]", file=sys.stderr)
        return 2
    out_dir = pathlib.Path(folders[0]) if folders else newest_run(experiment)
    if out_dir is None or not (out_dir / "summary.json").is_file():
        where = out_dir or f"{RUNS}/{experiment}"
        print(f"{experiment}: error: no run to report in {where} (no summary.json)", file=sys.stderr)
        return 2
    return _report(write_report, out_dir, experiment=experiment, debug="--debug" in flags,
                   plots="--no-plots" not in flags)


def exit_interrupted() -> None:
    """Ends the process with status 130 at once, without the interpreter's teardown.

    A KeyboardInterrupt raised inside JAX's dispatch leaves the runtime in a state in which
    the ordinary teardown can crash (SIGSEGV, status 139, after the message was printed);
    everything worth keeping (checkpoints, ``config.json``) is already on disk.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)
