"""The benchmark's report (``python -m experiments.benchmark``): ``table.md`` drawn from a run's ``summary.json``.

:func:`format_table` draws the rows' node-steps per second by backend, auto's first choice, the parts of a step and
PyTorch beside them (:mod:`.step_parts`), the sweeps, the method sweeps and the scale suite; sections
a summary lacks are left out, so older runs redraw as they were. :func:`write_report` writes it beside the
hand-written ``notes.md``. The merges (:func:`merge_sweeps`, :func:`merge_method_sweeps`, :func:`merge_scale`) put
a suite measured in a separate run into another run's summary, naming that run, and redraw its table. Nothing here
imports JAX.
"""

from __future__ import annotations

import json
import pathlib

from jaxcomm.harness import report

from .bench import BACKENDS, COLD_PLANNED_STEPS


def write_report(out_dir: str | pathlib.Path, *, plots: bool = True) -> None:
    """Writes table.md from the summary.json in ``out_dir``, the hand-written notes.md beside it kept (the benchmark
    draws no plots)."""
    summary = json.loads((pathlib.Path(out_dir) / "summary.json").read_text())
    report.write_table(pathlib.Path(out_dir), "# Benchmark: node-steps per second by backend\n\n"
                       + format_table(summary) + "\n")


def format_table(summary: dict) -> str:
    """The tables of ``summary`` (a benchmark run's, merged runs' included), as markdown."""
    peak = summary["matmul_gflops"]
    lines = [
        f"Machine: {summary['device']}; float32 matmul {peak:.1f} GFLOP/s (2048^2, best of 5).",
        f"Command: `{summary['command']}`; wall time {summary['wall_seconds']:.0f} s.",
    ]
    if summary.get("interrupted"):
        lines.append(f"**Interrupted** before it ended; not run: {', '.join(summary['not_run']) or 'none'}.")
    for other in summary.get("rows_runs", []):  # rows measured again in another run, merged by --merge-rows
        lines.append(f"Rows {', '.join(other['rows'])} are from a later run that replaced this one's: "
                     f"`{other['command']}` (commit `{other['git_commit']}`, wall time {other['wall_seconds']:.0f} s, "
                     f"float32 matmul {other['matmul_gflops']:.1f} GFLOP/s that day); its own table: "
                     f"`{other['out_dir']}/table.md`.")
    if summary["rows"]:
        lines += _rows_table(summary["rows"]) + _cold_table(summary["rows"])
        platform = jaxcomm_platform(summary["device"])
        lines += peer_table(summary["rows"], platform, command=summary.get("command") or "") + parts_table(
            summary["rows"], platform)
    sweeps = summary.get("sweeps") or {}
    if sweeps:
        lines += _sweeps_table(sweeps)
    if summary.get("sweeps_run"):  # the sweeps of another run, merged into this summary by --merge-sweeps
        other = summary["sweeps_run"]
        lines += ["", f"The sweeps were measured in a separate run, `{other['command']}` (commit "
                  f"`{other['git_commit']}`, wall time {other['wall_seconds']:.0f} s, float32 matmul "
                  f"{other['matmul_gflops']:.1f} GFLOP/s that day); its own table: `{other['out_dir']}/table.md`."]
    if summary.get("method_sweeps"):  # merged by --merge-method-sweeps
        other = summary["method_sweeps_run"]
        lines += ["", "Method sweeps (issue 37): 8 seeds of a method on 10 student-MLP nodes, 1,000 steps, as one "
                  "`jaxcomm.methods.sweep` against 8 `jaxcomm.methods.train` calls, each arm in a fresh process; "
                  f"measured in `{other['command']}` (commit `{other['git_commit']}`, wall time "
                  f"{other['wall_seconds']:.0f} s, float32 matmul {other['matmul_gflops']:.1f} GFLOP/s that day).",
                  *_sweeps_table(summary["method_sweeps"])[2:]]
    if summary.get("scale"):
        lines += _scale_table(summary["scale"])
    if summary.get("scale_run"):  # merged by --merge-scale
        other = summary["scale_run"]
        lines += ["", f"The scale suite was measured in a separate run, `{other['command']}` (commit "
                  f"`{other['git_commit']}`, wall time {other['wall_seconds']:.0f} s, on {other['device']}); its own "
                  f"table: `{other['out_dir']}/table.md`."]
    return "\n".join(lines)


