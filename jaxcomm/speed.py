"""Which way of running is fastest for a model: the automatic choices, from measurements.

Two choices depend on the model and the device, and no single answer is right:

* the backend of :func:`jaxcomm.population.lift`: vmap wins for small MLPs,
  unrolling for CNNs on CPU, where vmapped convolution kernels become slow
  grouped convolutions ("patches", a candidate for convolutional models only,
  vmaps them as im2col and batched matmuls instead);
* whether a chunk of steps runs as one ``lax.scan`` or as one jitted call per
  step ("dispatch"): on CPU, XLA runs convolutions inside a loop body about 20x
  slower than the same convolutions at the top level of a program (measured:
  0.9 s against 0.04 s for one step of the chapter-2 CNN), and wide matmuls
  lose too, while small MLP steps are dominated by the per-call overhead that
  a scan removes. The third way, "eager" with the "loop" backend, is the
  thesis' own: one compiled call per node, nodes one after another, each node's
  state its own buffers within a chunk of steps
  (:class:`jaxcomm.population.Unstacked`). It compiles one node whatever N (an
  unrolled program of 100 CNN nodes took minutes), and on CPU it is the
  candidate for convolutional populations past :data:`UNROLL_LIMIT` nodes, where
  vmapped convolutions run 5-10x slower, and for wide MLPs whose N states
  together outgrow the cache: one node's state stays in it through its step,
  and no step writes the whole population into fresh memory (on Linux, XLA's
  large CPU buffers are freshly mapped on every call and faulted in page by
  page: 47,105 faults and 48 ms for one 184 MB elementwise op on 2 cores).

Neither transfers between machines: on one 2-core CPU the shipped choice for the
chapter-2 CNN ran at 0.71-0.79x the per-node loop, and a user's residual CNN
got a pair 9.3x slower than the best. So "auto" measures where it runs: on first
use of a model (its one-node step's jaxpr), N and device, :func:`choose` times
every candidate (backend, step loop) pair for a few steps of the lifted node step
(:func:`step_timer`) and caches the fastest in a user cache file
(:func:`cache_file`, per Python environment, outside the installed package), within a budget of seconds
(:func:`measured_choice`): the benchmark's table, ``jaxcomm/assets/backends.json`` (written by
``python -m experiments.benchmark --write-choices``, per family and N), orders the candidates and rules out untimed
those it ran far slower than a pair timed here. The choice then settles: later runs keep it, timing only pairs
the budget left for later, unless another pair runs :data:`SWITCH_MARGIN` faster in two timings; the cache
records each such challenge. ``JAXCOMM_AUTOTUNE=0`` asks it not to measure: then the table's
ranking decides, or the rule of thumb. A model's family is read from what its step computes
(:func:`family_of`): "conv" (any convolution), "wide_mlp" (a dense layer of >= 512
outputs) or "mlp".
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np

from jaxcomm import compiling, driver, population
from jaxcomm.population import AUTO, BACKENDS

UNROLL_LIMIT = 64  # "auto" never unrolls more nodes than this: compile time grows with N
STEP_LOOPS = ("scan", "dispatch", "eager")
_CHOICES_FILE = pathlib.Path(__file__).parent / "assets" / "backends.json"
FAMILIES = ("conv", "wide_mlp", "mlp")
WIDE = 512  # a matmul with this many output features or more makes a "wide_mlp"


def _walk(jaxpr: jax.extend.core.Jaxpr):
    """Every equation of ``jaxpr`` and of its sub-jaxprs (jit, custom_jvp/vjp, scan, cond, while...)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            yield from _walk(sub)


def _feature_width(eqn) -> int:
    """Output features of a ``dot_general`` in the ``x @ W`` form of a dense layer, else 0.

    The form: ``x`` contracts its trailing dimensions and ``W``'s last dimension
    is free (the layer's outputs). This skips the matmuls of a backward pass
    (weight gradients ``g^T x`` contract the batch, input gradients ``g W^T``
    contract ``W``'s outputs), whose widths are the inputs' or the batch's.
    """
    (lhs_contract, rhs_contract), (_, rhs_batch) = eqn.params["dimension_numbers"]
    lhs, rhs = (v.aval.shape for v in eqn.invars)
    trailing = sorted(lhs_contract) == list(range(len(lhs) - len(lhs_contract), len(lhs)))
    last = len(rhs) - 1
    if not trailing or last < 0 or last in rhs_contract or last in rhs_batch:
        return 0
    return int(rhs[last])


