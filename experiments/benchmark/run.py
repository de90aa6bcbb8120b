"""The benchmark's measurements and command line: each row measured in a fresh process (:func:`measure_row`, the
engine's backends against the thesis' loop), the rows, sweeps and scale suite run one after another, and
:func:`main` (``python -m experiments.benchmark``; the package's docstring says what it measures).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import pathlib
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

# Neither imports JAX (the parent process never starts a backend; each row's process does): the measurement
# machinery of the sweeps and the scale suite with the rows' timing helpers, and the tables with the merges.
from jaxcomm.harness import results as harness_results

from .bench import (
    cold_choice,
    initial,
    loop_of,
    matmul_gflops,
    measure_scale,
    measure_sweep,
    model_and_data,
    rate,
    run_scale,
    run_sweeps,
    timed,
)
from .presets import SUITES, Row, SweepRow, selection
from .report import format_table, merge_method_sweeps, merge_rows, merge_scale, merge_sweeps, write_report

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The family (jaxcomm.speed.family_of) each workload's measurements are recorded under for backend="auto".
FAMILIES = {"student": "mlp", "teacher": "wide_mlp", "cnn": "conv"}
EAGER_CHUNK = 20  # steps per timed call of a step loop holding node states apart ("eager"; "unrolled" dispatched)
ROUNDS = 3  # interleaved rounds of the best pair and the thesis' loop, for their ratio


def interleaved(first: list, second: list, num_nodes: int) -> tuple[list[float], list[float]]:
    """Two compiled programs, each ``[run, state, data, chunk]``, timed :data:`ROUNDS` times alternately (first,
    second, first, ...; each state carried on in its list): their node-steps/s per round. Measured minutes apart,
    a slow minute of a shared machine would decide a ratio of the two."""
    rates = ([], [])
    for _ in range(ROUNDS):
        for program, out in zip((first, second), rates, strict=True):
            program[1], steps_per_s = rate(*program)
            out.append(steps_per_s * num_nodes)
    return rates


class _Workload(NamedTuple):
    """What every measurement of a row builds on: the row, its model and data, the base network config, a builder
    of networks from a config and the chunk of steps a (backend, step loop) pair is timed in."""

    row: Row
    model: Any
    dataset: Any
    base: Any  # jaxcomm.network.NetworkConfig
    make: Callable
    chunk_of: Callable[[tuple[str, str]], int]


def _workload(row: Row) -> _Workload:
    import jax

    from jaxcomm import network, population

    model, dataset = model_and_data(row.workload)
    base = network.NetworkConfig(num_nodes=row.num_nodes, content="none", batch_size=row.batch_size,
                                 num_neighbours=min(2, row.num_nodes - 1), consume_prob=0.5,
                                 broadcast_prob=0.25)
    make = lambda config: network.make_network(config, model, image_shape=dataset.train.images.shape[1:],
                                               num_classes=10)
    # A chunk of roughly 0.1-0.5 s, so timing overhead stays small (an accelerator's steps take milliseconds).
    on_cpu = jax.default_backend() == "cpu"
    chunk = {"student": 50, "teacher": 2, "cnn": 1}[row.workload] if on_cpu else 50
    # "eager", and "dispatch" under a lift that takes them so, hold node states apart within a chunk and stack them
    # at its end, once per evaluation interval in training (100s of steps): timed in chunks of EAGER_CHUNK steps,
    # that cost is counted, not magnified (a 1-step chunk would pay it every step)
    chunk_of = lambda pair: max(chunk, EAGER_CHUNK) if population.held_apart(*pair) else chunk  # noqa: E731
    return _Workload(row, model, dataset, base, make, chunk_of)


def measure_row(row: Row) -> dict:
    """All measurements of one row, in this process."""
    import jax

    from jaxcomm import flops, network

    work = _workload(row)
    result = {"workload": row.workload, "num_nodes": row.num_nodes, "batch_size": row.batch_size}
    if row.cold:  # first, as a user's first run: nothing of this model compiled yet
        result["cold_choice"] = cold_choice(work.make, work.base)
    speeds, compile_seconds, leader, picked, state_bytes = _time_pairs(work, result.get("cold_choice"))
    result.update({f"{b}_{s}_node_steps_per_s": v for (b, s), v in speeds.items()})
    if row.cold:  # auto's pick against the fastest pair
        leader = _cold_against_fastest(work, result["cold_choice"], speeds, picked, leader)
        del picked
    per_backend = {b: max(v for (bb, _), v in speeds.items() if bb == b) for b in row.backends}
    result.update({f"{b}_node_steps_per_s": v for b, v in per_backend.items()})
    result["eager_node_steps_per_s"] = speeds["loop", "eager"]  # "loop_node_steps_per_s" is the thesis' way
    result["eager_chunk"] = work.chunk_of(("loop", "eager"))
    result["unrolled_dispatch_chunk"] = work.chunk_of(("unrolled", "dispatch"))
    result["compile_seconds"] = compile_seconds

    # The thesis' way: N one-node networks, each step a separate call, one node after another.
    one = work.make(work.base.replace(num_nodes=1, backend="vmap", num_neighbours=0))
    one_step = jax.jit(one.step)
    one_state = one.init(jax.random.PRNGKey(0))
    one_data = network.network_data(work.dataset, work.base.replace(num_nodes=1, num_neighbours=0))
    xla_flops = _xla_flops(one_step, one_state, one_data)
    best, best_loop = leader[0]
    result["best_backend"], result["best_step_loop"] = best, best_loop
    result["best_node_steps_per_s"] = speeds[best, best_loop]
    result["loop_node_steps_per_s"] = None
    if row.baseline:
        _against_the_thesis_loop(work, one, one_data, leader, result)
    del leader
    result["images_per_s"] = result["best_node_steps_per_s"] * row.batch_size
    # counted from the jaxpr (the same on every device; XLA's count misses a GPU's library convolutions)
    result["flops_per_node_step"] = flops.count(one.step, one_state, one_data)
    result["xla_flops_per_node_step"] = xla_flops
    result["flops_counted"] = "jaxpr"
    result["state_mb_per_node"] = state_bytes / row.num_nodes / 2**20
    if row.num_nodes > 1:
        result.update(_with_inbox(work, (best, best_loop), speeds[best, best_loop]))
    if row.step_loops == ("dispatch",) and row.num_nodes <= 4:
        # What lax.scan would cost here: convolutions in a loop body are slow on CPU.
        result["scan_node_steps_per_s"] = _in_scan(work, best)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["rss_mb_per_node"] = result["peak_rss_mb"] / row.num_nodes
    if row.parts:  # after the peak memory: the parts' own arrays are not the row's
        result["parts"] = _parts(work, best)
    return result


def _time_pairs(work: _Workload, cold: dict | None) -> tuple[dict, dict, tuple, tuple | None, int]:
    """Every (backend, step loop) pair of the row timed once (auto's pick ``cold`` among them, timed like the
    others): ``(speeds, compile_seconds, leader, picked, state_bytes)``, the fastest pair and auto's pick each as
    ``(pair, run, state, data)``, kept compiled for rounds against each other."""
    import jax

    from jaxcomm import network

    row = work.row
    speeds, compile_seconds, leader, picked = {}, {}, None, None
    pairs = [(b, s) for b in row.backends for s in row.step_loops] + [("loop", "eager")]
    if cold and tuple(cold["pair"]) not in pairs:  # auto's pick is timed like the others
        pairs.insert(0, tuple(cold["pair"]))
    for backend, step_loop in pairs:
        net = work.make(work.base.replace(backend=backend, step_loop=step_loop))
        data = network.network_data(work.dataset, work.base)
        state = initial(net)
        run = loop_of(net)
        compile_seconds[f"{backend}_{step_loop}"], steps_per_s, state = timed(run, state, data,
                                                                              work.chunk_of((backend, step_loop)))
        speeds[backend, step_loop] = steps_per_s * row.num_nodes
        if leader is None or speeds[backend, step_loop] > speeds[leader[0]]:  # kept, compiled, for the rounds below
            leader = ((backend, step_loop), run, state, data)
        if cold and [backend, step_loop] == cold["pair"]:  # kept for its rounds with the leader
            picked = ((backend, step_loop), run, state, data)
    state_bytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(state.nodes))
    return speeds, compile_seconds, leader, picked, state_bytes


def _cold_against_fastest(work: _Workload, cold: dict, speeds: dict, picked: tuple, leader: tuple) -> tuple:
    """Auto's pick against the fastest pair, into ``cold``: timed once each, and (where they differ) both again in
    interleaved rounds, the best of each; the leader, its state carried on."""
    cold["node_steps_per_s"] = speeds[tuple(cold["pair"])]
    # timed once each (in the loop above): the fastest of a dozen single timings is partly the luckiest one
    cold["of_fastest_once"] = cold["node_steps_per_s"] / max(speeds.values())
    cold["of_fastest"], cold["rounds"] = 1.0, None
    if picked[0] != leader[0]:  # both again in interleaved rounds, the best of each, as best / loop below
        timed_pick, timed_leader = ([run, state, data, work.chunk_of(pair)] for pair, run, state, data in
                                    (picked, leader))
        rounds = dict(zip(("picked", "fastest"), interleaved(timed_pick, timed_leader, work.row.num_nodes),
                          strict=True))
        leader = (*leader[:2], timed_leader[1], leader[3])
        cold["of_fastest"], cold["rounds"] = max(rounds["picked"]) / max(rounds["fastest"]), rounds
    return leader


def _against_the_thesis_loop(work: _Workload, one, one_data, leader: tuple, result: dict) -> None:
    """The thesis' way (N one-node networks, each step a separate call, one node after another) and the fastest
    pair, measured again in interleaved rounds (the best of each): measured minutes apart, a slow minute of a
    shared machine would decide their ratio."""
    import jax

    (best, best_loop), best_run, best_state, best_data = leader
    donated_step = jax.jit(one.step, donate_argnums=0)  # each node's buffers reused, as the engine's

    def thesis_loop(states, data, length):
        for _ in range(length):
            states = [donated_step(s, data)[0] for s in states]
            jax.block_until_ready(states)
        return (states,)

    states = thesis_loop([initial(one) for _ in range(work.row.num_nodes)], one_data, 1)[0]  # compiles
    loop_rates, best_rates = interleaved([thesis_loop, states, one_data, 1],
                                         [best_run, best_state, best_data, work.chunk_of((best, best_loop))],
                                         work.row.num_nodes)
    result["loop_node_steps_per_s"], result["best_node_steps_per_s"] = max(loop_rates), max(best_rates)
    result["rounds"] = {"loop": loop_rates, "best": best_rates}


def _with_inbox(work: _Workload, pair: tuple[str, str], best_speed: float) -> dict:
    """The inbox: the same network exchanging true labels over a ring, on the best pair."""
    import jax

    from jaxcomm import network

    config = work.base.replace(backend=pair[0], step_loop=pair[1], content="true_labels")
    net = work.make(config)
    state = initial(net)
    _, with_inbox, state = timed(loop_of(net), state, network.network_data(work.dataset, config), work.chunk_of(pair))
    n = work.row.num_nodes
    inbox_bytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(state.inbox))
    return {"with_inbox_node_steps_per_s": with_inbox * n,
            "inbox_share_of_step": max(0.0, 1.0 - with_inbox * n / best_speed),
            "inbox_mb_per_node": inbox_bytes / n / 2**20,
            "inbox_only_share_of_step": _inbox_share(state, work.row, with_inbox)}


def _in_scan(work: _Workload, best: str) -> float:
    """Node-steps per second of the row's network in lax.scan (the backend a scan takes nearest to ``best``)."""
    from jaxcomm import driver, network

    net = work.make(work.base.replace(backend="unrolled" if best == "loop" else best, step_loop="scan"))
    state = initial(net)
    _, in_scan, _ = timed(driver.scan_steps(net.step, lambda info: ()), state,
                          network.network_data(work.dataset, work.base), 1)
    return in_scan * work.row.num_nodes