def _rows_table(rows: dict) -> list[str]:
    # runs before jaxcomm.flops took XLA's cost analysis of a node-step
    counted = ("FLOPs of a node-step's matrix products and convolutions (counted from its jaxpr, "
               "jaxcomm.flops)" if any(r.get("flops_counted") == "jaxpr" for r in rows.values())
               else "XLA FLOPs of a node-step")
    eager = ("eager",) if any("eager_node_steps_per_s" in r for r in rows.values()) else ()
    # the batched-convolution backend, measured since issue 41 (an older table has no such column)
    backends = (*BACKENDS, *(("patches",) if any("patches_node_steps_per_s" in r for r in rows.values()) else ()))
    # runs before node states were held apart within a chunk (and timed in longer calls) have no eager_chunk
    chunks = sorted({r["eager_chunk"] for r in rows.values() if "eager_chunk" in r})
    rounds = max((len(r["rounds"]["loop"]) for r in rows.values() if "rounds" in r), default=0)
    apart = (f", node states held apart within a chunk and stacked at its end; timed in calls of "
             f"{'/'.join(map(str, chunks))} steps" if chunks else "")
    # since unrolled dispatched steps hold them apart too (their chunks timed as long)
    unrolled = sorted({r["unrolled_dispatch_chunk"] for r in rows.values() if "unrolled_dispatch_chunk" in r})
    apart += (f"; `unrolled` with one call per step holds them apart too, timed in calls of "
              f"{'/'.join(map(str, unrolled))} steps" if unrolled else "")
    lines = [
        "",
        "Node-steps per second (one node's forward + backward + Adam on a minibatch, as the engine runs it: "
        "each backend's better step loop, `lax.scan` over steps or one jitted call per step); `loop` is the "
        "thesis' way (each node-step a separate call, nodes one after another)"
        + ("; `eager` the engine's own per-node loop (backend `loop`, step loop `eager`: one compiled call per "
           f"node inside the network step{apart}), a candidate of `auto`" if eager else "")
        + ". `x loop` = best / loop" + (f" (both measured again in {rounds} interleaved rounds, the best of each)"
                                         if rounds else "") + ". "
        f"`% peak` = {counted} x best rate / matmul rate. `inbox share` = the inbox's pop + push "
        "alone over a whole step (true labels over a ring); `with inbox` = the drop in node-steps/s when the "
        "nodes exchange true labels (consumed minibatches included).",
        "",
        f"| row | loop |{' eager |' if eager else ''} {' | '.join(backends)} | best | x loop | images/s |"
        " % peak | inbox share | with inbox | state MB/node | peak RSS MB |",
        "|---|" + "---|" * (9 + len(backends) + len(eager)),
    ]
    fmt = lambda v: "-" if v is None else f"{v:.1f}"
    for name, r in rows.items():
        if "error" in r:
            lines.append(f"| {name} | failed |" + " |" * (8 + len(backends) + len(eager)))
            continue
        loop = r.get("loop_node_steps_per_s")
        ratio = r["best_node_steps_per_s"] / loop if loop else None
        frac = r.get("fraction_of_matmul_peak")
        share, drop = r.get("inbox_only_share_of_step"), r.get("inbox_share_of_step")
        lines.append(
            f"| {name} | {fmt(loop)} | " + " | ".join(fmt(r.get(f"{b}_node_steps_per_s")) for b in (*eager, *backends))
            + f" | {r['best_backend']}/{r['best_step_loop']} | {'-' if ratio is None else f'{ratio:.2f}'} | "
            + f"{r['images_per_s']:.0f} | "
            + ("-" if frac is None else f"{100 * frac:.0f}%") + " | "
            + ("-" if share is None else f"{100 * share:.2f}%") + " | "
            + ("-" if drop is None else f"-{100 * drop:.1f}%") + f" | {r['state_mb_per_node']:.2f} | "
            + f"{r['peak_rss_mb']:.0f} |")
    return lines