def family_of(fn: Callable[..., Any], *example_args: Any) -> str:
    """The benchmark family whose speed ``fn`` resembles, from what it computes.

    Traces ``jax.make_jaxpr(fn)(*example_args)`` (nothing runs; arguments may be
    pytrees, PRNG keys or ``jax.ShapeDtypeStruct``) and looks through every
    equation, sub-jaxprs included: "conv" if any ``conv_general_dilated``; else
    "wide_mlp" if a dense layer (``x @ W``) has >= :data:`WIDE` output features;
    else "mlp". E.g. ``family_of(train_step, state, images, ..., key)`` of one
    node, unlifted.

    Args:
      fn: a function JAX can trace.
      *example_args: its arguments (or their shapes and dtypes).

    Returns:
      One of :data:`FAMILIES`, the key of :func:`choose`'s measurements.
    """
    width = 0
    for eqn in _walk(jax.make_jaxpr(fn)(*example_args).jaxpr):
        if eqn.primitive.name == "conv_general_dilated":
            return "conv"
        if eqn.primitive.name == "dot_general":
            width = max(width, _feature_width(eqn))
    return "wide_mlp" if width >= WIDE else "mlp"


def model_family(model: Any, example_input: Any) -> str:
    """:func:`family_of` a Flax model's forward pass (``model.init``) on ``example_input`` (an array or
    ``jax.ShapeDtypeStruct``)."""
    return family_of(functools.partial(model.init, jax.random.PRNGKey(0)), example_input)


DETERMINISTIC_FLAG = "--xla_gpu_deterministic_ops=true"


def deterministic() -> None:
    """Asks XLA for bitwise-repeatable GPU runs; call before the first JAX computation.

    Sets ``--xla_gpu_deterministic_ops=true`` in ``XLA_FLAGS``: no atomics in reductions and scatters,
    no autotuning between kernels of different numerics. The price is speed on a GPU (reductions and
    scatter-adds lose their fastest kernels). CPU runs are already repeatable and are unaffected.

    Raises:
      RuntimeError: JAX's backends are already initialised (the flag would be ignored).
    """
    from jax._src import xla_bridge  # noqa: PLC0415  (no public test for an initialised backend)

    if xla_bridge.backends_are_initialized():
        raise RuntimeError("deterministic() must run before the first JAX computation: XLA reads its flags once")
    flags = os.environ.get("XLA_FLAGS", "")
    if DETERMINISTIC_FLAG not in flags.split():
        os.environ["XLA_FLAGS"] = f"{flags} {DETERMINISTIC_FLAG}".strip()


def _load_choices() -> dict:
    try:
        return json.loads(_CHOICES_FILE.read_text())
    except (OSError, ValueError):
        return {}


def rule_of_thumb(family: str, num_nodes: int, *, platform: str, backend: str = AUTO,
                  step_loop: str = AUTO) -> tuple[str, str]:
    """The choice without measurements (see the module docstring), given the halves the caller fixed.

    Backend: on a CPU, convolutional nodes unrolled up to :data:`UNROLL_LIMIT` and run one by one ("loop")
    past it; "vmap" otherwise; "loop" whenever the step loop is "eager". Step loop: what the backend needs
    ("sharded" one call per step, "loop" eager), else one call per step for convolutions on a CPU (slow inside
    a loop body) and a scan for the rest; never "eager" for a backend that would then run op by op.
    """
    cpu_conv = platform == "cpu" and family == "conv"
    if backend == AUTO:
        backend = ("loop" if step_loop == "eager" or (cpu_conv and num_nodes > UNROLL_LIMIT)
                   else "unrolled" if cpu_conv else "vmap")
    if step_loop == AUTO:
        step_loop = {"sharded": "dispatch", "loop": "eager"}.get(backend, "dispatch" if cpu_conv else "scan")
    return backend, step_loop


AUTOTUNE_ENV = "JAXCOMM_AUTOTUNE"  # "0": never time candidates, read the shipped table
CACHE_ENV = "JAXCOMM_CACHE_DIR"  # where measured choices are kept (default ~/.cache/jaxcomm)
TIMED_STEPS = 3  # steps per timed call of a candidate, more when a step is fast:
MIN_TIMED_SECONDS = 0.2  # ... up to a call of about this long
MAX_TIMED_STEPS = 64
TIMER_VERSION = 6  # in the cache key: choices timed by an older timer are timed again (1 favoured dispatch;
# 2 timed "eager" with the population stacked every step, as the engine no longer runs it; 3 did not donate;
# 4 timed "unrolled" with every node's optimiser in its own copy, as population.lift_train no longer runs it;
# 5 read the first pair from its cold first call, and timed "unrolled" dispatched steps on stacked nodes, which
# the driver now holds apart)


