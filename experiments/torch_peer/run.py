"""The PyTorch peer's workloads, recipes and measurement (the package's docstring says what it measures), and
:func:`main`, the command line (``python -m experiments.torch_peer``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import importlib.util
import json
import os
import pathlib
import sys
import time
from collections.abc import Callable

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:  # the peer column is optional (pyproject's "peer" extra)
    torch = F = nn = None

WORKLOADS = ("student", "cnn")
IMAGE_SHAPES = {"student": (28, 28, 1), "cnn": (32, 32, 3)}  # [H, W, C], the Flax models' layout
TRAIN_SIZES = {"student": 4000, "cnn": 12_800}  # the benchmark's training splits (benchmark/bench.py, model_and_data)
NUM_CLASSES = 10
LEARNING_RATE = 1e-3
MLP_WIDTHS = (784, 32, 32, NUM_CLASSES)
CNN_WIDTHS = (64, 128, 256)
KERNEL, STRIDE = 4, 2
NEGATIVE_SLOPE = 0.2
WARMUP_STEPS = 3


def available() -> str | None:
    """The installed torch's version, or None when torch is not importable."""
    return None if torch is None else torch.__version__


# --------------------------------------------------------------------------- data


@dataclasses.dataclass
class Shards:
    """The training split held in torch: images ``[M, H, W, C] uint8``, labels ``[M] int64``, cut into N equal
    contiguous shards of ``shard_size`` rows (node i holds rows ``i * shard_size ...``; the rest is unused)."""

    images: torch.Tensor
    labels: torch.Tensor
    num_nodes: int
    shard_size: int
    generator: torch.Generator