def _cold_table(rows: dict) -> list[str]:
    """auto's first choice per row (issue 40), for the rows that measured it (none before it)."""
    measured = {name: r["cold_choice"] for name, r in rows.items() if "cold_choice" in r}
    if not measured:
        return []
    rounds = any("of_fastest_once" in cold for cold in measured.values())  # summaries before the rounds lack it
    ratio = ("the picked pair's node-steps/s over the fastest pair's, both measured again in interleaved rounds (the "
             "best of each; 1.00x where auto picked the fastest); `once` = the same ratio from the row's single "
             "timing of each pair (the fastest of a dozen single timings is partly the luckiest)." if rounds else
             "the picked pair's node-steps/s over the fastest pair's, both timed alike in the row.")
    lines = ["", f"A first run's choice (issue 40): `backend=\"auto\", step_loop=\"auto\"` from an empty cache, for a "
             f"{COLD_PLANNED_STEPS:,}-step run (the row's first measurement: nothing of its model compiled yet); "
             "`choosing s` = the seconds building the network took, timing its candidates included; `of fastest` = "
             + ratio, "",
             "| row | auto picked | choosing s | node-steps/s | of fastest |" + (" once |" if rounds else ""),
             "|---|---|---|---|---|" + ("---|" if rounds else "")]
    for name, cold in measured.items():
        once = f" {cold['of_fastest_once']:.2f}x |" if "of_fastest_once" in cold else " - |"
        lines.append(f"| {name} | {'/'.join(cold['pair'])} | {cold['seconds']:.1f} | "
                     f"{cold.get('node_steps_per_s', 0):.1f} | {cold.get('of_fastest', 0):.2f}x |"
                     + (once if rounds else ""))
    return lines


def _sweeps_table(sweeps: dict) -> list[str]:
    other = any("other_mode" in r for r in sweeps.values())  # summaries before issue 37's both-modes arms lack it
    lines = ["", "Sweeps: R networks of N nodes (seeds 0..R-1, true labels over a ring), wall clock from the "
              "call to the results (compilation and evaluations included), as one `jaxcomm.sweep.train_networks` "
              "against R `train_network` calls one by one, each arm in a fresh process. `counters equal`: the "
              "sweep reproduced every run's message counters exactly. Rows named after a method (e.g. "
              "`diloco_h50_...`) sweep that method (`jaxcomm.methods.sweep` against R `jaxcomm.methods.train` calls); "
              "their counters are the byte ledger's records." + (
                  " `other mode s`: the same sweep in the mode `mode=\"auto\"` did not pick (population or "
                  "sequential), in a process of its own, and the picked mode's seconds over it (above 1x: the mode "
                  "passed over was the faster)." if other else ""), "",
              "| sweep | runs x nodes | steps | mode | sweep s | one by one s | speed-up |"
              + (" other mode s |" if other else "") + " counters equal | max accuracy diff (pts) |",
              "|---|" + "---|" * (9 if other else 8)]
    for name, r in sweeps.items():
        if "error" in r:
            lines.append(f"| {name} | failed |" + " |" * (8 if other else 7))
            continue
        lines.append(f"| {name} | {r['runs']} x {r['num_nodes']} | {r['num_steps']} | {r['mode']} | "
                     f"{r['sweep_s']:.1f} | {r['one_by_one_s']:.1f} | {r['speedup']:.2f}x | "
                     + (f"{_other_mode(r)} | " if other else "")
                     + f"{'yes' if r['counters_equal'] else 'NO'} | {r['max_accuracy_difference']:.2g} |")
    return lines


def _other_mode(row: dict) -> str:
    """The other mode's seconds, its name, and its speed against the picked one (">1x": the pick was slower)."""
    if "other_mode_s" in row:
        return f"{row['other_mode_s']:.1f} ({row['other_mode']}, {row['sweep_s'] / row['other_mode_s']:.2f}x)"
    return f"failed ({row['other_mode']})" if "other_mode" in row else "-"


def _scale_table(scale: dict) -> list[str]:
    lines = ["", "Scale: the largest population that trains in the memory budget. Each N trains a few steps (true "
             "labels over a ring, evaluations on 1,000 test images included) in a fresh process; its peak is the "
             "process' peak RSS on CPU (`host_rss`), the device's peak bytes in use on an accelerator (`device`). "
             "The least-squares line through the peaks (intercept + MB per node x N) is extrapolated to the budget "
             "(`--memory-gib` on CPU, the device's limit on an accelerator); `confirmed`: a run at 90 % of that N "
             "(`--scale-confirm`), and its peak.", "",
             "| scale | steps | N | peak MB at each N | MB per node | intercept MB | largest N in budget |"
             " confirmed (N, peak MB) |", "|---|" + "---|" * 7]
    for name, r in scale.items():
        if "error" in r:
            lines.append(f"| {name} | failed |" + " |" * 6)
            continue
        predicted = "-" if r["predicted_max_nodes"] is None else f"{r['predicted_max_nodes']:,}"
        lines.append(f"| {name} | {r['num_steps']} | {' / '.join(f'{n:,}' for n in r['sizes'])} | "
                     f"{' / '.join(f'{p:.0f}' for p in r['peaks_mb'])} | {r['per_node_mb']:.3f} | "
                     f"{r['intercept_mb']:.0f} | {predicted} in {r['budget_mb'] / 1024:.1f} GiB ({r['memory']}) | "
                     f"{_confirmed(r['confirmed'])} |")
    return lines