def autotune_enabled() -> bool:
    """Whether "auto" times the candidates where it runs (``JAXCOMM_AUTOTUNE`` unset or not "0")."""
    return os.environ.get(AUTOTUNE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def cache_file() -> pathlib.Path:
    """The measured choices of this Python environment: ``$JAXCOMM_CACHE_DIR/choices.json``, by default
    ``$XDG_CACHE_HOME`` (``~/.cache``)``/jaxcomm/<environment>/choices.json``, one folder per ``sys.prefix`` (each
    virtual environment, with its own jax and jaxcomm, measures for itself)."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        env = f"{pathlib.Path(sys.prefix).name}-{hashlib.sha256(sys.prefix.encode()).hexdigest()[:8]}"
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "jaxcomm", env)
    return pathlib.Path(root).expanduser() / "choices.json"


class Timer(NamedTuple):
    """What :func:`choose` times: ``key`` names the model, N and device; ``seconds_per_step(backend,
    step_loop)`` runs the lifted step a few times."""

    key: str
    seconds_per_step: Callable[[str, str], float]
    num_nodes: int = 1  # N: an unrolled program compiles N copies of the step (:func:`measured_choice` predicts it)


def step_timer(train: Callable, init: Callable, num_nodes: int, node_args: Sequence[jax.ShapeDtypeStruct], *,
               steps: int = TIMED_STEPS) -> Timer:
    """A :class:`Timer` of ``train(state, *args) -> (state, aux)`` for N nodes, on zeros of ``node_args``' shapes.

    Args:
      train: one node's step (e.g. a :class:`jaxcomm.network.NodeProgram`'s ``train``).
      init: ``init(key) -> state`` of one node.
      num_nodes: N.
      node_args: shapes and dtypes of one node's other arguments (keys as raw ``uint32 [2]``).
      steps: steps per timed call of a scan not sized by its dispatched step (each pair is compiled ahead, its
        first call timed, a second where it could change the choice); fast steps are timed again in calls of about
        :data:`MIN_TIMED_SECONDS` (at most :data:`MAX_TIMED_STEPS` steps).
    """
    state_shape = jax.eval_shape(init, jax.random.PRNGKey(0))
    key = _timer_key(train, state_shape, node_args, num_nodes)
    dispatched: dict[str, float] = {}  # seconds per dispatched step, by backend

    def seconds_per_step(backend: str, step_loop: str, limit: float = np.inf) -> float:
        """Seconds per step of the pair; once a timed call is over ``limit`` per step, that call's (no more)."""
        lifted = population.lift_train(train, backend=backend)  # as the engine lifts it
        args = [jnp.zeros((num_nodes, *a.shape), a.dtype) for a in node_args]
        step = lambda nodes: population.state_and_aux(lifted(nodes, *args))[0]  # noqa: E731
        # A scan's length is set from the same backend's dispatched step when that was timed first
        # (:func:`measured_choice` times those first): a scan of another length would compile again.
        known = dispatched.get(backend)
        length = (_timed_steps(known) if known is not None else steps) if step_loop == "scan" else 1
        nodes, call = _timing_nodes(step, init, state_shape, num_nodes, backend, step_loop)
        per_step, nodes = _measure(_timing_run(step_loop, step, call, length, nodes), nodes, length, limit)
        fast = per_step < min(MIN_TIMED_SECONDS, limit)  # slow steps are timed well enough by one-step calls
        if fast and _timed_steps(per_step) > length and (step_loop != "scan" or known is None):
            length = _timed_steps(per_step)
            # a dispatched run, too, must take the steps its time is divided by
            per_step, nodes = _measure(_timing_run(step_loop, step, call, length, nodes), nodes, length, limit)
        if step_loop == "dispatch":
            dispatched[backend] = per_step
        return per_step

    return Timer(key, seconds_per_step, num_nodes)


def _timer_key(train: Callable, state_shape: Any, node_args: Sequence[jax.ShapeDtypeStruct], num_nodes: int) -> str:
    """The cache key of a :class:`Timer`: the device, JAX's version, the structure of one node's ``train``, N and
    :data:`TIMER_VERSION`."""
    # the model's structure: every operation and its output shapes, not its constants (a learning rate)
    structure = [(e.primitive.name, [(v.aval.shape, str(v.aval.dtype)) for v in e.outvars if hasattr(v.aval, "shape")])
                 for e in _walk(jax.make_jaxpr(train)(state_shape, *node_args).jaxpr)]
    digest = hashlib.sha256(repr(structure).encode()).hexdigest()[:20]
    device = jax.devices()[0]
    return (f"{device.platform}|{device.device_kind}|{jax.device_count()}|jax {jax.__version__}|{digest}|N={num_nodes}"
            f"|timer {TIMER_VERSION}")


def _timed_steps(seconds: float) -> int:
    """Steps of a timed call of about :data:`MIN_TIMED_SECONDS` at ``seconds`` per step, 2 to :data:`MAX_TIMED_STEPS`.

    Fast steps are timed in such calls, so that a call's overhead weighs on each step about as little as in training
    (where a scan runs a whole chunk). At least 2: a scan of one step, XLA may compile as straight-line code (no loop).
    """
    return min(MAX_TIMED_STEPS, max(2, int(np.ceil(MIN_TIMED_SECONDS / max(seconds, 1e-9)))))


