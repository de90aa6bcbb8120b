"""The benchmark's measurement machinery (``python -m experiments.benchmark``): what its rows time with, its
sweeps and its scale suite.

* The rows' helpers: each workload's model and data (:func:`model_and_data`), the engine's chunk runner
  (:func:`loop_of`) and a state it may consume (:func:`initial`), steps per second after compilation
  (:func:`timed`, :func:`rate`), what ``backend="auto"`` picks from an empty cache (:func:`cold_choice`) and the
  machine's float32 matmul rate (:func:`matmul_gflops`).
* Sweeps (:class:`SweepRow`): R networks of one structure trained as one sweep against one by one
  (:func:`measure_sweep` of one arm, :func:`run_sweeps` of every arm in a fresh process).
* Scale (:class:`ScaleRow`): the peak memory of a population at a few N (:func:`measure_scale`, each N in a fresh
  process), the line through the peaks extrapolated to the budget (:func:`predict_max_nodes`, :func:`run_scale`).

The fresh processes are the benchmark's own entry points (``--measure-sweep``, ``--measure-scale``): the
runners take ``child(args, timeout)``, the benchmark run with ``args`` in a fresh interpreter. The scripts beside the
results take :func:`in_fresh_process` for theirs (a script, its arguments, the environment it adds; its last
printed line read as JSON). Nothing here imports
JAX until it measures: the benchmark's parent process and its report import this module without starting a backend.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable

BACKENDS = ("vmap", "unrolled", "map", "sharded")  # inside the engine's jitted scan
MIN_SECONDS = 2.0  # timed per variant, after compilation
COLD_PLANNED_STEPS = 1000
"""The run a cold choice is made for: its budget is 15 s or a tenth of this many steps at the best speed."""
Child = Callable[[list[str], int], subprocess.CompletedProcess]
"""``child(args, timeout)``: the benchmark script run with ``args`` in a fresh interpreter (a timeout is a failure,
return code 124)."""


def in_fresh_process(script, *args: str, env: dict[str, str] | None = None):
    """What ``python script *args`` (or ``python -m script *args`` for a module's dotted name, as a probe passes
    its ``__spec__.name``) prints on its last line, read as JSON, run in a fresh interpreter (nothing compiled,
    cached or set process-wide by this one) with ``env`` added to this process' environment; raises RuntimeError
    with the tail of its stderr when it fails."""
    by_name = isinstance(script, str) and not script.endswith(".py") and "/" not in script
    proc = subprocess.run([sys.executable, *(("-m", script) if by_name else (str(script),)), *args],
                          capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if proc.returncode:
        raise RuntimeError(f"{script} {' '.join(args)} exited with {proc.returncode}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def model_and_data(workload: str):
    """The workload's model and a dataset to sample from."""
    import numpy as np

    from jaxcomm import data
    from jaxcomm.models import MLP, StridedCNN

    if workload == "cnn":
        rng = np.random.default_rng(0)
        random_split = lambda m: data.ImageSplit((rng.random((m, 32, 32, 3)) * 255).astype(np.uint8),
                                                 rng.integers(0, 10, m).astype(np.int32))
        split = random_split(12_800)
        return StridedCNN(), data.ImageDataset("random-32x32x3", split, random_split(1000), random_split(1000), 10)
    hidden, dropout = ((32, 32), 0.0) if workload == "student" else ((1200, 1200), 0.5)
    return MLP(hidden=hidden, dropout=dropout), data.load_mnist_sample()


def loop_of(net):
    """The engine's chunk runner for this network: lax.scan, one call per step, or the step run eagerly (node states
    apart within the chunk, as in training), each chunk's state donated to the next as in training (a state given to
    it is consumed: :func:`initial`)."""
    from jaxcomm import driver

    return driver.chunk_runner(net.step, lambda info: (), net.step_loop, layout=net.layout,
                               donate=driver.donation(None))


