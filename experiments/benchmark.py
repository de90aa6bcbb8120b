"""Speed of every population backend on the thesis' three models, against the thesis' way.

For each workload (student MLP 784-32-32-10, teacher MLP 784-1200-1200-10 with
dropout, chapter-2 strided CNN of ~700k parameters) and number of nodes N, a
fresh subprocess (so peak memory is per row) measures node-steps per second of
the engine's network step (local minibatch sampling, uint8 gather, forward,
backward, Adam) with each backend of :func:`jaxcomm.population.lift`, and of the
thesis' way of running: nodes trained one after another, every node-step a
separate compiled call (§2.2.1). It also measures the machine's float32 matmul
rate, each row's fraction of it (XLA's FLOP count of one node-step x node-steps
per second), the inbox's share of a step (true-label messages over a ring, best
backend) and the state's memory per node. ``eager`` is the engine's own per-node loop (backend "loop", step
loop "eager": one compiled call per node inside the engine's step, inbox and all, node states held apart
within a chunk of steps), a candidate of ``backend="auto"`` like the others.

    python experiments/benchmark.py                  # the full table and the sweeps, 1-2 h on 2 CPU cores
    python experiments/benchmark.py --quick          # N <= 8, a minute (smoke test)
    python experiments/benchmark.py --only cnn_n10   # one row

Sweeps (:func:`jaxcomm.network_sweep.train_networks`): R networks of one structure, seeds 0..R-1, trained as one
sweep against R ``train_network`` calls one by one, each arm in a fresh process; the wall clock from the call
to the results (compilation and evaluations included): 16 student-MLP networks of 10 nodes (1,000 steps,
evaluated every 250) and 5 CNN networks of 10 nodes (300 steps). Rows and sweeps that fail (or time out)
are marked "failed" and the script exits 1. On a GPU the parent process does not preallocate memory
(``XLA_PYTHON_CLIENT_PREALLOCATE=false``), so each row's process has the device to itself.

Scale (``--scale``, or ``--only student_scale cnn_scale``): the largest population that trains in the memory
budget (``--memory-gib``, default 24, on CPU; the device's limit on an accelerator). Student MLPs of 256, 1,024
and 4,096 nodes and CNNs of 8, 32 and 128 train 4 steps (true labels over a ring, evaluated every 2), each N in a
fresh process; a line through the peaks (peak RSS on CPU, the device's peak bytes in use on an accelerator) is
extrapolated to the budget, and ``--scale-confirm`` trains 90 % of the predicted N to check it (opt-in: it can
take most of the machine's memory). ``--merge-scale SCALE_DIR INTO_DIR`` puts a separate run's scale suite into
another summary, as ``--merge-sweeps`` does for the sweeps.

    python experiments/benchmark.py --scale --no-sweeps --only student_scale cnn_scale

On a GPU (``--suite gpu``): student MLPs of 64 and 1,024 nodes, teachers of 8 and 32, CNNs of 10, 20 and 256
(both step loops), the scale suite in the device's memory, and four sweeps: R x N = 160 and 640 student nodes
(16 and 64 networks of 10), 50 and 200 CNN nodes (5 and 20 networks of 10). Each row's process times out after
300 s. In one command it may outlast a lent GPU's 10 minutes: ``experiments/gpu_session.sh`` runs it in three
(its stages bench, sweeps and scale), merged afterwards:

    python experiments/benchmark.py --merge-sweeps SWEEPS_DIR BENCH_DIR
    python experiments/benchmark.py --merge-scale SCALE_DIR BENCH_DIR

A run stopped by Ctrl-C or SIGTERM writes the rows it measured, lists the others as not run and exits 130.

Each step runs the way the engine runs it (``step_loop="auto"``): in lax.scan
for the MLPs, one jitted call per step for the CNN on CPU (see jaxcomm.speed).
Timings use real MNIST digits (the shipped sample) for the MLPs; the CNN rows
use random uint8 32x32x3 images, since speed does not depend on pixel values.
Every row of the full and gpu suites first builds its network with ``backend="auto"`` from an empty cache, as a
user's first run does, and records the pair picked, the seconds choosing took and that pair's speed against the
fastest pair (issue 40).
Writes runs/benchmark/<suite>-<time>/summary.json (or --out DIR), table.md and, with --write-choices, the
measured-best table that ``backend="auto"`` reads (jaxcomm/assets/backends.json). ``report DIR`` redraws DIR's
table.md from its summary.json and its hand-written notes.md; nothing runs:

    python experiments/benchmark.py report results/benchmark/issue41
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import resource
import subprocess
import sys
import time

# Neither imports JAX (the parent process never starts a backend; each row's process does): the measurement
# machinery of the sweeps and the scale suite with the rows' timing helpers, and the tables with the merges.
from jaxcomm.harness import results as harness_results
from jaxcomm.harness.bench import (
    BACKENDS,
    ScaleRow,
    SweepRow,
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
from jaxcomm.harness.reports.benchmark import (
    format_table,
    merge_method_sweeps,
    merge_rows,
    merge_scale,
    merge_sweeps,
    write_report,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The family (jaxcomm.speed.family_of) each workload's measurements are recorded under for backend="auto".
FAMILIES = {"student": "mlp", "teacher": "wide_mlp", "cnn": "conv"}
EAGER_CHUNK = 20  # steps per timed call of a step loop holding node states apart ("eager"; "unrolled" dispatched)
ROUNDS = 3  # interleaved rounds of the best pair and the thesis' loop, for their ratio


@dataclasses.dataclass(frozen=True)
class Row:
    workload: str  # "student", "teacher" or "cnn"
    num_nodes: int
    batch_size: int = 32
    backends: tuple[str, ...] = BACKENDS
    baseline: bool = True
    step_loops: tuple[str, ...] = ("scan", "dispatch")
    parts: bool = False  # a step's parts against their floors, and PyTorch's best recipe beside it (issue 41)
    cold: bool = True  # what auto picks from an empty cache, and how long choosing takes (issue 40)

    @property
    def name(self) -> str:
        return f"{self.workload}_n{self.num_nodes}" + ("" if self.batch_size == 32 else f"_b{self.batch_size}")


SUITES = ("full", "quick", "gpu")
"""``full``: the CPU table (1-2 h on 2 cores); ``quick``: N <= 8, a minute; ``gpu``: an accelerator's table, its
four sweeps and its scale suite (module docstring)."""


def rows(suite: str) -> list[Row]:
    if suite == "quick":
        return [Row("student", 8, cold=False), Row("teacher", 1, cold=False),
                Row("cnn", 4, step_loops=("dispatch",), cold=False)]
    if suite == "gpu":
        # At N = 1,024, lax.map (nodes one after another) and unrolled (minutes to compile) are left out.
        # Convolutions in a scan body are not slow on a GPU as on CPU: both step loops are measured.
        cnn = ("vmap", "patches", "unrolled", "sharded")  # batched conv against XLA's grouped one
        return [Row("student", 64, parts=True), Row("student", 1024, backends=("vmap", "sharded")),
                Row("teacher", 8), Row("teacher", 32), Row("cnn", 10, backends=cnn, parts=True),
                Row("cnn", 20, backends=cnn),
                Row("cnn", 256, backends=("vmap",), baseline=False)]
    out = [Row("student", n, parts=n == 64) for n in (1, 8, 64)]
    # N >= 256: unrolled copies take minutes to compile, never to win (256 of them: 96 s as a scan and 98 s
    # dispatched in the committed table's run; 332 s and 411 s in a run of 2026-11-26, the same jax).
    out += [Row("student", n, backends=("vmap", "map", "sharded")) for n in (256, 1024)]
    out += [Row("teacher", n) for n in (1, 8, 32)]
    for batch in (32, 64):
        # lax.map over CNN nodes runs ~30x under the loop on CPU: measured up to N = 4 only.
        # Convolutions in a scan body run ~20x slower on CPU: CNN steps are dispatched
        # (the scan penalty is measured once per row with N <= 4).
        # "patches": convolutions as im2col and one batched matmul (issue 41), against vmap's grouped ones
        out += [Row("cnn", n, batch, (*BACKENDS, "patches") if n <= 4 else ("vmap", "patches", "unrolled", "sharded"),
                    step_loops=("dispatch",), parts=n == 10 and batch == 32) for n in (1, 4, 10, 20)]
    # Scale: 256 CNN nodes in one process (memory per node), vmap only, no per-node baseline.
    out.append(Row("cnn", 256, backends=("vmap",), baseline=False, step_loops=("dispatch",)))
    return out


METHOD_SWEEPS = ("diloco:50", "sync", "codistill:100")
"""The baselines swept as one population (issue 37): 8 seeds of each on the student MLP, 10 nodes, 1,000 steps."""


def sweep_rows(suite: str) -> list[SweepRow]:
    if suite == "quick":
        return [SweepRow("student", 4, 4, 100, 50)]
    cpu = [SweepRow("student", 16, 10, 1000, 250), SweepRow("cnn", 5, 10, 300, 100),
           *(SweepRow("student", 8, 10, 1000, 250, method) for method in METHOD_SWEEPS)]
    if suite == "gpu":  # R x N = 160 and 640 student nodes, 50 and 200 CNN nodes
        return cpu + [SweepRow("student", 64, 10, 1000, 250), SweepRow("cnn", 20, 10, 300, 100)]
    return cpu


def scale_rows(suite: str) -> list[ScaleRow]:
    if suite == "quick":
        return [ScaleRow("student", (8, 32), 2, 1)]
    # A few steps suffice: buffers are reused from the first step and the first evaluation on. The run must
    # evaluate, since the evaluation's activations (every node on 1,000 test images) are part of the peak.
    return [ScaleRow("student", (256, 1024, 4096), 4, 2), ScaleRow("cnn", (8, 32, 128), 4, 2)]


def selection(suite: str, only: list[str] | None = None, *, sweeps: bool = True,
              scale: bool = False) -> tuple[list[Row], list[SweepRow], list[ScaleRow]]:
    """The rows, sweeps and scale rows a run measures: the suite's (its scale rows with ``scale``, always in the gpu
    suite), or the rows named in ``only``, looked up in every suite (the chosen suite's definition wins a name
    that suites share)."""
    if not only:
        return rows(suite), sweep_rows(suite) if sweeps else [], scale_rows(suite) if scale or suite == "gpu" else []
    known = {r.name: r for name in (*SUITES, suite) for r in rows(name) + sweep_rows(name) + scale_rows(name)}
    unknown = sorted(set(only) - set(known))
    if unknown:
        raise KeyError(f"unknown rows {unknown}; rows are: {', '.join(known)}")
    named = [known[name] for name in only]
    return ([r for r in named if isinstance(r, Row)], [r for r in named if isinstance(r, SweepRow)],
            [r for r in named if isinstance(r, ScaleRow)])


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


def measure_row(row: Row) -> dict:
    """All measurements of one row, in this process."""
    import jax

    from jaxcomm import driver, flops, network, population

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
    result = {"workload": row.workload, "num_nodes": row.num_nodes, "batch_size": row.batch_size}
    if row.cold:  # first, as a user's first run: nothing of this model compiled yet
        result["cold_choice"] = cold_choice(make, base)
    speeds, compile_seconds, leader, picked = {}, {}, None, None
    pairs = [(b, s) for b in row.backends for s in row.step_loops] + [("loop", "eager")]
    if row.cold and tuple(result["cold_choice"]["pair"]) not in pairs:  # auto's pick is timed like the others
        pairs.insert(0, tuple(result["cold_choice"]["pair"]))
    for backend, step_loop in pairs:
        net = make(base.replace(backend=backend, step_loop=step_loop))
        data = network.network_data(dataset, base)
        state = initial(net)
        run = loop_of(net)
        compile_seconds[f"{backend}_{step_loop}"], steps_per_s, state = timed(run, state, data,
                                                                              chunk_of((backend, step_loop)))
        speeds[backend, step_loop] = steps_per_s * row.num_nodes
        if leader is None or speeds[backend, step_loop] > speeds[leader[0]]:  # kept, compiled, for the rounds below
            leader = ((backend, step_loop), run, state, data)
        if row.cold and [backend, step_loop] == result["cold_choice"]["pair"]:  # kept for its rounds with the leader
            picked = ((backend, step_loop), run, state, data)
    state_bytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(state.nodes))
    result.update({f"{b}_{s}_node_steps_per_s": v for (b, s), v in speeds.items()})
    if row.cold:  # auto's pick against the fastest pair
        cold = result["cold_choice"]
        cold["node_steps_per_s"] = speeds[tuple(cold["pair"])]
        # timed once each (in the loop above): the fastest of a dozen single timings is partly the luckiest one
        cold["of_fastest_once"] = cold["node_steps_per_s"] / max(speeds.values())
        cold["of_fastest"], cold["rounds"] = 1.0, None
        if picked[0] != leader[0]:  # both again in interleaved rounds, the best of each, as best / loop below
            timed_pick, timed_leader = ([run, state, data, chunk_of(pair)] for pair, run, state, data in
                                        (picked, leader))
            rounds = dict(zip(("picked", "fastest"), interleaved(timed_pick, timed_leader, row.num_nodes), strict=True))
            leader = (*leader[:2], timed_leader[1], leader[3])
            cold["of_fastest"], cold["rounds"] = max(rounds["picked"]) / max(rounds["fastest"]), rounds
        del picked
    per_backend = {b: max(v for (bb, _), v in speeds.items() if bb == b) for b in row.backends}
    result.update({f"{b}_node_steps_per_s": v for b, v in per_backend.items()})
    result["eager_node_steps_per_s"] = speeds["loop", "eager"]  # "loop_node_steps_per_s" is the thesis' way
    result["eager_chunk"] = chunk_of(("loop", "eager"))
    result["unrolled_dispatch_chunk"] = chunk_of(("unrolled", "dispatch"))
    result["compile_seconds"] = compile_seconds

    # The thesis' way: N one-node networks, each step a separate call, one node after another.
    one = make(base.replace(num_nodes=1, backend="vmap", num_neighbours=0))
    one_step = jax.jit(one.step)
    one_state = one.init(jax.random.PRNGKey(0))
    one_data = network.network_data(dataset, base.replace(num_nodes=1, num_neighbours=0))
    xla_flops = _xla_flops(one_step, one_state, one_data)
    (best, best_loop), best_run, best_state, best_data = leader
    result["best_backend"], result["best_step_loop"] = best, best_loop
    result["best_node_steps_per_s"] = speeds[best, best_loop]
    result["loop_node_steps_per_s"] = None
    if row.baseline:
        donated_step = jax.jit(one.step, donate_argnums=0)  # each node's buffers reused, as the engine's

        def thesis_loop(states, data, length):
            for _ in range(length):
                states = [donated_step(s, data)[0] for s in states]
                jax.block_until_ready(states)
            return (states,)

        states = thesis_loop([initial(one) for _ in range(row.num_nodes)], one_data, 1)[0]  # compiles
        # The ratio best / loop from both measured again in interleaved rounds (the best of each): measured minutes
        # apart, a slow minute of a shared machine would decide it.
        loop_rates, best_rates = interleaved([thesis_loop, states, one_data, 1],
                                             [best_run, best_state, best_data, chunk_of((best, best_loop))],
                                             row.num_nodes)
        result["loop_node_steps_per_s"], result["best_node_steps_per_s"] = max(loop_rates), max(best_rates)
        result["rounds"] = {"loop": loop_rates, "best": best_rates}
    del best_state, leader
    result["images_per_s"] = result["best_node_steps_per_s"] * row.batch_size
    # counted from the jaxpr (the same on every device; XLA's count misses a GPU's library convolutions)
    result["flops_per_node_step"] = flops.count(one.step, one_state, one_data)
    result["xla_flops_per_node_step"] = xla_flops
    result["flops_counted"] = "jaxpr"
    result["state_mb_per_node"] = state_bytes / row.num_nodes / 2**20

    # The inbox: the same network exchanging true labels over a ring, best backend.
    if row.num_nodes > 1:
        config = base.replace(backend=best, step_loop=best_loop, content="true_labels")
        net = make(config)
        state = initial(net)
        _, with_inbox, state = timed(loop_of(net), state, network.network_data(dataset, config),
                                 chunk_of((best, best_loop)))
        result["with_inbox_node_steps_per_s"] = with_inbox * row.num_nodes
        result["inbox_share_of_step"] = max(0.0, 1.0 - with_inbox * row.num_nodes / speeds[best, best_loop])
        inbox_bytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(state.inbox))
        result["inbox_mb_per_node"] = inbox_bytes / row.num_nodes / 2**20
        result["inbox_only_share_of_step"] = _inbox_share(state, row, with_inbox)
    if row.step_loops == ("dispatch",) and row.num_nodes <= 4:
        # What lax.scan would cost here: convolutions in a loop body are slow on CPU.
        net = make(base.replace(backend="unrolled" if best == "loop" else best, step_loop="scan"))
        state = initial(net)
        _, in_scan, _ = timed(driver.scan_steps(net.step, lambda info: ()), state,
                              network.network_data(dataset, base), 1)
        result["scan_node_steps_per_s"] = in_scan * row.num_nodes
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["rss_mb_per_node"] = result["peak_rss_mb"] / row.num_nodes
    if row.parts:  # after the peak memory: the parts' own arrays are not the row's
        from jaxcomm.harness import step_parts

        # the parts are jitted programs: the per-node loop's jitted form is "unrolled"
        backend = "unrolled" if best == "loop" else best
        result["parts"] = step_parts.measure_parts(model, dataset, row.num_nodes, batch_size=row.batch_size,
                                                   backend=backend, matmul_gflops=matmul_gflops(),
                                                   bandwidth_gbs=step_parts.memory_gbs())
        result["parts"]["machine"] = step_parts.machine()
    return result


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
    """This script run with ``args`` in a fresh interpreter; a timeout is a failure (return code 124)."""
    try:
        return subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout,
                              cwd=ROOT)
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
    """PyTorch's best recipe for ``row``'s workload (``experiments/torch_peer.py`` in its own interpreter, right
    after the row's), or why not: ``{"error": "not installed"}`` without torch; not run beside an accelerator's
    rows, since the peer times PyTorch on the CPU (a GPU's row against the host's cores compares machines)."""
    import importlib.util

    import jax

    if importlib.util.find_spec("torch") is None:
        return {"error": "not installed"}
    if jax.default_backend() != "cpu":
        return {"error": f"not run: the peer is PyTorch on the CPU, jaxcomm ran on the {jax.default_backend()}"}
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "experiments" / "torch_peer.py"), "--workload",
                               row.workload, "--nodes", str(row.num_nodes), "--batch-size", str(row.batch_size),
                               "--json"], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if proc.returncode:
        return {"error": proc.stderr.strip()[-500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["report"]:  # report [DIR]: redraw a run's table from its summary.json and notes.md
        from jaxcomm.harness import cli as harness_cli

        return harness_cli.report_command(given[1:], experiment="benchmark", write_report=write_report)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure_row(harness_results.config_from(Row, json.loads(args.measure)))))
        return 0
    if args.measure_sweep:
        print(json.dumps(measure_sweep(SweepRow(**json.loads(args.measure_sweep[0])), args.measure_sweep[1])))
        return 0
    if args.measure_scale:
        print(json.dumps(measure_scale(**json.loads(args.measure_scale))))
        return 0
    if args.merge_rows:
        merge_rows(*args.merge_rows)
        return 0
    if args.merge_method_sweeps:
        merge_method_sweeps(*args.merge_method_sweeps)
        return 0
    if args.merge_sweeps:
        merge_sweeps(*args.merge_sweeps)
        return 0
    if args.merge_scale:
        merge_scale(*args.merge_scale)
        return 0
    from jaxcomm import speed
    from jaxcomm.harness import cli as harness_cli

    if args.data_dir is not None:
        os.environ["JAXCOMM_DATA_DIR"] = str(pathlib.Path(args.data_dir).expanduser().absolute())
    preset = "quick" if args.quick else args.suite
    args.out = args.out or str(harness_cli.default_out_dir("benchmark", preset))
    timeout = args.timeout or (300 if preset == "gpu" else 1800)

    try:
        selected, sweeps, scale = selection(preset, args.only, sweeps=not args.no_sweeps, scale=args.scale)
    except KeyError as error:
        parser.error(error.args[0])
    start, commit = time.perf_counter(), harness_results.git_commit()  # the code that runs: read before it runs
    peak = matmul_gflops()
    print(f"float32 matmul: {peak:.1f} GFLOP/s", flush=True)
    results, sweep_results, scale_results, signals = {}, {}, {}, []
    # Ctrl-C or SIGTERM (a time limit): the rows measured so far are written, the others listed as not run.
    with harness_cli.interrupts(signals):
        try:
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


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # The parent's JAX would take 75 % of a GPU's memory before any row's process starts: allocate on demand.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # The sweep arms build networks with backend="auto": timing the candidates in the first arm and reading the
    # cache in the second would be unfair; the rows time every pair themselves.
    os.environ.setdefault("JAXCOMM_AUTOTUNE", "0")
    sys.exit(main())