def _parts(work: _Workload, best: str) -> dict:
    """A step's parts timed against their floors (:func:`.step_parts.measure_parts`), and the machine."""
    from . import step_parts

    # the parts are jitted programs: the per-node loop's jitted form is "unrolled"
    backend = "unrolled" if best == "loop" else best
    parts = step_parts.measure_parts(work.model, work.dataset, work.row.num_nodes, batch_size=work.row.batch_size,
                                     backend=backend, matmul_gflops=matmul_gflops(),
                                     bandwidth_gbs=step_parts.memory_gbs())
    parts["machine"] = step_parts.machine()
    return parts


def _inbox_share(state, row: Row, steps_per_s: float) -> float:
    """Seconds of the inbox's pop + push alone, as a fraction of a whole step's seconds."""
    import jax
    import jax.numpy as jnp

    from jaxcomm import inbox, topology

    adj = jnp.asarray(topology.ring(row.num_nodes, min(2, row.num_nodes - 1)))
    n = row.num_nodes

    def exchange(box, _, length):
        def body(box, key):
            want, send = jax.random.bernoulli(key, 0.5, (2, n))
            box, message, _ = inbox.pop(box, want)
            return inbox.push(box, message._replace(sender=jnp.arange(n, dtype=jnp.int32)), send, adj), None

        return jax.lax.scan(body, box, jax.random.split(jax.random.PRNGKey(0), length))

    _, exchanges_per_s, _ = timed(jax.jit(exchange, static_argnums=2), state.inbox, None, 200)
    return steps_per_s / exchanges_per_s


