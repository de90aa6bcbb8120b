"""One framework's run of one arm, in this fresh process: ``python -m experiments.peers.child FRAMEWORK ...`` (the
parent, :mod:`.run`, starts it). It imports the framework's workload (:data:`WORKLOADS`), runs it, and prints one
line, ``PEERS_RESULT {json}``: the framework, the arm, seconds by phase, end to end (from the parent's spawn to the
result), client-steps per second, test accuracy, peak RSS and the versions that ran.

Phases: ``interpreter`` (spawn to this module's first line), ``import`` (the workload module: its framework),
``setup`` (data, model, simulator, up to training's start), ``first_round`` (compilation included), ``rest``
(every later round), ``evaluation`` (the test set, at the end), ``other`` (the rest until the result: Ray's
teardown, ...). Flower and pfl-research stamp each round's end (a central evaluation function, a callback); jaxcomm
trains its rounds as one compiled chunk, so its rounds are split by what XLA reports compiling inside it
(:func:`_jaxcomm_seconds`): ``first_round`` = that compilation + one warm round. Nothing of jaxcomm is imported for
the peers.
"""

from __future__ import annotations

import time

START_WALL, START = time.time(), time.perf_counter()  # noqa: I001  (first: the process' own start)

import argparse  # noqa: E402
import importlib  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402

from .presets import Arm  # noqa: E402

WORKLOADS = {"jaxcomm": "jaxcomm_fedavg", "flower": "flower_fedavg", "pfl": "pfl_fedavg"}
"""Each framework's workload module in this package: ``run(arm, dataset_path, shards_path, seed, clock) -> dict``."""
MARKER = "PEERS_RESULT "
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")


class Clock:
    """Stamps a workload makes: ``mark(name)`` (``train_start``, ``train_end``, ``eval_start``, ``eval_end``) and
    ``round_end()`` after every round (``time.perf_counter`` seconds)."""

    def __init__(self):
        self.marks: dict[str, float] = {}
        self.rounds: list[float] = []

    def mark(self, name: str) -> None:
        self.marks[name] = time.perf_counter()

    def round_end(self) -> None:
        self.rounds.append(time.perf_counter())


def _versions(framework: str) -> dict[str, str]:
    modules = {"jaxcomm": ("jaxcomm", "jax", "jaxlib", "flax", "optax"), "flower": ("flwr", "ray", "torch"),
               "pfl": ("pfl", "torch")}[framework]
    out = {"python": platform.python_version(), "numpy": sys.modules["numpy"].__version__}
    for name in modules:
        module = sys.modules.get(name) or importlib.import_module(name)
        out[name] = getattr(module, "__version__", None) or importlib.metadata.version(name)
    return out


def _compile_listener(events: list[tuple[float, float]]):
    """Records ``(end, seconds)`` of every JAX tracing, lowering and XLA compilation in ``events``."""
    import jax

    def listen(event: str, seconds: float, **kwargs) -> None:
        if event in COMPILE_EVENTS:
            events.append((time.perf_counter(), seconds))

    jax.monitoring.register_event_duration_secs_listener(listen)


def _jaxcomm_seconds(clock: Clock, out: dict, events: list[tuple[float, float]], rounds: int) -> dict:
    """jaxcomm's phases from one ``methods.train`` call (between ``train_start`` and ``train_end``): ``build``
    (the method's build, the backend's choice, init, shards to the device: the call until its chunks start), the
    one chunk of every round (``train_seconds``), split into ``compile`` (XLA's work inside it) and warm rounds,
    and the evaluation after it (``final_seconds - train_seconds``)."""
    chunks_start = clock.marks["train_end"] - out["final_seconds"]
    chunks_end = chunks_start + out["train_seconds"]
    compile_seconds = sum(s for end, s in events if chunks_start <= end <= chunks_end)
    warm = max(out["train_seconds"] - compile_seconds, 0.0)
    return {"build": chunks_start - clock.marks["train_start"], "compile_in_rounds": compile_seconds,
            "first_round": compile_seconds + warm / rounds, "rest": warm * (rounds - 1) / rounds,
            "evaluation": out["final_seconds"] - out["train_seconds"], "warm_round": warm / rounds,
            "compile_total": sum(s for _, s in events)}


