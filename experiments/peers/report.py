"""The peers benchmark's report: ``table.md`` drawn from a run's ``summary.json`` (every child's record in it), with
:func:`stats`, the numbers a row is read by. Nothing here imports JAX, torch or the peers."""

from __future__ import annotations

import pathlib
import statistics

from jaxcomm.harness import report, results

PHASES = ("import", "setup", "first_round", "rest", "evaluation", "other")
"""The phases of a run the table shows (:mod:`.child`; jaxcomm's ``build`` is shown inside ``setup``)."""
NAMES = {"jaxcomm": "jaxcomm", "flower": "Flower", "pfl": "pfl-research"}
MIN_TOLERANCE = 1.0  # accuracy points: two frameworks whose means differ by more (and by more than the spread) differ


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def stats(records: list[dict]) -> dict:
    """The medians over repetitions of a framework's runs of an arm (seconds by phase, end to end, per warm round,
    client-steps/s, peak RSS) and the mean and sd of its accuracy; ``runs``: how many succeeded; ``failed``,
    ``unavailable``: why the others did not."""
    ok = [r for r in records if "error" not in r and "unavailable" not in r]
    out = {"runs": len(ok), "failed": [r["error"] for r in records if "error" in r],
           "unavailable": next((r["unavailable"] for r in records if "unavailable" in r), None)}
    if not ok:
        return out
    accuracies = [r["accuracy"] for r in ok]
    seconds = {p: _median([r["seconds"][p] + (r["seconds"]["build"] if p == "setup" else 0.0) for r in ok])
               for p in PHASES}
    return out | {"seconds": seconds, "total_seconds": _median([r["total_seconds"] for r in ok]),
                  "warm_round_seconds": _median([r["seconds"]["warm_round"] for r in ok]),
                  "client_steps_per_s": _median([r["client_steps_per_s"] for r in ok]),
                  "warm_client_steps_per_s": _median([r["warm_client_steps_per_s"] for r in ok]),
                  "peak_rss_mb": _median([r["peak_rss_mb"] for r in ok]),
                  "peak_rss_children_mb": _median([r.get("peak_rss_children_mb") for r in ok]),
                  "accuracy": statistics.fmean(accuracies),
                  "accuracy_sd": statistics.stdev(accuracies) if len(ok) > 1 else 0.0}


def agrees(a: dict, b: dict) -> bool | None:
    """Whether two frameworks' accuracies on an arm agree: their means within the larger of the two seed spreads
    (sd over repetitions) or :data:`MIN_TOLERANCE` points; None where either has no run."""
    if not a.get("runs") or not b.get("runs"):
        return None
    return abs(a["accuracy"] - b["accuracy"]) <= max(MIN_TOLERANCE, a["accuracy_sd"], b["accuracy_sd"])


def floor_seconds(row: dict, gflops: float) -> float:
    """The step floor of an arm: its client-steps x FLOPs per client-step at the machine's matmul rate."""
    return row["client_steps"] * row["flops_per_client_step"] / (gflops * 1e9)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}" if value < 10 else f"{value:,.1f}"


def _rss(s: dict) -> str:
    """The process' peak RSS, and the largest of its descendants' (Ray's processes) beside it."""
    children = s.get("peak_rss_children_mb")
    return report.cell(s["peak_rss_mb"], 0) + (f" (+{children:,.0f})" if children else "")