def initial(net):
    """The network's first state with buffers of its own (:func:`jaxcomm.driver.own_buffers`), as the driver
    donates it."""
    import jax

    from jaxcomm import driver

    return driver.own_buffers(net.init(jax.random.PRNGKey(0)))


def rate(run, state, data, chunk: int) -> tuple[object, float]:
    """(state, steps per second) of ``run(state, data, chunk)`` called for at least MIN_SECONDS."""
    import jax

    steps, start = 0, time.perf_counter()
    while steps == 0 or time.perf_counter() - start < MIN_SECONDS:
        state = jax.block_until_ready(run(state, data, chunk))[0]
        steps += chunk
    return state, steps / (time.perf_counter() - start)


def timed(run, state, data, chunk: int) -> tuple[float, float, object]:
    """(compile seconds, steps per second, state) of ``run(state, data, chunk)``."""
    import jax

    start = time.perf_counter()
    state = jax.block_until_ready(run(state, data, chunk))[0]
    compile_seconds = time.perf_counter() - start
    state, steps_per_s = rate(run, state, data, chunk)
    return compile_seconds, steps_per_s, state


def cold_choice(make, base) -> dict:
    """What ``auto`` picks from an empty cache for this network (issue 40): the pair and the seconds choosing took
    (building the network with backend and step loop "auto" for a :data:`COLD_PLANNED_STEPS`-step run, timing
    its candidates as a user's first run does)."""
    import contextlib
    import io
    import os
    import tempfile

    from jaxcomm import speed

    saved = {name: os.environ.get(name) for name in (speed.CACHE_ENV, speed.AUTOTUNE_ENV)}
    printed = io.StringIO()  # the chooser's own line (pairs timed, ruled out): kept, since a row's stderr is not
    with tempfile.TemporaryDirectory() as cache:
        os.environ[speed.CACHE_ENV], os.environ[speed.AUTOTUNE_ENV] = cache, "1"
        try:
            start = time.perf_counter()
            with contextlib.redirect_stderr(printed):
                net = make(base.replace(backend="auto", step_loop="auto", num_steps=COLD_PLANNED_STEPS))
            seconds = time.perf_counter() - start
            cached = speed.cache_file()  # in the temporary folder: what the chooser timed (none if nothing was)
            timings = json.loads(cached.read_text()) if cached.is_file() else {}
        finally:
            for name, value in saved.items():
                os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
    sys.stderr.write(printed.getvalue())
    return {"pair": [net.backend, net.step_loop], "seconds": seconds,
            "printed": [line for line in printed.getvalue().splitlines() if "auto chose" in line],
            "timings": next(iter(timings.values()), None)}


def matmul_gflops(size: int = 2048) -> float:
    """The machine's float32 matmul rate, GFLOP/s (best of a few runs)."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.PRNGKey(0), (size, size), jnp.float32)
    matmul = jax.jit(lambda x: x @ x)
    jax.block_until_ready(matmul(a))
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        jax.block_until_ready(matmul(a))
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


@dataclasses.dataclass(frozen=True)
class SweepRow:
    """R identical-structure networks (seeds 0..R-1) trained as one sweep against one by one."""

    workload: str  # "student" or "cnn"
    runs: int
    num_nodes: int
    num_steps: int
    eval_every: int
    method: str = ""  # a spec of jaxcomm.zoo.parse swept by jaxcomm.methods.sweep; "": the network's train_networks

    @property
    def name(self) -> str:
        prefix = zoo_name(self.method) + "_" if self.method else ""
        return f"{prefix}{self.workload}_r{self.runs}_n{self.num_nodes}"


def zoo_name(spec: str) -> str:
    from jaxcomm import zoo

    return zoo.parse(spec).name


SWEEP_ARMS = ("one_by_one", "sweep", "population", "sequential")
"""A sweep row's arms: its runs one by one, swept under ``mode="auto"``, or swept in a named mode."""