def _confirmed(confirmed: dict | None) -> str:
    if confirmed is None:
        return "not run"
    if not confirmed["trained"]:
        return f"{confirmed['num_nodes']:,}: FAILED"
    return f"{confirmed['num_nodes']:,}: {confirmed['peak_mb']:.0f}"


def merge_run(key: str, part_dir: str | pathlib.Path, into_dir: str | pathlib.Path,
              fields: tuple[str, ...] = ("command", "git_commit", "wall_seconds", "device")) -> None:
    """Puts ``summary[key]`` of the run in ``part_dir`` into the summary in ``into_dir``, with ``f"{key}_run"``
    naming where it was measured (``fields`` of that run's summary and its folder), and redraws its table."""
    part = json.loads((pathlib.Path(part_dir) / "summary.json").read_text())
    path = pathlib.Path(into_dir) / "summary.json"
    summary = json.loads(path.read_text())
    summary[key] = part[key]
    summary[f"{key}_run"] = {field: part[field] for field in fields} | {"out_dir": str(part_dir)}
    path.write_text(json.dumps(summary, indent=2) + "\n")
    write_report(into_dir)


def merge_rows(part_dir: str | pathlib.Path, into_dir: str | pathlib.Path) -> None:
    """The rows of the run in ``part_dir`` replace the rows of the same name in the summary in ``into_dir`` (which
    keeps its order; a row it lacks is added), ``rows_runs`` naming where they were measured, and its table
    redrawn."""
    part = json.loads((pathlib.Path(part_dir) / "summary.json").read_text())
    path = pathlib.Path(into_dir) / "summary.json"
    summary = json.loads(path.read_text())
    summary["rows"] = {**summary["rows"], **part["rows"]}
    earlier = [run | {"rows": [name for name in run["rows"] if name not in part["rows"]]}
               for run in summary.get("rows_runs", [])]
    summary["rows_runs"] = [run for run in earlier if run["rows"]] + [
        {"rows": list(part["rows"]), **{field: part[field] for field in ("command", "git_commit", "wall_seconds",
                                                                          "matmul_gflops", "device")},
         "out_dir": str(part_dir)}]
    path.write_text(json.dumps(summary, indent=2) + "\n")
    write_report(into_dir)


def merge_sweeps(sweeps_dir: str | pathlib.Path, into_dir: str | pathlib.Path) -> None:
    """:func:`merge_run` of ``"sweeps"`` (their rates depend on the day's machine: its matmul rate is named)."""
    merge_run("sweeps", sweeps_dir, into_dir, ("command", "git_commit", "wall_seconds", "matmul_gflops", "device"))


def merge_method_sweeps(part_dir: str | pathlib.Path, into_dir: str | pathlib.Path) -> None:
    """The sweeps of a run of method sweeps (``--only diloco_h50_student_r8_n10 ...``) put beside the network sweeps
    of the summary in ``into_dir``, as ``method_sweeps``, and its table redrawn."""
    part = json.loads((pathlib.Path(part_dir) / "summary.json").read_text())
    path = pathlib.Path(into_dir) / "summary.json"
    summary = json.loads(path.read_text())
    summary["method_sweeps"] = part["sweeps"]
    summary["method_sweeps_run"] = {field: part[field] for field in ("command", "git_commit", "wall_seconds",
                                                                     "matmul_gflops", "device")} | {
        "out_dir": str(part_dir)}
    path.write_text(json.dumps(summary, indent=2) + "\n")
    write_report(into_dir)


def merge_scale(scale_dir: str | pathlib.Path, into_dir: str | pathlib.Path) -> None:
    """:func:`merge_run` of ``"scale"``."""
    merge_run("scale", scale_dir, into_dir)


PART_NAMES = {"draw": "minibatch draw (uint8 gather, one-hot)", "forward_backward": "forward + backward",
              "optimizer": "Adam update", "step": "whole step (the engine's network, one call per step)"}


def jaxcomm_platform(device: str) -> str:
    """The platform a run's ``device`` line names (:func:`jaxcomm.harness.results.device_description`:
    "... (gpu), host ..."): cpu, gpu or tpu."""
    return next((p for p in ("gpu", "tpu") if f"({p})" in device), "cpu")


def peer_device(peer: dict) -> str:
    """Where the peer's PyTorch ran: ``torch_peer`` times it on the CPU (older summaries say nothing: CPU too)."""
    return peer.get("device", "cpu")