def _timing_nodes(step: Callable, init: Callable, state_shape: Any, num_nodes: int, backend: str,
                  step_loop: str) -> tuple[Any, Callable | None]:
    """``(nodes, call)``: N nodes to time ``step`` on (:func:`_timing_population`), held as the driver holds them
    through a chunk of ``step_loop``, and the one-step call of a dispatched or eager run (None for a scan)."""
    nodes, call = _timing_population(init, state_shape, num_nodes, backend), None
    if step_loop == "eager":  # held apart, as the driver holds them through a chunk (regrouped once a chunk)
        nodes, call = population.unstack(nodes), step
        # compiles the "loop" lift's per-node program on one node's state (one node-step, not N)
        jax.block_until_ready(step(population.unstack(_timing_population(init, state_shape, 1, backend))))
    elif step_loop == "dispatch":  # one compile serves dispatched runs of every length
        if population.held_apart(backend, step_loop):  # as the driver holds them through a chunk
            nodes = population.unstack(nodes)
        # donated and compiled ahead, as for a scan (:func:`_timing_run`)
        call = compiling.jit(step, donate_argnums=0).lower(nodes).compile()
    return nodes, call


def _timing_run(step_loop: str, step: Callable, call: Callable | None, length: int, nodes: Any) -> Callable:
    """``run(nodes) -> nodes`` of ``length`` steps: for "scan" one ``lax.scan`` of ``step``, else ``length`` calls of
    ``call`` (:func:`_timing_nodes`), each waited on."""
    if step_loop == "scan":
        # donated, as the driver runs every step and chunk (the pair timed is the pair trained); compiled ahead of
        # the first call, which is then timed: a slow pair costs its compile and one step
        return compiling.jit(lambda nodes: jax.lax.scan(lambda c, _: (step(c), None), nodes, None,
                                                  length=length)[0], donate_argnums=0).lower(nodes).compile()

    def run(nodes):
        for _ in range(length):
            nodes = jax.block_until_ready(call(nodes))
        return nodes

    return run


def _measure(run: Callable, nodes: Any, length: int, limit: float) -> tuple[float, Any]:
    """``(seconds per step, nodes)``: the faster of one or two calls of ``run`` (``length`` steps each); ``limit``:
    the seconds per step past which the pair is ruled out (inf: no best so far to read it against)."""
    best = np.inf
    for _ in range(2):
        start = time.perf_counter()
        nodes = jax.block_until_ready(run(nodes))
        best = min(best, time.perf_counter() - start)
        # a second call only where it could change the choice: a short call is noisy, a long one near
        # the best so far (within SLOWER either way) may yet beat it or lose to it, and the first pair's
        # has no best to be read against: its first call, a fresh program's first run (its memory
        # faulted in afresh: a 1-node CNN's dispatched step took 131 ms, then 72-84), must not be the
        # figure later pairs are read against
        if best >= MIN_TIMED_SECONDS and np.isfinite(limit) and not limit / SLOWER**2 < best / length <= limit:
            break
    return best / length, nodes


def _timing_population(init: Callable, state_shape: Any, num_nodes: int, backend: str) -> Any:
    """N nodes' state to time steps on: zeros of ``init``'s shapes, in buffers of their own (donated as the driver
    donates them). A step's speed does not depend on its parameters' values, and a real init costs its compile
    (a 64-node student's vmapped truncated normals: ~5 s on 2 cores) that the run pays anyway, after the choice.
    A state holding typed PRNG keys, or laid over devices ("sharded"), is initialised for real."""
    if backend == "sharded" or any(jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.extended)
                                   for leaf in jax.tree.leaves(state_shape)):
        return driver.own_buffers(population.init_population(init, jax.random.PRNGKey(0), num_nodes, backend=backend))
    return jax.tree.map(lambda leaf: jnp.zeros((num_nodes, *leaf.shape), leaf.dtype), state_shape)


def _read_cache() -> dict:
    try:
        return json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}


def _write_cache(key: str, entry: dict) -> None:
    path = cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        cache = _read_cache() | {key: entry}
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
            json.dump(cache, f, indent=1)
        os.replace(f.name, path)  # atomic: processes timing at once never leave half a file
    except OSError:
        pass  # a read-only home: measure again next time


SLOWER = 1.5
"""A candidate whose first timed call is this many times the best so far is ruled out (timed no further), and the
scan of a backend whose dispatched step is (the scan saves only the dispatch)."""
SHIPPED_SLOWER = 2.0
"""A candidate the shipped benchmark predicts this many times slower than the best pair timed so far
(:func:`shipped_estimate`) is ruled out untimed: machines differ by less than that in how pairs rank (a vmapped
CNN's grouped convolutions, 5x slower than the per-node loop in the table, took 27 s to rule out by timing)."""
MIN_BUDGET_S = 15.0
"""Seconds a cold choice may spend timing, or a tenth of the run's planned training, whichever is more."""
SWITCH_MARGIN = 0.10
"""A kept choice gives way only to a pair that takes at least this fraction less time a step, in two timings
(:func:`clearly_faster`, :func:`_settle`). One pair's timings vary by more than a few per cent between runs: three
cold choices of one CNN went unrolled, loop, unrolled, and second runs, timing the pairs the first left for later,
switched on a single timing."""
HISTORY_LENGTH = 8
"""Challenges to a kept choice that its cache entry keeps, the newest (``history``: timings, margin, date)."""