def measure_sweep(row: SweepRow, arm: str) -> dict:
    """Wall clock from the call to the results of ``row``'s R runs: one by one, or swept (``arm`` "sweep": in the
    mode ``"auto"`` picks; "population" or "sequential": in that one), and each run's ``train_seconds`` (the
    driver's; a population's is the whole sweep's). A method's sweep (``row.method``) reports its ledger's bytes
    as its counters."""
    if arm not in SWEEP_ARMS:
        raise ValueError(f"arm must be one of {SWEEP_ARMS}, got {arm!r}")
    from jaxcomm import methods, network, network_sweep, zoo

    model, dataset = model_and_data(row.workload)
    configs = [network.NetworkConfig(num_nodes=row.num_nodes, num_steps=row.num_steps, eval_every=row.eval_every,
                                     seed=seed) for seed in range(row.runs)]
    mode = "auto" if arm == "sweep" else arm
    start = time.perf_counter()
    if row.method:
        method = zoo.parse(row.method)
        results = ([methods.train(method, c, model, dataset, progress=False) for c in configs] if arm == "one_by_one"
                   else methods.sweep(method, configs, model, dataset, progress=False, mode=mode))
    elif arm != "one_by_one":
        results = network_sweep.train_networks(configs, model, dataset, progress=False, mode=mode)
    else:
        results = [network.train_network(c, model, dataset, progress=False) for c in configs]
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "mode": results[0].get("sweep", {}).get("mode"),
            "train_seconds": [r["train_seconds"] for r in results],
            "counters": [r["final"]["bytes" if row.method else "counters"] for r in results],
            "avg_accuracy": [r["final"]["avg_accuracy"] for r in results],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_sweeps(selected: list[SweepRow], timeout: int, results: dict | None = None, *, child: Child) -> dict:
    """Each arm of each sweep row in its own interpreter (nothing compiled is shared between arms: ``child``'s
    ``--measure-sweep``); into ``results`` as each row ends."""
    results = {} if results is None else results
    for row in selected:
        arms = {}
        for arm in ("one_by_one", "sweep"):
            proc = child(["--measure-sweep", json.dumps(dataclasses.asdict(row)), arm], timeout)
            if proc.returncode:
                print(f"{row.name} {arm}: FAILED\n{proc.stderr[-3000:]}", file=sys.stderr)
                arms = {"error": f"{arm}: {proc.stderr[-1000:]}"}
                break
            arms[arm] = json.loads(proc.stdout.strip().splitlines()[-1])
        if "error" in arms:
            results[row.name] = arms
            continue
        one, together = arms["one_by_one"], arms["sweep"]
        # the mode "auto" passed over, timed too: whether the rule picked the faster one (issue 37)
        other_mode = "sequential" if together["mode"] == "population" else "population"
        proc = child(["--measure-sweep", json.dumps(dataclasses.asdict(row)), other_mode], timeout)
        other = ({"other_mode_s": json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]} if not proc.returncode
                 else {"other_mode_error": proc.stderr.strip().splitlines()[-1][-300:] if proc.stderr.strip()
                       else f"exit status {proc.returncode}"})
        results[row.name] = {
            **dataclasses.asdict(row), "mode": together["mode"], "sweep_s": together["seconds"],
            "one_by_one_s": one["seconds"], "speedup": one["seconds"] / together["seconds"],
            # Counters depend only on the draws: a sweep must reproduce them exactly.
            "counters_equal": one["counters"] == together["counters"],
            "max_accuracy_difference": max(abs(a - b) for a, b in
                                           zip(one["avg_accuracy"], together["avg_accuracy"], strict=True)),
            "sweep_peak_rss_mb": together["peak_rss_mb"], "one_by_one_peak_rss_mb": one["peak_rss_mb"],
            "other_mode": other_mode, **other}
        r = results[row.name]
        print(f"{row.name:>16}: sweep ({r['mode']}) {r['sweep_s']:.1f} s, one by one {r['one_by_one_s']:.1f} s: "
              f"{r['speedup']:.2f}x; {other_mode} {_seconds(r.get('other_mode_s'))}; counters equal: "
              f"{r['counters_equal']}", flush=True)
    return results