def training_split(workload: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The benchmark's training images ``[M, H, W, C] uint8`` and labels ``[M] int64`` for ``workload``."""
    import numpy as np

    if workload == "student":
        # The shipped MNIST sample, found without importing jaxcomm (whose import sets glibc's malloc where
        # JAXCOMM_HOST_MEMORY=keep, jaxcomm.host_memory: PyTorch runs as its users run it), read with numpy only.
        path = pathlib.Path(importlib.util.find_spec("jaxcomm").origin).parent / "assets" / "mnist_sample.npz"
        with np.load(path) as npz:
            images, labels = npz["x_train"][: TRAIN_SIZES[workload], ..., None], npz["y_train"][: TRAIN_SIZES[workload]]
    else:
        rng = np.random.default_rng(seed)
        images = (rng.random((TRAIN_SIZES[workload], *IMAGE_SHAPES[workload])) * 255).astype(np.uint8)
        labels = rng.integers(0, NUM_CLASSES, TRAIN_SIZES[workload])
    return torch.from_numpy(np.ascontiguousarray(images)), torch.from_numpy(labels.astype(np.int64))


def shards(workload: str, num_nodes: int, seed: int = 0) -> Shards:
    """Equal shards of the workload's training split for ``num_nodes`` nodes."""
    images, labels = training_split(workload, seed)
    if not 1 <= num_nodes <= len(labels):
        raise ValueError(f"num_nodes must be in [1, {len(labels)}], got {num_nodes}")
    return Shards(images, labels, num_nodes, len(labels) // num_nodes, torch.Generator().manual_seed(seed))


def draw(data: Shards, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every node's minibatch: images ``[N, B, H, W, C] float32`` in [0, 1] and labels ``[N, B] int64``.

    As the engine's draw (:func:`jaxcomm.classifier.minibatch`): B rows with replacement from each node's own
    shard, a gather of uint8 images, then the float conversion of the minibatch only. Labels stay class ids:
    ``F.cross_entropy`` on ids is the engine's one-hot cross-entropy without materialising ``[N, B, C]``.
    """
    positions = torch.randint(0, data.shard_size, (data.num_nodes, batch_size), generator=data.generator)
    rows = (positions + torch.arange(data.num_nodes)[:, None] * data.shard_size).flatten()  # [N B]
    # index_select: 20x faster than advanced indexing data.images[rows] (measured: 0.15 against 3.2 ms, 64 x 32)
    images = data.images.index_select(0, rows).view(data.num_nodes, batch_size, *data.images.shape[1:])
    return images.float().div_(255.0), data.labels.index_select(0, rows).view(data.num_nodes, batch_size)


# --------------------------------------------------------------------------- models


def pairs(widths) -> list[tuple[int, int]]:
    """``(in, out)`` of each layer of a chain of widths."""
    return list(zip(widths[:-1], widths[1:], strict=True))


class StudentStack(nn.Module if torch else object):
    """N student MLPs 784-32-32-10 with parameters stacked ``[N, ...]``; kernels ``[N, in, out]`` (Flax's layout)."""

    def __init__(self, num_nodes: int, widths=MLP_WIDTHS):
        super().__init__()
        self.kernels = nn.ParameterList(nn.Parameter(torch.empty(num_nodes, i, o)) for i, o in pairs(widths))
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(num_nodes, o)) for o in widths[1:])
        for kernel in self.kernels:  # lecun_normal as flax.linen.Dense (speed does not depend on it)
            nn.init.normal_(kernel, std=kernel.shape[1] ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [N, B, H, W, C]`` -> logits ``[N, B, 10]``: one batched matmul per layer for the population."""
        h = x.flatten(2)  # [N, B, 784], in Flax's (H, W, C) order
        for i, (kernel, bias) in enumerate(zip(self.kernels, self.biases, strict=True)):
            h = torch.baddbmm(bias[:, None, :], h, kernel)
            if i < len(self.kernels) - 1:
                h = F.relu(h)
        return h


def student_node() -> nn.Module:
    """One student MLP: ``x [B, H, W, C]`` -> logits ``[B, 10]``."""
    layers = [nn.Flatten()]
    for i, o in pairs(MLP_WIDTHS):
        layers += [nn.Linear(i, o), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class CNNNode(nn.Module if torch else object):
    """One strided CNN. Takes Flax's NHWC ``x [B, H, W, C]``; computes in ``memory_format``.

    "SAME" padding of a 4x4 stride-2 convolution on an even side is 1 on each side (total 4 - 2 = 2). The last
    map is flattened in (H, W, C) order, as Flax's reshape of NHWC, so the Dense kernel is Flax's one transposed.
    """

    def __init__(self, image_shape=IMAGE_SHAPES["cnn"], memory_format=None):
        super().__init__()
        memory_format = memory_format or torch.contiguous_format
        channels = (image_shape[2], *CNN_WIDTHS)
        self.convs = nn.ModuleList(nn.Conv2d(i, o, KERNEL, STRIDE, padding=1) for i, o in pairs(channels))
        side = image_shape[0] // STRIDE ** len(CNN_WIDTHS)
        self.dense = nn.Linear(side * side * CNN_WIDTHS[-1], NUM_CLASSES)
        self.memory_format = memory_format
        self.to(memory_format=memory_format)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, H, W, C]`` -> logits ``[B, 10]``."""
        h = x.permute(0, 3, 1, 2).contiguous(memory_format=self.memory_format)  # a view when channels_last
        for conv in self.convs:
            h = F.leaky_relu(conv(h), NEGATIVE_SLOPE)
        return self.dense(h.permute(0, 2, 3, 1).flatten(1))  # [B, H * W * C], Flax's order


class CNNGroups(nn.Module if torch else object):
    """N strided CNNs as one network: node i's images are channel group i of one batch ``[B, N * C, H, W]``, each
    convolution has ``groups=N`` (weights ``[N * O, I, 4, 4]``, node-major), the Dense layer is a ``bmm``."""

    def __init__(self, num_nodes: int, image_shape=IMAGE_SHAPES["cnn"]):
        super().__init__()
        channels = (image_shape[2], *CNN_WIDTHS)
        self.num_nodes = num_nodes
        self.convs = nn.ModuleList(nn.Conv2d(num_nodes * i, num_nodes * o, KERNEL, STRIDE, padding=1,
                                             groups=num_nodes) for i, o in pairs(channels))
        side = image_shape[0] // STRIDE ** len(CNN_WIDTHS)
        fan_in = side * side * CNN_WIDTHS[-1]
        self.kernel = nn.Parameter(torch.randn(num_nodes, fan_in, NUM_CLASSES) * fan_in ** -0.5)
        self.bias = nn.Parameter(torch.zeros(num_nodes, NUM_CLASSES))
        self.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [N, B, H, W, C]`` -> logits ``[N, B, 10]``."""
        n, b, height, width, c = x.shape
        h = x.permute(1, 2, 3, 0, 4).reshape(b, height, width, n * c).permute(0, 3, 1, 2)  # channels_last [B, NC, H, W]
        for conv in self.convs:
            h = F.leaky_relu(conv(h), NEGATIVE_SLOPE)
        side = h.shape[-1]
        h = h.permute(0, 2, 3, 1).reshape(b, side, side, n, -1).permute(3, 0, 1, 2, 4).reshape(n, b, -1)
        return torch.baddbmm(self.bias[:, None, :], h, self.kernel)


# --------------------------------------------------------------------------- Flax weights in


def _t(array) -> torch.Tensor:
    import numpy as np

    return torch.from_numpy(np.array(array, dtype=np.float32))


def _conv_weight(kernel) -> torch.Tensor:
    """Flax ``[kh, kw, I, O]`` -> torch ``[O, I, kh, kw]`` (both cross-correlate)."""
    return _t(kernel).permute(3, 2, 0, 1)


def load_flax(model: nn.Module, params: list[dict]) -> None:
    """Copies Flax parameters into ``model``: ``params`` holds one Flax ``params`` tree per node (one for a
    single-node module, N for a stacked one), of :class:`jaxcomm.models.MLP` or :class:`jaxcomm.models.StridedCNN`."""
    with torch.no_grad():
        _load_flax(model, params)


def _load_flax(model: nn.Module, params: list[dict]) -> None:
    if isinstance(model, StudentStack):
        for i, (kernel, bias) in enumerate(zip(model.kernels, model.biases, strict=True)):
            kernel.copy_(torch.stack([_t(p[f"Dense_{i}"]["kernel"]) for p in params]))
            bias.copy_(torch.stack([_t(p[f"Dense_{i}"]["bias"]) for p in params]))
    elif isinstance(model, nn.Sequential):  # student_node
        (p,) = params
        for i, linear in enumerate(m for m in model if isinstance(m, nn.Linear)):
            linear.weight.copy_(_t(p[f"Dense_{i}"]["kernel"]).T)
            linear.bias.copy_(_t(p[f"Dense_{i}"]["bias"]))
    elif isinstance(model, CNNNode):
        (p,) = params
        for i, conv in enumerate(model.convs):
            conv.weight.copy_(_conv_weight(p[f"Conv_{i}"]["kernel"]))
            conv.bias.copy_(_t(p[f"Conv_{i}"]["bias"]))
        model.dense.weight.copy_(_t(p["Dense_0"]["kernel"]).T)
        model.dense.bias.copy_(_t(p["Dense_0"]["bias"]))
    elif isinstance(model, CNNGroups):
        for i, conv in enumerate(model.convs):
            conv.weight.copy_(torch.cat([_conv_weight(p[f"Conv_{i}"]["kernel"]) for p in params]))
            conv.bias.copy_(torch.cat([_t(p[f"Conv_{i}"]["bias"]) for p in params]))
        model.kernel.copy_(torch.stack([_t(p["Dense_0"]["kernel"]) for p in params]))
        model.bias.copy_(torch.stack([_t(p["Dense_0"]["bias"]) for p in params]))
    else:
        raise TypeError(f"no Flax layout known for {type(model).__name__}")


# --------------------------------------------------------------------------- recipes


@functools.cache
def fused_adam() -> bool:
    """Whether this build's ``torch.optim.Adam(fused=True)`` steps CPU tensors (tried once on a small one)."""
    try:
        probe = nn.Parameter(torch.zeros(4))
        probe.grad = torch.ones(4)
        torch.optim.Adam([probe], fused=True).step()
    except (RuntimeError, ValueError, TypeError):
        return False
    return True


def adam(parameters) -> torch.optim.Optimizer:
    """optax.adam(1e-3)'s update (same betas and eps, no eps inside the root), fused where available."""
    kind = {"fused": True} if fused_adam() else {"foreach": True}
    return torch.optim.Adam(parameters, lr=LEARNING_RATE, betas=(0.9, 0.999), eps=1e-8, **kind)


@dataclasses.dataclass
class Recipe:
    """One way to train the population. ``logits(images [N, B, H, W, C]) -> [N, B, 10]`` is every node's
    forward pass; ``forward_backward(images, labels [N, B])`` leaves every node's gradient of its own mean loss
    in ``.grad``; ``optimizer_step()`` applies Adam to every node; ``modules`` hold the weights (one stacked
    module, or one per node) in the order :func:`load_flax` fills them."""

    name: str
    modules: list
    logits: Callable[[torch.Tensor], torch.Tensor]
    forward_backward: Callable[[torch.Tensor, torch.Tensor], None]
    optimizer_step: Callable[[], None]

    def load(self, params: list[dict]) -> None:
        """Flax parameters, one tree per node, into this recipe's modules."""
        if len(self.modules) == 1:
            load_flax(self.modules[0], params)
        else:
            for module, p in zip(self.modules, params, strict=True):
                load_flax(module, [p])


def _stacked(name: str, model: nn.Module, logits_of: Callable) -> Recipe:
    """A recipe with one module for the population: ``logits_of(images [N, B, ...]) -> [N, B, 10]``."""
    optimizer = adam(model.parameters())

    def forward_backward(images, labels):
        optimizer.zero_grad(set_to_none=True)
        logits = logits_of(images)
        # The sum over nodes of each node's mean loss: node i's gradient is that of its own loss alone.
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum") / labels.shape[1]
        loss.backward()

    return Recipe(name, [model], logits_of, forward_backward, optimizer.step)


def _loop(name: str, models: list[nn.Module]) -> Recipe:
    """N modules, N optimisers, one node after another (PyTorch's everyday code, repeated)."""
    optimizers = [adam(m.parameters()) for m in models]

    def forward_backward(images, labels):
        for model, optimizer, x, y in zip(models, optimizers, images, labels, strict=True):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()

    def optimizer_step():
        for optimizer in optimizers:
            optimizer.step()

    def logits(images):
        return torch.stack([model(x) for model, x in zip(models, images, strict=True)])

    return Recipe(name, models, logits, forward_backward, optimizer_step)


def _vmapped(model: StudentStack) -> Callable:
    """``images [N, B, ...] -> logits [N, B, 10]`` by ``torch.func.vmap`` of one node's ``functional_call``."""
    node = student_node().to("meta")  # a template: its weights come from ``model``'s stacked ones
    names = [n for n, _ in node.named_parameters()]

    def logits_of(images):
        weights = [w for pair in zip(model.kernels, model.biases, strict=True) for w in pair]
        # nn.Linear's weight is [out, in]; the stacked kernel is Flax's [in, out].
        stacked = {n: (w.transpose(1, 2) if w.ndim == 3 else w) for n, w in zip(names, weights, strict=True)}
        return torch.func.vmap(lambda p, x: torch.func.functional_call(node, p, (x,)))(stacked, images)

    return logits_of


def recipes(workload: str, num_nodes: int) -> dict[str, Callable[[], Recipe]]:
    """The workload's recipes by name, each built on demand (a recipe's weights are random; :meth:`Recipe.load`
    replaces them)."""
    if workload == "student":
        def vmap_recipe():
            model = StudentStack(num_nodes)
            return _stacked("stacked_vmap", model, _vmapped(model))

        def bmm_recipe():
            model = StudentStack(num_nodes)
            return _stacked("stacked_bmm", model, model)

        return {"stacked_bmm": bmm_recipe, "stacked_vmap": vmap_recipe,
                "loop": lambda: _loop("loop", [student_node() for _ in range(num_nodes)])}
    if workload == "cnn":
        def grouped():
            model = CNNGroups(num_nodes)
            return _stacked("grouped", model, model)

        return {"loop": lambda: _loop("loop", [CNNNode() for _ in range(num_nodes)]),
                "loop_channels_last": lambda: _loop("loop_channels_last", [
                    CNNNode(memory_format=torch.channels_last) for _ in range(num_nodes)]),
                "grouped": grouped}
    raise ValueError(f"workload must be one of {WORKLOADS}, got {workload!r}")


def num_params(module: nn.Module, num_nodes: int = 1) -> int:
    """Parameters per node of ``module`` (a stacked module holds ``num_nodes`` nodes)."""
    total = sum(p.numel() for p in module.parameters())
    return total // num_nodes


# --------------------------------------------------------------------------- timing


def seconds_per_call(fn: Callable[[], object], seconds: float) -> float:
    """Seconds per call of ``fn`` after WARMUP_STEPS calls, called for at least ``seconds``."""
    for _ in range(WARMUP_STEPS):
        fn()
    calls, start = 0, time.perf_counter()
    while calls == 0 or time.perf_counter() - start < seconds:
        fn()
        calls += 1
    return (time.perf_counter() - start) / calls


def train_step(recipe: Recipe, data: Shards, batch_size: int) -> Callable[[], None]:
    """One step of the whole population: draw, forward, backward, Adam."""
    def step():
        recipe.forward_backward(*draw(data, batch_size))
        recipe.optimizer_step()

    return step


def parts(recipe: Recipe, data: Shards, batch_size: int, seconds: float) -> dict[str, float]:
    """Seconds per population step of the draw, of forward + backward (one fixed minibatch) and of Adam alone."""
    batch = draw(data, batch_size)
    return {"draw": seconds_per_call(lambda: draw(data, batch_size), seconds),
            "forward_backward": seconds_per_call(lambda: recipe.forward_backward(*batch), seconds),
            # the gradients of the last backward stay in place: Adam's cost does not depend on their values
            "optimizer": seconds_per_call(recipe.optimizer_step, seconds)}


def measure(workload: str, num_nodes: int, batch_size: int = 32, *, seconds: float = 2.0,
            threads: int | None = None) -> dict:
    """Node-steps per second of every recipe of ``workload`` with ``num_nodes`` nodes, the best, and its parts.

    Args:
      workload: "student" or "cnn".
      num_nodes: N.
      batch_size: B, each node's minibatch.
      seconds: timed per recipe and per part, after WARMUP_STEPS steps.
      threads: torch's intra-op threads; default ``os.cpu_count()``.

    Returns:
      ``{"torch", "threads", "adam", "recipes": {name: node-steps/s}, "best_recipe", "best_node_steps_per_s",
      "parts": {"draw", "forward_backward", "optimizer"}}`` (parts in seconds per step of the population), plus
      ``"errors": {name: message}`` for recipes that failed.
    """
    if torch is None:
        raise RuntimeError("torch is not installed (pip install -e '.[peer]')")
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {WORKLOADS}, got {workload!r}")
    threads = threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    data = shards(workload, num_nodes)
    rates, errors, built = {}, {}, {}
    for name, build in recipes(workload, num_nodes).items():
        try:
            built[name] = build()
            rates[name] = num_nodes / seconds_per_call(train_step(built[name], data, batch_size), seconds)
        except RuntimeError as error:  # e.g. a convolution this build's oneDNN rejects: the others still count
            errors[name] = f"{type(error).__name__}: {error}"
            built.pop(name, None)
    if not rates:
        raise RuntimeError(f"every recipe failed: {errors}")
    best = max(rates, key=rates.get)
    result = {"workload": workload, "num_nodes": num_nodes, "batch_size": batch_size, "device": "cpu",
              "torch": torch.__version__,
              "threads": threads, "adam": "fused" if fused_adam() else "foreach", "recipes": rates,
              "best_recipe": best, "best_node_steps_per_s": rates[best],
              "parts": parts(built[best], data, batch_size, seconds)}
    if errors:
        result["errors"] = errors
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.torch_peer",
                                     description=importlib.import_module(__package__).__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--nodes", type=int, required=True, help="N, the population's size")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=2.0, help="timed per recipe and per part")
    parser.add_argument("--threads", type=int, default=None, help="torch's threads (default: every core)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line, nothing else")
    args = parser.parse_args(argv)
    if available() is None:
        print("torch is not installed (pip install -e '.[peer]')", file=sys.stderr)
        return 1
    result = measure(args.workload, args.nodes, args.batch_size, seconds=args.seconds, threads=args.threads)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"torch {result['torch']}, {result['threads']} threads, Adam {result['adam']}: "
          f"{args.workload}, {args.nodes} nodes, B = {args.batch_size}")
    for name, rate in sorted(result["recipes"].items(), key=lambda item: -item[1]):
        print(f"  {name:<20} {rate:>10,.1f} node-steps/s")
    for name, message in result.get("errors", {}).items():
        print(f"  {name:<20} failed: {message}")
    print(f"best: {result['best_recipe']}; per population step: "
          + ", ".join(f"{part} {1e3 * s:.2f} ms" for part, s in result["parts"].items()))
    return 0

