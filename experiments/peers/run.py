"""The benchmark's parent process: the data and shards written once, the machine's matmul rate, every framework's run
of every arm in a fresh process (:mod:`.child`), alternated, and :func:`main` (``python -m experiments.peers``)."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from jaxcomm.harness import cli as harness_cli

from . import child, presets, report
from .presets import Arm, Config

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
WORKLOAD_FILES = {"jaxcomm": ("jaxcomm_fedavg.py",), "flower": ("flower_fedavg.py", "torch_models.py"),
                  "pfl": ("pfl_fedavg.py", "torch_models.py")}
"""The files a user of each framework would write for this workload (the table counts their lines)."""
PEER_MODULES = {"flower": ("flwr", "ray", "torch"), "pfl": ("pfl", "torch")}
INSTALL_HINT = "see experiments/peers/README.md (a venv of their own; peers_python=PATH)"


# --------------------------------------------------------------------------- data


def write_dataset(name: str, folder: pathlib.Path) -> pathlib.Path:
    """``folder/<name>.npz``: the whole training split (no validation split held out) and the test split, uint8
    images ``[M, H, W, C]`` and int32 labels, as jaxcomm's loader reads them ($JAXCOMM_DATA_DIR)."""
    from jaxcomm import data

    dataset = data.load_mnist(validation_size=0) if name == "mnist" else data.load_cifar10(validation_size=0)
    path = folder / f"{name}.npz"
    import numpy as np

    np.savez(path, x_train=dataset.train.images, y_train=dataset.train.labels, x_test=dataset.test.images,
             y_test=dataset.test.labels)
    return path


def write_shards(dataset_path: pathlib.Path, num_clients: int, seed: int, folder: pathlib.Path) -> tuple[
        pathlib.Path, str]:
    """The IID shards jaxcomm trains on for ``num_clients`` and ``seed`` (its own function,
    :func:`jaxcomm.classifier.shards_of`), as ``indices [M, S] int32`` and ``sizes [M] int32``; and their sha256."""
    import numpy as np

    from jaxcomm import classifier, kit

    with np.load(dataset_path) as arrays:
        labels = arrays["y_train"]
    shards = classifier.shards_of(labels, kit.RunConfig(num_nodes=num_clients, seed=seed))
    path = folder / f"{dataset_path.stem}_shards_m{num_clients}_seed{seed}.npz"
    np.savez(path, indices=shards.indices, sizes=shards.sizes)
    digest = hashlib.sha256(shards.indices.tobytes() + shards.sizes.tobytes()).hexdigest()
    return path, digest


# --------------------------------------------------------------------------- the machine and the step


def matmul_rates(size: int) -> dict:
    """The machine's float32 matmul rate, GFLOP/s, best of 5 ``size x size`` products, by jax (XLA) and numpy; the
    step floor uses the faster."""
    import numpy as np

    from experiments.benchmark.bench import matmul_gflops

    a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
    a @ a
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - start)
    rates = {"jax_gflops": matmul_gflops(size), "numpy_gflops": 2 * size**3 / best / 1e9, "size": size}
    return rates | {"gflops": max(rates["jax_gflops"], rates["numpy_gflops"])}