def _seconds(seconds: float | None) -> str:
    return "failed" if seconds is None else f"{seconds:.1f} s"


@dataclasses.dataclass(frozen=True)
class ScaleRow:
    """The largest population of one workload that trains in a memory budget: peak memory at a few N, each in a
    fresh process, fitted by a line and extrapolated to the budget."""

    workload: str  # "student" or "cnn"
    sizes: tuple[int, ...]  # the N measured
    num_steps: int
    eval_every: int

    @property
    def name(self) -> str:
        return f"{self.workload}_scale"


def with_train_size(dataset, size: int):
    """``dataset`` with its training split repeated up to ``size`` images if it holds fewer (uint8 kept)."""
    import numpy as np

    held = len(dataset.train.labels)
    if held >= size:
        return dataset
    rows = np.resize(np.arange(held), size)  # 0..held-1, 0..held-1, ...: no float copy of the images
    return dataset._replace(train=dataset.train._replace(images=dataset.train.images[rows],
                                                         labels=dataset.train.labels[rows]))


def peak_memory(memory_gib: float) -> dict:
    """This process' peak memory so far and the budget it is held against, both in MB (MiB).

    On an accelerator, the device's ``peak_bytes_in_use`` and ``bytes_limit`` (``memory: "device"``); on CPU, or
    where the device keeps no such statistics, the process' peak RSS against ``memory_gib`` (``"host_rss"``).
    """
    import jax

    device = jax.local_devices()[0]
    stats = (device.memory_stats() or {}) if device.platform != "cpu" else {}
    if "peak_bytes_in_use" in stats:
        return {"peak_mb": stats["peak_bytes_in_use"] / 2**20, "memory": "device",
                "budget_mb": stats.get("bytes_limit", memory_gib * 2**30) / 2**20}
    return {"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "memory": "host_rss",
            "budget_mb": memory_gib * 1024}


def measure_scale(workload: str, num_nodes: int, num_steps: int, eval_every: int, *,
                  memory_gib: float = 24.0) -> dict:
    """Trains ``num_nodes`` nodes of ``workload`` (true labels over a ring, evaluated every ``eval_every`` steps)
    in this process and returns ``num_nodes``, ``seconds`` (wall clock of ``train_network``, compilation and
    evaluations included) and :func:`peak_memory`'s ``peak_mb``, ``memory`` and ``budget_mb``."""
    from jaxcomm import network

    model, dataset = model_and_data(workload)
    config = network.NetworkConfig(num_nodes=num_nodes, num_steps=num_steps, eval_every=eval_every,
                                   content="true_labels", seed=0)
    # Every node must hold an example (jaxcomm.data.partition_iid): give each at least a minibatch's worth, so
    # the MNIST sample's 4,000 digits (or the CNN's 12,800 images) do not cap N. The images held then grow by
    # B per node above 4,000 / 32 = 125 student nodes (400 CNN nodes): 25 KB (96 KB) a node, part of its cost.
    dataset = with_train_size(dataset, num_nodes * config.batch_size)
    start = time.perf_counter()
    network.train_network(config, model, dataset, progress=False)
    return {"num_nodes": num_nodes, "seconds": time.perf_counter() - start, **peak_memory(memory_gib)}


def predict_max_nodes(sizes, peaks_mb, budget_mb: float) -> tuple[float, float, int | None]:
    """``(per_node_mb, intercept_mb, predicted)``: the least-squares line ``peak = intercept + per_node x N``
    through the measured peaks (MB) and the largest N whose predicted peak fits in ``budget_mb`` (MB); None
    when memory does not grow with N (nothing to extrapolate), 0 when not even the intercept fits."""
    import math

    import numpy as np

    if len(sizes) < 2:
        raise ValueError(f"a line needs peaks at two sizes or more, got sizes={tuple(sizes)}")
    x, y = np.asarray(sizes, float), np.asarray(peaks_mb, float)
    # the closed form on centred values: equal peaks give a slope of exactly 0 (polyfit's solver can return 1e-16,
    # which would extrapolate to ~1e18 nodes)
    dx, dy = x - x.mean(), y - y.mean()
    per_node = float(dx @ dy / (dx @ dx))
    intercept = float(y.mean() - per_node * x.mean())
    if per_node <= 0:
        return per_node, intercept, None
    # 1e-9: the float rounding of an exact fit (e.g. 99.99999999999 for 100) must not cost a node
    return per_node, intercept, max(0, math.floor((budget_mb - intercept) / per_node + 1e-9))