def predicted_cost(pair: tuple[str, str], spent: Mapping[tuple[str, str], float], num_nodes: int,
                   dispatched: float | None = None) -> float:
    """Seconds timing ``pair`` is expected to take, from what the pairs timed so far took (``spent``, this choice's
    and earlier ones'): what its backend's other step loop took, else the most any pair took (a slow step costs its
    compile and a step), N times over for "unrolled" (its program holds N copies of the step: a 64-node MLP or a
    10-node CNN compiles for tens of seconds). A scan runs several steps a call where its dispatched step ran one:
    with that step's seconds (``dispatched``), two calls of at least 2 steps or :data:`MIN_TIMED_SECONDS` more
    (a 10-node residual CNN's patched scan took 6.6 s to time where its dispatched step took 4.7 s). 0 before any
    pair."""
    same = [s for p, s in spent.items() if p[0] == pair[0]]
    if same:
        scan_calls = 2 * max(2 * dispatched, MIN_TIMED_SECONDS) if pair[1] == "scan" and dispatched else 0.0
        return max(same) + scan_calls
    return max(spent.values(), default=0.0) * (num_nodes if pair[0] == "unrolled" else 1)


def _pair(name: str) -> tuple[str, str]:
    """A (backend, step loop) pair from its name in the cache and the shipped table ("vmap/scan")."""
    backend, step_loop = name.split("/")
    return backend, step_loop


def _name(pair: tuple[str, str]) -> str:
    return "/".join(pair)


def measured_choice(timer: Timer, candidates: Sequence[tuple[str, str]], *, order: Sequence[tuple[str, str]] = (),
                    shipped: Sequence[Mapping[tuple[str, str], float]] = (), planned_steps: int = 0,
                    report: Callable[[str], None] | None = None) -> tuple[str, str] | None:
    """The measured choice among ``candidates`` for ``timer``'s model, N and device (None if none can run).

    Every pair is timed once per model, N and device and its seconds per step cached (a pair that fails is
    remembered as failed, one ruled out as such): a later choice times only the pairs not yet measured. Pairs
    are timed in ``order`` (the shipped table's ranking: the likely best first), the others after. Ruled out
    untimed: a pair the ``shipped`` rows (:func:`shipped_speeds`) predict :data:`SHIPPED_SLOWER` times slower than
    the best pair timed so far (:func:`shipped_estimate`), and the scan of a backend whose dispatched step was ruled
    out. Timed no further: a pair whose first timed call is :data:`SLOWER` times the best so far. No pair starts
    that would end past :data:`MIN_BUDGET_S` or a tenth of ``planned_steps`` at the best speed, whichever is more,
    by its :func:`predicted_cost` (the pairs left are timed by a later choice, or one planned longer).

    A choice settles: the first, from a cache without a timing of any candidate, is the fastest pair timed, and the
    cache keeps it as the choice among these candidates (a fixed half narrows them). Later choices keep it unless
    another pair is :data:`SWITCH_MARGIN` faster in two timings (:func:`_settle`), and the entry's ``history``
    records each such challenge (the :data:`HISTORY_LENGTH` newest). ``report`` gets one line: what was picked and
    how long choosing took.
    """
    start = time.perf_counter()
    entry = _read_cache().get(timer.key, {})
    seconds = {_pair(k): v for k, v in entry.get("seconds_per_step", {}).items()}
    failed, ruled_out = ({_pair(k) for k in entry.get(field, [])} for field in ("failed", "ruled_out"))
    # wall seconds timing each pair took (compiling it, mostly), kept so a later choice predicts from them too
    spent = {_pair(k): v for k, v in entry.get("timing_seconds", {}).items()}
    among = ",".join(sorted(_name(p) for p in candidates))  # the key of the choice kept among these candidates
    earlier = {p: seconds[p] for p in candidates if p in seconds}  # timed by earlier choices
    kept = entry.get("chosen", {}).get(among)  # none in a cache written before choices were kept: the fastest then
    incumbent = _pair(kept) if kept and _pair(kept) in earlier else min(earlier, key=earlier.get, default=None)
    missing = []
    for pair in [*order, *candidates]:
        # a backend's dispatched step sizes its scan (step_timer): it is timed first
        for p in ((pair[0], "dispatch"), pair) if pair[1] == "scan" else (pair,):
            if p in candidates and p not in seconds and p not in failed | ruled_out and p not in missing:
                missing.append(p)
    timed, left, untimed = _time_missing(timer, candidates, missing, seconds, failed, ruled_out, spent,
                                         shipped=shipped, planned_steps=planned_steps, start=start)
    chosen, challenge = _settle(timer, incumbent, {pair: seconds[pair] for pair in candidates if pair in seconds},
                                seconds)
    if missing != left or challenge is not None:
        history = [*entry.get("history", []), *([{"among": among, **challenge}] if challenge else [])]
        _write_cache(timer.key, {"seconds_per_step": {_name(p): t for p, t in seconds.items()},
                                 "failed": [_name(p) for p in sorted(failed)],
                                 "ruled_out": [_name(p) for p in sorted(ruled_out)],
                                 "timing_seconds": {_name(p): round(t, 3) for p, t in spent.items()},
                                 "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
                                 "chosen": entry.get("chosen", {}) | ({among: _name(chosen)} if chosen else {}),
                                 "history": history[-HISTORY_LENGTH:]})
    if report is not None and (missing or challenge):
        report(f"{_name(chosen) if chosen else 'no pair ran'} ({timed} of {len(missing)} pairs timed, "
               f"{len(ruled_out & set(missing))} ruled out ({len(untimed)} untimed), {len(left)} left for later"
               f"{_challenge_line(challenge)}, chosen in {time.perf_counter() - start:.1f} s)")
    return chosen