def arm_lines(name: str, row: dict, summary: dict) -> list[str]:
    """The table of one arm: a line per framework."""
    arm, gflops = row["arm"], summary["machine"]["gflops"]
    by = {fw: stats(row["runs"].get(fw, [])) for fw in summary["frameworks"]}
    floor = floor_seconds(row, gflops)
    cohort = "every client" if arm["cohort"] is None else f"{arm['cohort']:,} of {arm['num_clients']:,} clients"
    lines = ["", f"### {arm['about'] or name}", "",
             f"`{name}`: {arm['dataset']}, {arm['model']}, {arm['num_clients']:,} clients, {cohort} a round, "
             f"{arm['rounds']:,} rounds of {arm['local_steps']} local SGD steps (batch {arm['batch_size']}, lr "
             f"{arm['learning_rate']:g}): {row['client_steps']:,} client-steps of "
             f"{row['flops_per_client_step'] / 1e6:.2f} MFLOP; step floor {_s(floor)} s at {gflops:.1f} GFLOP/s.", "",
             "| framework | runs | end to end s | import | setup | first round | rest | eval | other | warm s/round "
             "| client-steps/s | x jaxcomm end to end | x jaxcomm warm | accuracy % | % of floor (warm, end to end) "
             "| peak RSS MB | lines |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    base = by.get("jaxcomm", {})
    for fw in summary["frameworks"]:
        s = by[fw]
        lines_of = summary.get("workload_lines", {}).get(fw)
        head = f"| {NAMES[fw]} | {s['runs']} |"
        if not s["runs"]:
            why = (summary.get("skipped", {}).get(fw) or s["unavailable"] or
                   (f"failed: {s['failed'][0][:120]}" if s["failed"] else "not run"))
            lines.append(head + f" {why} |" + " |" * 14 + f" {report.cell(lines_of)} |")
            continue
        ph = s["seconds"]
        ratios = ["", ""]
        if fw != "jaxcomm":
            agree = agrees(s, base)
            if agree is None:
                ratios = ["-", "-"]
            elif not agree:
                ratios = ["accuracy differs", "accuracy differs"]
            else:
                warm_j, warm_p = base.get("warm_round_seconds"), s.get("warm_round_seconds")
                ratios = [_x(s["total_seconds"] / base["total_seconds"]),
                          _x(warm_p / warm_j if warm_j and warm_p else None)]
        of_floor = ""
        if fw == "jaxcomm":
            warm = s["warm_round_seconds"] * arm["rounds"] if s["warm_round_seconds"] else None
            end_to_end = f"{100 * floor / s['total_seconds']:.2f} %"
            of_floor = (f"{100 * floor / warm:.1f} %, " if warm else "-, ") + end_to_end
        acc = f"{s['accuracy']:.2f} ± {s['accuracy_sd']:.2f}" if s["runs"] > 1 else f"{s['accuracy']:.2f}"
        fails = f" ({len(s['failed'])} failed)" if s["failed"] else ""
        lines.append(
            f"| {NAMES[fw]} | {s['runs']}{fails} | {_s(s['total_seconds'])} | "
            + " | ".join(_s(ph[p]) for p in PHASES)
            + f" | {_s(s['warm_round_seconds'])} | {report.cell(s['client_steps_per_s'], 0)} | {ratios[0]} | "
              f"{ratios[1]} | {acc} | {of_floor} | {_rss(s)} | {report.cell(lines_of)} |")
    return lines


def format_table(summary: dict) -> str:
    """``table.md``'s text for ``summary``."""
    machine = summary["machine"]
    versions = "; ".join(f"{NAMES[fw]}: " + ", ".join(f"{k} {v}" for k, v in sorted(vs.items()))
                         for fw, vs in summary.get("versions", {}).items() if vs)
    lines = [
        f"Host: {summary.get('host_cpu', '?')}; {summary.get('device', '?')}.  ",
        f"float32 matmul {machine['gflops']:.1f} GFLOP/s (the faster of jax {machine['jax_gflops']:.1f} and numpy "
        f"{machine['numpy_gflops']:.1f}, {machine['size']}^2, best of 5, measured at the run's start).  ",
        f"Versions: {versions or '-'}.",
        "",
        "FedAvg on real data, the same IID shards (jaxcomm's `data.partition` with the repetition's seed, written once "
        "to an .npz the peers read), the same arithmetic (local plain SGD on minibatches drawn with replacement from "
        "the client's shard, equal-weight average, server SGD at rate 1; PyTorch models initialised as Flax's), "
        "evaluated once on the test set at the end. Each framework's run of an arm is its own process; the frameworks "
        "alternate, their order rotated each repetition. Seconds are medians over the repetitions: `end to end` from "
        "the process' spawn to its result (as a user waits), `setup` up to the first round (jaxcomm: its build and "
        "backend choice included), `first round` with its compilation (jaxcomm: the XLA work reported inside its one "
        "compiled chunk of rounds + one warm round), `rest` the other rounds, `other` what else ran before the result "
        "(teardown). Flower's server evaluates before round 1 while its Ray engine still starts: the engine's start "
        "(its actors) falls in Flower's first round. pfl-research trains its users one after another in its own "
        "process. `warm s/round` = `rest` / (rounds - 1) (jaxcomm: its chunk less compilation, per round). "
        "`x jaxcomm` = the peer's median seconds / jaxcomm's, compared only where the accuracies agree (means within "
        f"the larger seed sd, or {MIN_TOLERANCE:g} point). `% of floor` (jaxcomm): client-steps x FLOPs per "
        "client-step (matrix products and convolutions, counted from the jaxpr) at the matmul rate, over its warm "
        "rounds and over its end-to-end seconds. `peak RSS`: the framework's process, with its largest descendant's "
        "in parentheses (Ray's processes: getrusage's largest, not their sum). `lines`: code lines of the workload "
        "as a user writes it (the peers' shared PyTorch model file included).",
    ]
    for fw, why in summary.get("skipped", {}).items():
        lines.append(f"\n**{NAMES[fw]} skipped**: {why}.")
    for name, row in summary["rows"].items():
        lines += arm_lines(name, row, summary)
    if summary.get("failed"):
        lines += ["", f"**Failed runs**: {', '.join(summary['failed'])} (their errors are in summary.json)."]
    return "\n".join(lines)


def write_report(out_dir: str | pathlib.Path, *, plots: bool = True) -> None:
    """Writes ``table.md`` from the ``summary.json`` in ``out_dir`` (the hand-written ``notes.md`` kept below it; no
    plots)."""
    summary, _ = results.read_run(out_dir)
    title = "FedAvg against the simulators researchers pick instead: jaxcomm, Flower, pfl-research"
    report.write_table(pathlib.Path(out_dir), "\n".join(report.heading(title, summary, "peers.py")) + "\n"
                       + format_table(summary) + "\n")