def _scale_child(row: ScaleRow, num_nodes: int, timeout: int, memory_gib: float, child: Child) -> dict:
    """:func:`measure_scale` in a fresh interpreter (so the peak is this N's own); ``{"error": ...}`` if the
    child failed, timed out or was killed (e.g. by the kernel for memory: no stderr then, only the status)."""
    args = {"workload": row.workload, "num_nodes": num_nodes, "num_steps": row.num_steps,
            "eval_every": row.eval_every, "memory_gib": memory_gib}
    proc = child(["--measure-scale", json.dumps(args)], timeout)
    if proc.returncode:
        return {"error": proc.stderr[-1000:] or f"exit status {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_scale(selected: list[ScaleRow], timeout: int, memory_gib: float, *, child: Child, confirm: bool = False,
              results: dict | None = None) -> dict:
    """Each scale row: every size in its own interpreter (``child``'s ``--measure-scale``), the line through their
    peaks, the largest N predicted to fit in the budget and, with ``confirm``, a run at 90 % of it (opt-in: it can
    take most of the memory); into ``results`` as each row ends."""
    results = {} if results is None else results
    for row in selected:
        results[row.name] = r = _scale_row(row, timeout, memory_gib, confirm, child)
        if "error" in r:
            print(f"{row.name}: FAILED\n{r['error'][-3000:]}", file=sys.stderr)
            continue
        done = r["confirmed"]
        print(f"{row.name:>14}: {r['per_node_mb']:.3f} MB/node + {r['intercept_mb']:.0f} MB; largest N in "
              f"{r['budget_mb'] / 1024:.1f} GiB ({r['memory']}): {r['predicted_max_nodes']}"
              + ("" if done is None else f"; N = {done['num_nodes']} " + (
                  f"trained, peak {done['peak_mb']:.0f} MB" if done["trained"] else "FAILED")), flush=True)
    return results


def _scale_row(row: ScaleRow, timeout: int, memory_gib: float, confirm: bool, child: Child) -> dict:
    runs = []
    for n in row.sizes:
        run = _scale_child(row, n, timeout, memory_gib, child)
        if "error" in run:
            return {"error": f"N = {n}: {run['error']}"}
        runs.append(run)
    peaks = [run["peak_mb"] for run in runs]
    budget = min(run["budget_mb"] for run in runs)
    per_node, intercept, predicted = predict_max_nodes(row.sizes, peaks, budget)
    confirmed, n = None, int(0.9 * (predicted or 0))  # 90 %: a fit's largest N would sit at the budget's edge
    if confirm and n >= 1:
        run = _scale_child(row, n, timeout, memory_gib, child)
        # a failed confirmation is a finding about the prediction, not a failed row: the fit still stands
        confirmed = {"num_nodes": n, "trained": "error" not in run, "peak_mb": run.get("peak_mb"),
                     "seconds": run.get("seconds")} | ({"error": run["error"]} if "error" in run else {})
    return {"workload": row.workload, "sizes": list(row.sizes), "num_steps": row.num_steps,
            "eval_every": row.eval_every, "peaks_mb": peaks, "seconds": [run["seconds"] for run in runs],
            "per_node_mb": per_node, "intercept_mb": intercept, "budget_mb": budget, "memory": runs[-1]["memory"],
            "predicted_max_nodes": predicted, "confirmed": confirmed}
