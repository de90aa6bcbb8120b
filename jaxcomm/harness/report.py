"""Report helpers: table cells, ``table.md``, and plots that never cost a run its table.

An experiment's ``write_report(out_dir, *, plots=True)`` reads the run back
(:func:`jaxcomm.harness.results.read_run`), writes ``table.md`` with :func:`write_table`
first, then draws its plots through :func:`draw`, which turns a failing plot (no
matplotlib, a bad curve) into a one-line warning.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Callable
from typing import Any


def pyplot():
    """``matplotlib.pyplot`` on the headless Agg backend (imported on first use)."""
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


def mean_sd_cell(row: dict, key: str, digits: int = 1, missing: str = "-") -> str:
    """``row[key]`` as "mean ± sd" when the row averages several seeds (``per_seed``, ``{key}_sd``), else
    :func:`cell` of the value (single-seed runs)."""
    if len(row.get("per_seed") or ()) > 1 and row.get(f"{key}_sd") is not None and row.get(key) is not None:
        return f"{cell(row[key], digits)} ± {cell(row[f'{key}_sd'], digits)}"
    return cell(row.get(key), digits, missing)


def heading(title: str, summary: dict, script: str) -> list[str]:
    """A table's first lines: ``# title``, the run's command, preset, wall time, device and commit, and the
    command that redraws it (``python experiments/<script> report <out_dir>``)."""
    return [f"# {title}", "",
            f"Command: `{summary['command']}`  ",
            f"Preset `{summary['preset']}`, wall time {summary['wall_seconds']:.0f} s on {summary['device']}; commit "
            f"`{summary['git_commit']}`.  ",
            f"Redraw: `python experiments/{script} report {pathlib.Path(summary.get('out_dir', '.'))}`",
            ""]


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


def draw(**plots: Callable[[], Any]) -> bool:
    """Calls each plotting function; one that fails prints a one-line warning and the rest still run.

    Args:
      **plots: ``name=function`` pairs, e.g. ``fig3_1=lambda: plot_fig3_1(curves, out / "fig3_1.png")``.

    Returns:
      Whether every plot was drawn.
    """
    ok = True
    for name, plot in plots.items():
        try:
            plot()
        except Exception as error:  # noqa: BLE001  (a plot is never worth the run's table)
            message = " ".join(str(error).split())
            print(f"warning: plot {name} not drawn ({type(error).__name__}: {message})", file=sys.stderr)
            ok = False
    return ok