def _peer_seconds(clock: Clock, rounds: int) -> dict:
    stamps = clock.rounds
    if len(stamps) != rounds or "train_start" not in clock.marks:
        raise RuntimeError(f"the workload stamped {len(stamps)} of {rounds} rounds")
    rest = stamps[-1] - stamps[0]
    return {"first_round": stamps[0] - clock.marks["train_start"], "rest": rest,
            "evaluation": clock.marks["eval_end"] - clock.marks["eval_start"],
            "warm_round": rest / (rounds - 1) if rounds > 1 else None,
            "build": 0.0}


def measure(framework: str, arm: Arm, dataset_path: str, shards_path: str, seed: int, spawned: float) -> dict:
    """Runs ``framework``'s workload of ``arm`` here; the record :mod:`.run` collects."""
    record = {"framework": framework, "arm": arm.name, "seed": seed, "pid": os.getpid()}
    imported_at = time.perf_counter()
    workload = importlib.import_module(f"{__package__}.{WORKLOADS[framework]}")
    imported = time.perf_counter()
    events: list[tuple[float, float]] = []
    if framework == "jaxcomm":
        _compile_listener(events)
    clock = Clock()
    out = workload.run(arm, dataset_path, shards_path, seed, clock)
    done, done_wall = time.perf_counter(), time.time()
    record["versions"] = _versions(framework)
    if "unavailable" in out:
        return record | {"unavailable": out["unavailable"]}
    phases = (_jaxcomm_seconds(clock, out, events, arm.rounds) if framework == "jaxcomm"
              else _peer_seconds(clock, arm.rounds))
    seconds = {"interpreter": START_WALL - spawned, "import": imported - imported_at,
               "setup": clock.marks["train_start"] - imported, **phases}
    inside = seconds["import"] + seconds["setup"] + seconds["build"] + seconds["first_round"] + seconds["rest"] + \
        seconds["evaluation"]
    seconds["other"] = (done - imported_at) - inside
    total = done_wall - spawned
    warm = seconds["warm_round"]
    record.update({
        "accuracy": out["accuracy"], "seconds": seconds, "total_seconds": total,
        "client_steps": arm.client_steps, "client_steps_per_s": arm.client_steps / total,
        "warm_client_steps_per_s": arm.participants * arm.local_steps / warm if warm else None,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_rss_children_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "torch_threads": _torch_threads(), **{k: v for k, v in out.items() if k != "accuracy"}})
    return record


def _torch_threads() -> int | None:
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.peers.child", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("framework", choices=sorted(WORKLOADS))
    parser.add_argument("--arm", required=True, help="the arm as JSON (dataclasses.asdict of presets.Arm)")
    parser.add_argument("--dataset", required=True, help="the .npz of x_train, y_train, x_test, y_test")
    parser.add_argument("--shards", required=True, help="the .npz of the clients' shards: indices [M, S], sizes [M]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spawned", type=float, default=None, help="the parent's time.time() when it spawned us")
    args = parser.parse_args(argv)
    arm = Arm(**json.loads(args.arm))
    try:
        record = measure(args.framework, arm, args.dataset, args.shards, args.seed,
                         START_WALL if args.spawned is None else args.spawned)
    except Exception as error:  # noqa: BLE001  (the parent records the failure, naming framework and arm)
        traceback.print_exc()
        record = {"framework": args.framework, "arm": arm.name, "seed": args.seed,
                  "error": f"{type(error).__name__}: {error}"}
    print(MARKER + json.dumps(record, default=str), flush=True)
    return 1 if "error" in record else 0


if __name__ == "__main__":
    sys.exit(main())

