"""The peer in the same run: PyTorch (CPU) training the benchmark's populations, timed as the benchmark times JAX.

Issue 41, item 2. :mod:`experiments.benchmark` measures node-steps per second of N nodes, each node one minibatch
draw, forward, backward and Adam step. This module runs the same workloads in PyTorch, in the same process
conditions (``torch.set_num_threads``, default every core), with a few ways a PyTorch user would write them
("recipes"), and reports the best:

* ``student``: the MLP 784-32-32-10 (ReLU; :class:`jaxcomm.models.MLP` ``hidden=(32, 32)``, 26,506 parameters)
  on MNIST 28x28x1 (the shipped sample's 4,000 training digits, as the benchmark);
* ``cnn``: the chapter-2 strided CNN (:class:`jaxcomm.models.StridedCNN`: three 4x4 stride-2 "SAME" convolutions
  64-128-256 with bias, LeakyReLU 0.2, flatten, Dense 10) on 32x32x3 images (12,800 random uint8 images, as the
  benchmark: speed does not depend on pixel values).

Every node draws B rows of its own shard (N disjoint, equal shards of the training split), gathers their uint8
images, converts them to float in [0, 1], and takes one Adam step (lr 1e-3, betas 0.9 / 0.999, eps 1e-8: optax's
defaults) on its mean softmax cross-entropy. The architectures match the Flax models exactly: same parameter
count, same logits given the same weights (:func:`load_flax`; tests/test_torch_peer.py checks both, and one Adam
step against optax). No jaxcomm code runs here (the student's digits are read from the package's file with
numpy): the benchmark runs it in a child process.

    python -m experiments.torch_peer --workload student --nodes 64      # every recipe, the best, its parts
    python -m experiments.torch_peer --workload cnn --nodes 10 --json   # the same as one JSON line

Recipes: student ``stacked_bmm`` (parameters stacked ``[N, ...]``, one ``torch.baddbmm`` per layer for the
population), ``stacked_vmap`` (``torch.func.vmap`` of ``functional_call`` over the stacked parameters) and
``loop`` (N ``nn.Module`` s and N optimisers, one node after another); cnn ``loop`` (N modules, NCHW, oneDNN),
``loop_channels_last`` (the same in ``torch.channels_last``) and ``grouped`` (the N nodes' convolutions as one
convolution of ``groups=N``). Adam is ``fused=True`` where this build has it on CPU, else ``foreach=True``;
Adam is elementwise, so one optimiser over a stacked population steps every node as its own would.
"""

from .run import (
    IMAGE_SHAPES,
    LEARNING_RATE,
    NUM_CLASSES,
    TRAIN_SIZES,
    WORKLOADS,
    Recipe,
    Shards,
    available,
    draw,
    load_flax,
    main,
    measure,
    num_params,
    recipes,
    shards,
)

__all__ = ["IMAGE_SHAPES", "LEARNING_RATE", "NUM_CLASSES", "TRAIN_SIZES", "WORKLOADS", "Recipe", "Shards", "available",
           "draw", "load_flax", "main", "measure", "num_params", "recipes", "shards"]
