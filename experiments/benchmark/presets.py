"""The benchmark's suites: the rows (:class:`Row`: a workload at N nodes, the backends and step loops it times),
sweeps and scale rows of ``full`` (the CPU table), ``quick`` (N <= 8, a smoke test) and ``gpu`` (an accelerator's
table), and the rows a run measures (:func:`selection`).
"""

from __future__ import annotations

import dataclasses

from .bench import BACKENDS, ScaleRow, SweepRow


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