def _time_missing(timer: Timer, candidates: Sequence[tuple[str, str]], missing: Sequence[tuple[str, str]],
                  seconds: dict, failed: set, ruled_out: set, spent: dict, *,
                  shipped: Sequence[Mapping[tuple[str, str], float]], planned_steps: int,
                  start: float) -> tuple[int, list, set]:
    """Times the ``missing`` pairs in turn within :func:`measured_choice`'s budget (counted from ``start``), filling
    in ``seconds``, ``failed``, ``ruled_out`` and ``spent``.

    Returns:
      How many pairs were timed, the pairs left for later, and those ruled out untimed.
    """
    timed, left, untimed = 0, [], set()
    for pair in missing:
        timed_here = {p: seconds[p] for p in candidates if p in seconds}
        best = min(timed_here.values(), default=np.inf)
        budget = max(MIN_BUDGET_S, 0.1 * planned_steps * best) if np.isfinite(best) else np.inf
        dispatch = (pair[0], "dispatch")
        if pair[1] == "scan" and dispatch in left:
            left.append(pair)  # sized by its dispatched step: timed with it
            continue
        estimate = shipped_estimate(shipped, pair, timed_here)
        if ((pair[1] == "scan" and (dispatch in untimed or seconds.get(dispatch, 0.0) > SLOWER * best))
                or (estimate is not None and estimate > SHIPPED_SLOWER * best)):
            ruled_out.add(pair)  # not compiled, free
            untimed.add(pair)
            continue
        cost = predicted_cost(pair, spent, timer.num_nodes, seconds.get(dispatch))
        if time.perf_counter() - start + cost > budget:
            left.append(pair)
            continue
        began = time.perf_counter()
        try:
            seconds[pair] = timer.seconds_per_step(*pair, limit=SLOWER * best)
            timed += 1
            if seconds[pair] > SLOWER * best:
                ruled_out.add(pair)
        except Exception:  # noqa: BLE001  (a backend this model or device cannot run is no candidate)
            failed.add(pair)
        spent[pair] = time.perf_counter() - began
    return timed, left, untimed


def clearly_faster(seconds: float, than: float) -> bool:
    """Whether a pair taking ``seconds`` a step is :data:`SWITCH_MARGIN` faster than one taking ``than``: at least
    that fraction less time a step (a pair that failed takes ``inf``)."""
    return bool(np.isfinite(seconds) and seconds <= (1.0 - SWITCH_MARGIN) * than)


def _settle(timer: Timer, incumbent: tuple[str, str] | None, usable: Mapping[tuple[str, str], float],
            seconds: dict) -> tuple[tuple[str, str] | None, dict | None]:
    """The choice among the ``usable`` pairs (their seconds a step), given the one the cache kept (``incumbent``).

    Without one (a cold choice), the fastest. Otherwise the incumbent, unless the fastest other pair (the one
    challenger) is :func:`clearly_faster` in its timing so far (this choice's or an earlier one's) against the
    incumbent's cached timing, and again when both are timed once more, here, one after the other. Nothing is timed
    again without such a challenger. The second timings replace the first in ``seconds`` (a pair whose second
    timing fails counts as infinitely slow and keeps its first).

    Returns:
      The choice, and the record of the challenge (None if none): both pairs' two timings, the margin, the date and
      whether the challenger replaced the incumbent.
    """
    if incumbent is None:
        return min(usable, key=usable.get, default=None), None
    challenger = min((p for p in usable if p != incumbent), key=usable.get, default=None)
    if challenger is None or not clearly_faster(usable[challenger], usable[incumbent]):
        return incumbent, None
    again = {}
    for pair in (incumbent, challenger):
        try:
            again[pair] = timer.seconds_per_step(*pair)
        except Exception:  # noqa: BLE001  (as when first timed: a pair that cannot run is no choice)
            again[pair] = np.inf
    seconds.update({pair: t for pair, t in again.items() if np.isfinite(t)})
    replaced = clearly_faster(again[challenger], again[incumbent])
    return (challenger if replaced else incumbent), {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "choice": _name(incumbent), "challenger": _name(challenger),
        "outcome": "replaced" if replaced else "kept", "margin": SWITCH_MARGIN,
        "seconds_per_step": {_name(p): [usable[p], again[p] if np.isfinite(again[p]) else None]
                             for p in (incumbent, challenger)}}


