"""The pace benchmark's report: ``table.md`` from a run's ``summary.json`` (no plots)."""

from __future__ import annotations

import json
import pathlib

ROUNDS = 5


def _computed(row: dict) -> str:
    """Which nodes a tick computes: the eager loop only the due ones; a stacked step all, or the due ones
    gathered ``capacity`` at a time. Empty for a run made before every node was computed (no ``capacity``)."""
    if "capacity" not in row:
        return ""
    if row["step_loop"] == "eager":
        return " the due ones |"
    return " all |" if row["capacity"] >= row["num_nodes"] else f" the due ones, {row['capacity']} at a time |"


def table(summary: dict) -> str:
    computed = "capacity" in summary["rows"][0]
    lines = ["| workload | N | cluster | lift | resolution (of the fastest step) |" + (" nodes computed |" * computed)
             + " nodes due per tick | lockstep node-steps/s | own pace useful node-steps/s | ratio |",
             "|---" * (9 + computed) + "|"]
    for r in summary["rows"]:
        lines.append(f"| {r['workload']} | {r['num_nodes']} | {r['cluster']} | {r['backend']}/{r['step_loop']} | "
                     f"{r['resolution_seconds'] * 1e3:.1f} ms ({r['resolution_of_fastest_step']:.2f}) |{_computed(r)} "
                     f"{r['due_share']:.2f} | {r['lockstep_node_steps_per_second']:,.0f} | "
                     f"{r['own_pace_useful_node_steps_per_second']:,.0f} | {r['ratio']:.2f}x |")
    head = (f"Measured on {summary['device']}, commit {summary['git_commit']}, {summary['wall_seconds']:.0f} s: "
            f"`{summary['command']}`. Rounds interleaved, medians of {ROUNDS}.\n\n")
    return head + "\n".join(lines) + "\n"


def write_report(out: pathlib.Path | str, *, plots: bool = True) -> None:
    """``table.md`` from ``summary.json`` (no plots)."""
    out = pathlib.Path(out)
    (out / "table.md").write_text(table(json.loads((out / "summary.json").read_text())))
