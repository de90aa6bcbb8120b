"""The command line every experiment script shares: presets, ``field=value`` overrides, where runs go.

An experiment file defines a frozen dataclass config (validated in ``__post_init__``), a
dict of presets (``smoke``, ``cpu``, ``thesis``), ``run(config) -> dict`` and
``write_report(out_dir, *, plots=True)``; its ``__main__`` is one call to :func:`cli`::

    python experiments/NAME.py --preset smoke [--out DIR] [--data-dir DIR] [field=value ...]
    python experiments/NAME.py report [DIR] [--no-plots]

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


def _command(argv: Sequence[str] | None, experiment: str, args: Sequence[str]) -> str:
    """How to run ``args`` again: this process' script when run from the shell, else the experiment's file."""
    script = sys.argv[0] if argv is None else f"experiments/{experiment}.py"
    return " ".join(shlex.quote(a) for a in [pathlib.Path(sys.executable).name, script, *args])


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
    parser = argparse.ArgumentParser(prog=f"{experiment}.py", description=description,
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
    resumable = "checkpoints" in inspect.signature(run).parameters
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
    args = parser.parse_args(argv)
    resume, fresh = resumable and args.resume, resumable and args.fresh
    fail = lambda message: print(f"{experiment}: error: {message}", file=sys.stderr) or 2

    try:
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
        config = apply_overrides(presets[args.preset](), args.overrides)
        if args.show_config:
            print(json.dumps(dataclasses.asdict(config), indent=2, default=results.jsonable))
            return 0
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
        out_dir = out_dir.expanduser()
        state = _check_out_dir(out_dir, args, config, resumable=resumable, resume=resume, fresh=fresh)
    except (ValueError, _Refused) as error:
        if args.debug:
            traceback.print_exc()
        return fail(_one_line(error))

    typed = _command(given, experiment, argv)
    # the command that started the checkpoints defines the run; each one that resumed them is recorded beside it
    command = state.get("command") or typed
    resumed_with = [*state.get("resumed_with", []), typed] if resume and state else []
    # the code that ran: read before it runs (an edit made during a long run is not the run's); a resumed run
    # keeps its first part's commit, with this part's beside it where they differ
    now = results.git_commit()
    first = state.get("git_commit", now) if resume and state else now
    commit = first if now == first else f"{first}; resumed at {now}"
    before = float(state.get("wall_seconds", 0.0))
    created = not out_dir.exists()
    ckpt_dir = out_dir / "checkpoints"
    kwargs = {}
    if resumable:
        from jaxcomm.checkpoint import Checkpoints  # noqa: PLC0415  (orbax is slow to import)

        state = {"preset": args.preset, "config": _plain(config), "command": command, "wall_seconds": before,
                 "git_commit": first, **({"resumed_with": resumed_with} if resumed_with else {})}
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        (ckpt_dir / _STATE).write_text(json.dumps(state, indent=1) + "\n")
        # every checkpoint records the wall time so far: a run killed outright (kill -9) resumes counting it
        kwargs["checkpoints"] = Checkpoints(ckpt_dir, every=args.checkpoint_every, resume=resume, on_save=lambda: (
            _save_state(ckpt_dir, wall_seconds=before + time.perf_counter() - start)))

    def clean_up() -> None:
        """Removes what this run created and left empty: a checkpoints folder without checkpoints, the folder."""
        if resumable and not _has_checkpoints(ckpt_dir):
            shutil.rmtree(ckpt_dir, ignore_errors=True)
        if created and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()

    from jaxcomm import curves  # noqa: PLC0415
    from jaxcomm.data import DataError  # noqa: PLC0415

    seen: list[int] = []
    start = time.perf_counter()
    try:
        with interrupts(seen), (curves.tensorboard(args.log_dir) if args.log_dir else contextlib.nullcontext()):
            result = dict(run(config, **kwargs))
        if seen:
            raise KeyboardInterrupt(f"signal {seen[0]}")
    except KeyboardInterrupt as error:  # jaxcomm's Interrupted (checkpoint saved) is one
        wall = time.perf_counter() - start
        what = "interrupted" + (f" by signal {seen[0]}" if seen else "") + f" after {wall:.0f} s"
        if resumable and _has_checkpoints(ckpt_dir):
            _save_state(ckpt_dir, wall_seconds=before + wall)
            detail = f" ({error})" if str(error) and not str(error).startswith("signal") else ""
            print(f"\n{experiment}: {what}{detail}; no results written.\n"
                  f"resume with: {_command(given, experiment, _resume_args(argv, out_dir))}", file=sys.stderr)
        else:
            clean_up()
            print(f"\n{experiment}: {what}, before any checkpoint; no results written.\n"
                  f"run again with: {_command(given, experiment, argv)}", file=sys.stderr)
        return 130
    except FloatingPointError as error:  # jaxcomm's NonFiniteLoss and divergence stops
        if resumable and _has_checkpoints(ckpt_dir):
            _save_state(ckpt_dir, wall_seconds=before + time.perf_counter() - start)
        clean_up()
        print(f"\n{experiment}: stopped: {error}", file=sys.stderr)
        return 1
    except (DataError, ValueError) as error:
        clean_up()
        if args.debug:
            traceback.print_exc()
        return fail(_one_line(error) + ("" if args.debug else " (--debug shows the traceback)"))
    except BaseException:
        clean_up()
        raise
    wall = before + time.perf_counter() - start
    curves = result.pop("curves", None)
    rows = result.pop("rows")
    path = results.write_summary(out_dir, experiment=experiment, preset=args.preset, rows=rows, wall_seconds=wall,
                                 command=command, commit=commit, config=dataclasses.asdict(config),
                                 **({"resumed_with": resumed_with} if resumed_with else {}), **result)
    if curves is not None:
        results.write_jsonl(out_dir / "curves.jsonl", curves)
    if resumable and not args.keep_checkpoints:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    elif resumable:
        print(f"kept the trained states in {ckpt_dir} (jaxcomm.methods.load reads a run's folder)")
    print(f"wrote {path} ({wall:.0f} s)")
    if write_report is not None and os.environ.get("JAXCOMM_NO_REPORT") != "1":
        return _report(write_report, out_dir, experiment=experiment, debug=args.debug)
    return 0


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
              f"{out_dir}, redraw with: python experiments/{experiment}.py report {out_dir} --debug", file=sys.stderr)
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
        lines += ["", f"python experiments/{experiment}.py report [DIR] [--no-plots] redraws a run's table and plots "
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
        print(f"usage: {experiment}.py report [DIR] [--no-plots] [--debug]", file=sys.stderr)
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