def _xla_flops(step, state, data) -> float | None:
    try:
        cost = step.lower(state, data).compile().cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        return float(cost["flops"])
    except Exception:  # cost analysis is best effort and backend-specific
        return None


def _child(args: list[str], timeout: int) -> subprocess.CompletedProcess:
    """The benchmark (``python -m experiments.benchmark``) run with ``args`` in a fresh interpreter, from the
    repository root; a timeout is a failure (return code 124)."""
    try:
        return subprocess.run([sys.executable, "-m", "experiments.benchmark", *args], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", f"timed out after {timeout} s")


def run_rows(selected: list[Row], timeout: int, results: dict | None = None) -> dict:
    """Each row in its own interpreter, so that its peak memory is its own; into ``results`` as each ends."""
    results = {} if results is None else results
    for row in selected:
        start = time.perf_counter()
        proc = _child(["--measure", json.dumps(dataclasses.asdict(row))], timeout)
        if proc.returncode:
            print(f"{row.name}: FAILED\n{proc.stderr[-3000:]}", file=sys.stderr)
            results[row.name] = {"error": proc.stderr[-1000:]}
            continue
        results[row.name] = json.loads(proc.stdout.strip().splitlines()[-1])
        r = results[row.name]
        print(f"{row.name:>14}: best {r['best_backend']:>8}/{r['best_step_loop']:<8} "
              f"{r['best_node_steps_per_s']:9.1f} node-steps/s"
              f" (loop {r['loop_node_steps_per_s'] or float('nan'):9.1f}), {time.perf_counter() - start:.0f} s",
              flush=True)
        if row.parts:
            r["peer"] = measure_peer(row, timeout)
    return results


def measure_peer(row: Row, timeout: int) -> dict:
    """PyTorch's best recipe for ``row``'s workload (``python -m experiments.torch_peer`` in its own interpreter, right
    after the row's), or why not: ``{"error": "not installed"}`` without torch; not run beside an accelerator's
    rows, since the peer times PyTorch on the CPU (a GPU's row against the host's cores compares machines)."""
    import importlib.util

    import jax

    if importlib.util.find_spec("torch") is None:
        return {"error": "not installed"}
    if jax.default_backend() != "cpu":
        return {"error": f"not run: the peer is PyTorch on the CPU, jaxcomm ran on the {jax.default_backend()}"}
    try:
        proc = subprocess.run([sys.executable, "-m", "experiments.torch_peer", "--workload", row.workload, "--nodes",
                               str(row.num_nodes), "--batch-size", str(row.batch_size), "--json"],
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if proc.returncode:
        return {"error": proc.stderr.strip()[-500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None, held: list[int] | None = None) -> int:
    """The benchmark's command line (the package's docstring); the exit status: 0 done, 1 a row failed, 130
    interrupted. ``held``: the signals received before the suite's handlers were installed (``__main__`` holds
    them from its first line; the list may still grow)."""
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["report"]:  # report [DIR]: redraw a run's table from its summary.json and notes.md
        from jaxcomm.harness import cli as harness_cli

        return harness_cli.report_command(given[1:], experiment="benchmark", write_report=write_report)
    parser = _parser()
    args = parser.parse_args(argv)
    if _measure_in_this_process(args) or _merge(args):
        return 0
    if args.data_dir is not None:
        os.environ["JAXCOMM_DATA_DIR"] = str(pathlib.Path(args.data_dir).expanduser().absolute())
    preset = "quick" if args.quick else args.suite
    try:
        chosen = selection(preset, args.only, sweeps=not args.no_sweeps, scale=args.scale)
    except KeyError as error:
        parser.error(error.args[0])
    return _run_suite(args, preset, *chosen, held=[] if held is None else held)


def _parser() -> argparse.ArgumentParser:
    description = importlib.import_module(__package__).__doc__
    parser = argparse.ArgumentParser(prog="python -m experiments.benchmark", description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="full", choices=SUITES,
                        help="full (the CPU table, default), quick (N <= 8, a smoke test) or gpu (an accelerator's "
                             "rows, sweeps and scale suite)")
    parser.add_argument("--quick", action="store_true", help="the same as --suite quick")
    parser.add_argument("--only", nargs="+", default=None, help="row names to run, e.g. student_n64 cnn_n10")
    parser.add_argument("--out", default=None,
                        help="results folder (default a fresh runs/benchmark/<suite>-<YYYYmmdd-HHMMSS>)")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="folder holding the datasets (sets $JAXCOMM_DATA_DIR; the rows use the shipped sample)")
    parser.add_argument("--write-choices", action="store_true",
                        help="also write the measured rows' rankings to jaxcomm/assets/backends.json (each row "
                             "measured replaces its own; the others are kept)")
    parser.add_argument("--timeout", type=int, default=None,
                        help="seconds per row (default 1800; 300 for the gpu suite)")
    parser.add_argument("--no-sweeps", action="store_true", help="skip the sweep rows")
    parser.add_argument("--merge-sweeps", nargs=2, metavar=("SWEEPS_DIR", "INTO_DIR"), default=None,
                        help="copy the sweeps of the run in SWEEPS_DIR into the summary in INTO_DIR (named as "
                             "measured apart) and redraw its table; nothing runs")
    parser.add_argument("--merge-rows", nargs=2, metavar=("PART_DIR", "INTO_DIR"), default=None,
                        help="the rows of the run in PART_DIR replace those of the same name in the summary in "
                             "INTO_DIR (named as measured apart) and redraw its table; nothing runs")
    parser.add_argument("--merge-method-sweeps", nargs=2, metavar=("PART_DIR", "INTO_DIR"), default=None,
                        help="put a run's method sweeps beside the network sweeps of another summary and redraw it")
    parser.add_argument("--scale", action="store_true",
                        help="also run the scale suite (largest population in the memory budget; the gpu suite "
                             "always does); with --only, name its rows instead (student_scale, cnn_scale)")
    parser.add_argument("--memory-gib", type=float, default=24.0,
                        help="the scale suite's memory budget on CPU, GiB (on an accelerator: the device's limit)")
    parser.add_argument("--scale-confirm", action="store_true",
                        help="train each scale row at 90%% of its predicted largest N (can use most of the memory)")
    parser.add_argument("--merge-scale", nargs=2, metavar=("SCALE_DIR", "INTO_DIR"), default=None,
                        help="copy the scale suite of the run in SCALE_DIR into the summary in INTO_DIR (named as "
                             "measured apart) and redraw its table; nothing runs")
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--measure-sweep", nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--measure-scale", default=None, help=argparse.SUPPRESS)
    return parser


def _measure_in_this_process(args: argparse.Namespace) -> bool:
    """A row's, a sweep arm's or a scale point's measurement, printed as one JSON line (the parent's child
    processes: :func:`_child`); whether ``args`` asked for one."""
    if args.measure:
        print(json.dumps(measure_row(harness_results.config_from(Row, json.loads(args.measure)))))
    elif args.measure_sweep:
        print(json.dumps(measure_sweep(SweepRow(**json.loads(args.measure_sweep[0])), args.measure_sweep[1])))
    elif args.measure_scale:
        print(json.dumps(measure_scale(**json.loads(args.measure_scale))))
    else:
        return False
    return True


def _merge(args: argparse.Namespace) -> bool:
    """A separate run's rows, method sweeps, sweeps or scale suite merged into another summary (its table
    redrawn; nothing runs); whether ``args`` asked for a merge."""
    if args.merge_rows:
        merge_rows(*args.merge_rows)
    elif args.merge_method_sweeps:
        merge_method_sweeps(*args.merge_method_sweeps)
    elif args.merge_sweeps:
        merge_sweeps(*args.merge_sweeps)
    elif args.merge_scale:
        merge_scale(*args.merge_scale)
    else:
        return False
    return True


def _run_suite(args: argparse.Namespace, preset: str, selected: list[Row], sweeps: list, scale: list,
               held: list[int]) -> int:
    """Measures the rows, sweeps and scale rows, each in a fresh process, then writes the summary and table (and
    with ``--write-choices`` the choices ``backend="auto"`` reads); the exit status."""
    from jaxcomm import speed
    from jaxcomm.harness import cli as harness_cli

    args.out = args.out or str(harness_cli.default_out_dir("benchmark", preset))
    timeout = args.timeout or (300 if preset == "gpu" else 1800)
    start, commit = time.perf_counter(), harness_results.git_commit()  # the code that runs: read before it runs
    peak = matmul_gflops()
    print(f"float32 matmul: {peak:.1f} GFLOP/s", flush=True)
    results, sweep_results, scale_results, signals = {}, {}, {}, []
    # Ctrl-C or SIGTERM (a time limit): the rows measured so far are written, the others listed as not run.
    with harness_cli.interrupts(signals):
        try:
            if held:
                signals.extend(held)
                raise KeyboardInterrupt(f"signal {held[0]}")
            run_rows(selected, timeout, results)
            run_sweeps(sweeps, timeout, sweep_results, child=_child)
            run_scale(scale, timeout, args.memory_gib, child=_child, confirm=args.scale_confirm,
                      results=scale_results)
        except KeyboardInterrupt:
            print("interrupted: writing the rows measured so far", file=sys.stderr, flush=True)
    not_run = [r.name for r in selected if r.name not in results] + [
        r.name for r in sweeps if r.name not in sweep_results] + [r.name for r in scale if r.name not in scale_results]
    for r in results.values():
        if "error" not in r and r.get("flops_per_node_step"):
            r["fraction_of_matmul_peak"] = r["flops_per_node_step"] * r["best_node_steps_per_s"] / (peak * 1e9)
        elif "error" not in r:
            r["fraction_of_matmul_peak"] = None
    path = harness_results.write_summary(args.out, experiment="benchmark", preset=preset, commit=commit,
                                         rows=results, wall_seconds=time.perf_counter() - start, matmul_gflops=peak,
                                         sweeps=sweep_results, **({"scale": scale_results} if scale_results else {}),
                                         **({"interrupted": True, "not_run": not_run} if signals else {}))
    summary = json.loads(path.read_text())
    write_report(args.out)
    print(format_table(summary))
    if args.write_choices:
        print(f"wrote {speed.write_backend_choices(summary, families=FAMILIES)}")
    failed = [name for name, r in {**results, **sweep_results, **scale_results}.items() if "error" in r]
    if failed:
        print(f"FAILED rows: {', '.join(failed)}", file=sys.stderr)
    if signals:
        print(f"INTERRUPTED; not run: {', '.join(not_run) or 'none'}", file=sys.stderr)
        return 130
    return 1 if failed else 0