def peer_table(rows: dict, platform: str = "cpu", *, command: str = "") -> list[str]:
    """jaxcomm's best against PyTorch's best recipe, the rows that measured it (none before issue 41); a peer that
    ran on another platform than jaxcomm (PyTorch on the host CPU beside a GPU row) is listed, not compared.
    ``command``: the run's; a run from before the experiments were packages names the peer's file, as the tables
    committed then do."""
    measured = {name: r for name, r in rows.items() if "peer" in r}
    if not measured:
        return []
    peer = "python -m experiments.torch_peer" if "-m experiments." in command else "experiments/torch_peer.py"
    lines = ["", f"Against PyTorch (issue 41): its best recipe for the same workload (`{peer}`: "
             "the same architecture, minibatch draw, loss and Adam, each recipe timed, the best kept), in its own "
             "process right after the row's; `x PyTorch` = jaxcomm's best / PyTorch's best.", "",
             "| row | jaxcomm best | PyTorch best | recipe | x PyTorch | torch, threads |", "|---|---|---|---|---|---|"]
    for name, r in measured.items():
        peer = r["peer"]
        if "error" in peer:
            lines.append(f"| {name} | {r['best_node_steps_per_s']:.1f} | {peer['error']} | | | |")
            continue
        if peer_device(peer) != platform:
            lines.append(f"| {name} | {r['best_node_steps_per_s']:.1f} | {peer['best_node_steps_per_s']:.1f} | "
                         f"{peer['best_recipe']} | not compared: PyTorch on the {peer_device(peer)}, jaxcomm on "
                         f"the {platform} | {peer['torch']}, {peer['threads']} |")
            continue
        ratio = r["best_node_steps_per_s"] / peer["best_node_steps_per_s"]
        lines.append(f"| {name} | {r['best_node_steps_per_s']:.1f} | {peer['best_node_steps_per_s']:.1f} | "
                     f"{peer['best_recipe']} | {ratio:.2f}x | {peer['torch']}, {peer['threads']} |")
    return lines


def parts_table(rows: dict, platform: str = "cpu") -> list[str]:
    """Each part of a step against its floor, and PyTorch's same part where it was timed apart on jaxcomm's
    platform."""
    measured = {name: r for name, r in rows.items() if "parts" in r}
    if not measured:
        return []
    machine = next(iter(measured.values()))["parts"]["machine"]
    lines = ["", f"Parts of a step (issue 41; `jaxcomm/harness/step_parts.py`), ms per step of the whole population, "
             f"each part jitted alone under the row's best backend; floor: FLOPs at the matmul rate, or bytes moved "
             f"at the memory bandwidth; `of floor` = floor / time. Machine: {machine['cpu']}, {machine['cores']} "
             f"cores, {' '.join(machine['vector_extensions']) or 'no vector extensions listed'}; per row below, the "
             f"rates its floors use.", "",
             "| row | part | backend | jaxcomm ms | floor ms | floor | of floor | PyTorch ms |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in measured.items():
        lines.append(f"| {name} | (float32 matmul {r['parts']['matmul_gflops']:.1f} GFLOP/s, memory "
                     f"{r['parts']['bandwidth_gbs']:.1f} GB/s) | | | | | | |")
        peer = r.get("peer", {})
        peer_parts = peer.get("parts", {}) if peer_device(peer) == platform else {}
        parts = r["parts"]["parts"]
        if "step" in parts and peer_parts:  # PyTorch's whole step: its best recipe's
            peer_parts = {**peer_parts, "step": r["parts"]["num_nodes"] / peer["best_node_steps_per_s"]}
        for part, p in parts.items():
            theirs = peer_parts.get(part)
            lines.append(f"| {name} | {PART_NAMES.get(part, part)} | {r['parts']['backend']} | "
                         f"{p['seconds'] * 1e3:.2f} | {p['floor_seconds'] * 1e3:.2f} | {p['floor']} | "
                         f"{p['floor_seconds'] / p['seconds']:.0%} | "
                         f"{'-' if theirs is None else f'{theirs * 1e3:.2f}'} |")
        if "step" in parts:  # what the whole step takes beyond its parts
            rest = lambda times: times["step"] - sum(t for k, t in times.items() if k != "step")  # noqa: E731
            mine = rest({k: p["seconds"] for k, p in parts.items()})
            theirs = rest(peer_parts) if "step" in peer_parts else None
            lines.append(f"| {name} | rest of the step (whole - parts) | {r['parts']['backend']} | {mine * 1e3:.2f} "
                         f"| | | | {'-' if theirs is None else f'{theirs * 1e3:.2f}'} |")
    return lines