def _challenge_line(challenge: dict | None) -> str:
    """The report's words on a challenge to the kept choice ("" if none)."""
    if challenge is None:
        return ""
    timings = {p: ", ".join("failed" if t is None else f"{t:.3g}" for t in ts)
               for p, ts in challenge["seconds_per_step"].items()}
    return (f"; {challenge['challenger']} ({timings[challenge['challenger']]} s a step) "
            f"{'replaced' if challenge['outcome'] == 'replaced' else 'did not replace'} {challenge['choice']} "
            f"({timings[challenge['choice']]} s)")


def candidates(num_nodes: int, *, backend: str = AUTO, step_loop: str = AUTO, devices: int | None = None,
               family: str | None = None, platform: str | None = None) -> list[tuple[str, str]]:
    """The (backend, step loop) pairs "auto" may pick: those consistent with a fixed half, "loop" only "eager" and
    "eager" only with "loop" (a jitted "loop" is "unrolled"; an eager vmap runs op by op) unless both are fixed,
    "unrolled" up to :data:`UNROLL_LIMIT` nodes, "sharded" on several devices dividing N and never inside a scan
    unless asked (see :func:`choose`), "patches" for the "conv" ``family`` only (or asked): without
    convolutions it is "vmap", timed twice. On a CPU, no scan of convolutions unless asked: XLA runs them ~20x
    slower in a loop body (a 10-node residual CNN: 11.5 s a step in a scan, 0.56 s dispatched; 46 s to time), so
    of the conv family only "patches" (convolutions as matmuls) may scan."""
    devices = jax.device_count() if devices is None else devices
    cpu_conv = family == "conv" and (platform or jax.default_backend()) == "cpu"
    return [(b, s) for b in ("vmap", "patches", "unrolled", "map", "sharded", "loop") for s in STEP_LOOPS
            if _allowed(b, s, num_nodes, backend, step_loop)
            and (b != "sharded" or backend == b or (devices >= 2 and not num_nodes % devices and s != "scan"))
            and (b != "patches" or backend == b or family == "conv")
            and (s != "scan" or not cpu_conv or b == "patches" or step_loop == s)]


def _allowed(b: str, s: str, num_nodes: int, backend: str, step_loop: str) -> bool:
    """Whether "auto" may pick (``b``, ``s``) for N nodes given the caller's fixed halves (the rules
    :func:`candidates` and the shipped table's reading in :func:`choose` share; "sharded" is theirs each)."""
    return (backend in (AUTO, b) and step_loop in (AUTO, s)
            and ((b == "loop") == (s == "eager") or AUTO not in (backend, step_loop))
            and (b != "unrolled" or num_nodes <= UNROLL_LIMIT or backend == b))


def choose(
    family: str,
    num_nodes: int,
    *,
    batch_size: int = 32,
    platform: str | None = None,
    backend: str = AUTO,
    step_loop: str = AUTO,
    timer: Timer | None = None,
    planned_steps: int = 0,
    report: Callable[[str], None] | None = None,
) -> tuple[str, str]:
    """The fastest (backend, step loop): measured here for ``timer``'s model, else the nearest benchmark row's.

    With a ``timer``, autotuning on (:func:`autotune_enabled`) and a half of the pair left to "auto", the
    :func:`candidates` are timed once per model, N and device and the fastest is cached and kept unless another
    pair proves :data:`SWITCH_MARGIN` faster twice (:func:`measured_choice`). Otherwise the measured benchmark
    row nearest in log N and log batch size decides; its ranking
    is read from the fastest down, skipping pairs that contradict a choice the
    caller fixed (``backend`` or ``step_loop`` other than "auto"), "loop" other than "eager" and the reverse,
    "unrolled" above :data:`UNROLL_LIMIT` nodes, and "sharded" inside a scan
    unless the scan was asked for (on one H100 it ran the wide MLPs 1,600x slower
    than one call per step: its sharding constraints in the loop body). Without
    measurements for this platform and family, :func:`rule_of_thumb`.

    Args:
      family: one of :data:`FAMILIES`, from :func:`family_of`.
      num_nodes: N.
      batch_size: per-node minibatch.
      platform: "cpu", "gpu", "tpu"; default ``jax.default_backend()``.
      backend: "auto" or a fixed backend.
      step_loop: "auto" or a fixed step loop.
      timer: times the model's lifted step (:func:`step_timer`); None reads the benchmark's table.
      planned_steps: steps the run will train (a tenth of their time may go to choosing: :func:`measured_choice`).
      report: gets one line saying what timing chose and how long it took.

    Returns:
      ``(backend, step_loop)``, neither "auto".
    """
    if timer is not None and AUTO in (backend, step_loop) and autotune_enabled():
        pairs = candidates(num_nodes, backend=backend, step_loop=step_loop, family=family, platform=platform)
        measured = (measured_choice(timer, pairs, planned_steps=planned_steps, report=report,
                                    order=ranking(family, num_nodes, batch_size=batch_size, platform=platform,
                                                  backend=backend, step_loop=step_loop),
                                    shipped=shipped_speeds(family, num_nodes, batch_size=batch_size,
                                                           platform=platform))
                    if len(pairs) > 1 else (pairs[0] if pairs else None))
        if measured is not None:
            return measured
    shipped = ranking(family, num_nodes, batch_size=batch_size, platform=platform, backend=backend,
                      step_loop=step_loop)
    if shipped:
        return shipped[0]
    return rule_of_thumb(family, num_nodes, platform=platform or jax.default_backend(), backend=backend,
                         step_loop=step_loop)