def flops_per_client_step(arm: Arm) -> int:
    """FLOPs of one client step (forward and backward of the arm's model on one minibatch: its matrix products and
    convolutions, counted from the jaxpr, :func:`jaxcomm.flops.count`)."""
    import jax
    import jax.numpy as jnp
    import optax

    from jaxcomm import flops

    from .jaxcomm_fedavg import model_of

    model = model_of(arm.model)
    shape = (arm.batch_size, 28, 28, 1) if arm.dataset == "mnist" else (arm.batch_size, 32, 32, 3)
    x = jnp.zeros(shape, jnp.float32)
    params = model.init(jax.random.PRNGKey(0), x[:1])["params"]

    def loss(params, x, y):
        logits, _ = model.apply({"params": params}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    return flops.count(jax.value_and_grad(loss), params, x, jnp.zeros(arm.batch_size, jnp.int32))


def workload_lines(framework: str) -> int:
    """Lines of code of the framework's workload files: neither blank nor comments nor docstrings."""
    total = 0
    for name in WORKLOAD_FILES[framework]:
        in_docstring = False
        for line in (HERE / name).read_text().splitlines():
            text = line.strip()
            quotes = text.count('"""')
            if in_docstring or (quotes == 1 and text.startswith('"""')):
                in_docstring = in_docstring != (quotes == 1)
                continue
            if text and not text.startswith("#") and not (quotes == 2 and text.startswith('"""')):
                total += 1
    return total


# --------------------------------------------------------------------------- children


def python_of(framework: str, config: Config) -> str:
    return (config.peers_python or sys.executable) if framework in PEER_MODULES else sys.executable


def missing(framework: str, python: str) -> str | None:
    """Why ``framework`` cannot run under ``python`` (the modules it lacks), or None."""
    if framework not in PEER_MODULES:
        return None
    probe = ("import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] "
             "if importlib.util.find_spec(m) is None))")
    try:
        proc = subprocess.run([python, "-c", probe, *PEER_MODULES[framework]], capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{python} does not run: {error}"
    lacking = proc.stdout.split()
    if proc.returncode or lacking:
        return f"{', '.join(lacking) or 'its modules'} not installed in {python} ({INSTALL_HINT})"
    return None


def run_child(framework: str, arm: Arm, seed: int, dataset: pathlib.Path, shards: pathlib.Path, config: Config,
              cache_dir: pathlib.Path) -> dict:
    """One framework's run of ``arm`` in a fresh process; its record, with ``exit_seconds`` (spawn to exit)."""
    env = dict(os.environ)
    if framework == "jaxcomm":
        env["JAXCOMM_CACHE_DIR"] = str(cache_dir if config.jaxcomm_cache == "kept" else
                                       tempfile.mkdtemp(prefix="choices-", dir=cache_dir))
    command = [python_of(framework, config), "-m", "experiments.peers.child", framework, "--arm",
               json.dumps(dataclasses.asdict(arm)), "--dataset", str(dataset), "--shards", str(shards), "--seed",
               str(seed)]
    spawned = time.time()
    try:
        proc = subprocess.run([*command, "--spawned", repr(spawned)], capture_output=True, text=True,
                              timeout=config.timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        return {"framework": framework, "arm": arm.name, "seed": seed, "error": f"timed out after {config.timeout} s"}
    exited = time.time() - spawned
    lines = [line for line in proc.stdout.splitlines() if line.startswith(child.MARKER)]
    if not lines:
        return {"framework": framework, "arm": arm.name, "seed": seed,
                "error": f"exit {proc.returncode}, no result: {(proc.stderr or proc.stdout)[-1500:]}"}
    record = json.loads(lines[-1][len(child.MARKER):]) | {"exit_seconds": exited}
    if "error" in record:
        record["stderr_tail"] = proc.stderr[-1500:]
    return record


def _say(record: dict) -> str:
    head = f"  {record['arm']:<26} {record['framework']:<8} seed {record['seed']}"
    if "error" in record:
        return f"{head}: FAILED {record['error'][:300]}"
    if "unavailable" in record:
        return f"{head}: {record['unavailable']}"
    s = record["seconds"]
    return (f"{head}: {record['total_seconds']:7.1f} s end to end (import {s['import']:.1f}, setup "
            f"{s['setup'] + s['build']:.1f}, first round {s['first_round']:.2f}, rest {s['rest']:.1f}, eval "
            f"{s['evaluation']:.2f}), accuracy {record['accuracy']:.2f} %, peak RSS {record['peak_rss_mb']:.0f} MB")


def run(config: Config) -> dict:
    """Every arm of ``config``, every framework in its own process, R repetitions with the frameworks' order rotated
    each time; the rows of the summary (:mod:`.report` reads them)."""
    arms = config.selected()
    probe = matmul_rates(config.probe_size)
    print(f"float32 matmul: {probe['gflops']:.1f} GFLOP/s (jax {probe['jax_gflops']:.1f}, numpy "
          f"{probe['numpy_gflops']:.1f}; {config.probe_size}^2, best of 5)", flush=True)
    skipped = {fw: why for fw in config.frameworks if (why := missing(fw, python_of(fw, config)))}
    for fw, why in skipped.items():
        print(f"skipping {fw}: {why}", file=sys.stderr, flush=True)
    frameworks = [fw for fw in config.frameworks if fw not in skipped]
    runs = {arm.name: {fw: [] for fw in config.frameworks} for arm in arms}
    digests: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        folder = pathlib.Path(tmp)
        datasets = {name: write_dataset(name, folder) for name in sorted({arm.dataset for arm in arms})}
        for rep in range(config.repetitions):
            seed = config.seed + rep
            order = frameworks[rep % len(frameworks):] + frameworks[:rep % len(frameworks)] if frameworks else []
            print(f"repetition {rep + 1}/{config.repetitions} (seed {seed}; order {', '.join(order)})", flush=True)
            for arm in arms:
                shards, digest = write_shards(datasets[arm.dataset], arm.num_clients, seed, folder)
                digests[shards.stem] = digest
                for fw in order:
                    record = run_child(fw, arm, seed, datasets[arm.dataset], shards, config, folder)
                    runs[arm.name][fw].append(record)
                    print(_say(record), flush=True)
    rows = {arm.name: {"arm": dataclasses.asdict(arm), "client_steps": arm.client_steps,
                       "flops_per_client_step": flops_per_client_step(arm), "runs": runs[arm.name]} for arm in arms}
    versions = {}
    for row in rows.values():
        for fw, records in row["runs"].items():
            versions.setdefault(fw, next((r["versions"] for r in records if "versions" in r), None))
    failed = [f"{r['arm']}/{r['framework']}/seed {r['seed']}" for row in rows.values()
              for records in row["runs"].values() for r in records if "error" in r]
    return {"rows": rows, "machine": probe, "frameworks": list(config.frameworks), "skipped": skipped,
            "versions": versions, "workload_lines": {fw: workload_lines(fw) for fw in config.frameworks},
            "shards_sha256": digests, "failed": failed}


def main(argv=None) -> int:
    return harness_cli.cli(argv, experiment="peers", presets=presets.PRESETS, run=run,
                           description=importlib.import_module(__package__).__doc__,
                           write_report=report.write_report)