def ranking(family: str, num_nodes: int, *, batch_size: int = 32, platform: str | None = None, backend: str = AUTO,
            step_loop: str = AUTO) -> list[tuple[str, str]]:
    """The pairs of the benchmark row nearest in log N and log batch size (``jaxcomm/assets/backends.json``), fastest
    first, without those :func:`choose` may not pick; [] without a row for the platform and family."""
    fits = lambda b, s: (_allowed(b, s, num_nodes, backend, step_loop)  # noqa: E731
                         and (b != "sharded" or s == "dispatch" or step_loop == s))
    rows = _nearest_rows(family, num_nodes, batch_size=batch_size, platform=platform)
    return [(b, s) for b, s in rows[0]["ranking"] if fits(b, s)] if rows else []


def _nearest_rows(family: str, num_nodes: int, *, batch_size: int, platform: str | None) -> list[dict]:
    """The shipped table's rows for the platform and family, nearest in log N and log batch size first."""
    rows = _load_choices().get(platform or jax.default_backend(), {}).get(family, [])
    distance = lambda e: abs(np.log(e["num_nodes"] / num_nodes)) + abs(np.log(e["batch_size"] / batch_size))  # noqa: E731
    return sorted(rows, key=distance)


def shipped_speeds(family: str, num_nodes: int, *, batch_size: int = 32,
                   platform: str | None = None) -> list[dict[tuple[str, str], float]]:
    """The node-steps per second the benchmark measured for each pair, one dict per shipped row, the row nearest
    in log N and log batch size first (:func:`measured_choice` reads how much slower one pair ran than another)."""
    return [{_pair(k): v for k, v in row.get("node_steps_per_s", {}).items()}
            for row in _nearest_rows(family, num_nodes, batch_size=batch_size, platform=platform)]


def shipped_estimate(shipped: Sequence[Mapping[tuple[str, str], float]], pair: tuple[str, str],
                     seconds: Mapping[tuple[str, str], float]) -> float | None:
    """Seconds per step the shipped rows predict for ``pair`` here, from the pairs timed here (``seconds``): for each
    timed pair, its seconds times how much slower ``pair`` ran in the nearest row that measured both; the least of
    these (None if no row measured ``pair`` beside a timed pair)."""
    estimates = []
    for timed, measured in seconds.items():
        row = next((row for row in shipped if row.get(pair) and row.get(timed)), None)
        if row is not None:
            estimates.append(measured * row[timed] / row[pair])
    return min(estimates, default=None)


def write_backend_choices(summary: dict, platform: str | None = None, *,
                          families: Mapping[str, str] | None = None) -> pathlib.Path:
    """Records a benchmark summary's rankings for :func:`choose`: each row measured replaces the platform's row of
    the same (family, N, batch size); the platform's other rows and other platforms are kept (a run of a few rows,
    ``--only``, or one interrupted, updates those rows only).

    Args:
      summary: rows with ``workload``, ``num_nodes``, ``batch_size`` and
        ``<backend>_<step loop>_node_steps_per_s``.
      platform: default ``jax.default_backend()``.
      families: the family of each workload name (default: the workload is the family).
    """
    platform = platform or jax.default_backend()
    families = families or {}
    table: dict[str, list] = {}
    for row in summary["rows"].values():
        if "error" in row:
            continue
        speeds = {(b, s): row.get(f"{b}_{s}_node_steps_per_s") for b in BACKENDS for s in STEP_LOOPS}
        speeds = {pair: v for pair, v in speeds.items() if v}
        if speeds:
            table.setdefault(families.get(row["workload"], row["workload"]), []).append({
                "num_nodes": row["num_nodes"], "batch_size": row["batch_size"],
                "ranking": [list(pair) for pair in sorted(speeds, key=speeds.get, reverse=True)],
                "node_steps_per_s": {_name(pair): round(v, 4) for pair, v in speeds.items()}})
    choices = _load_choices()
    kept = choices.setdefault(platform, {})
    for family, rows in table.items():
        measured = {(row["num_nodes"], row["batch_size"]) for row in rows}
        rows += [row for row in kept.get(family, []) if (row["num_nodes"], row["batch_size"]) not in measured]
        kept[family] = sorted(rows, key=lambda row: (row["batch_size"], row["num_nodes"]))
    _CHOICES_FILE.write_text(json.dumps(choices, indent=1) + "\n")
    return _CHOICES_FILE
