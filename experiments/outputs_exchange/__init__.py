"""Thesis ch. 2, supervised: CIFAR-10 CNN nodes exchanging outputs — Tables 2.1 and 2.2, and §2.3.1's studies.

    JAXCOMM_DATA_DIR=/work/shared-cifar python -m experiments.outputs_exchange --preset cpu
    python -m experiments.outputs_exchange --preset smoke --out /tmp/oe      # seconds, shipped MNIST sample
    python -m experiments.outputs_exchange report results/outputs_exchange   # redraw table.md and the plots

N strided-CNN nodes (:class:`jaxcomm.models.cnn.StridedCNN`) each hold a disjoint 1/N of the
training set and run Algorithm 2 on the engine's network step (:func:`jaxcomm.network.train_network`),
trained by the chapter's recipe (:class:`jaxcomm.recipes.Chapter2Recipe`, whose fields this
experiment's config inherits): fully connected, consume with probability p_c = 0.5 (§2.3.1.2),
broadcast with p_b = p_c / (N - 1) so that inboxes stay in equilibrium, inbox of 16 minibatches,
Adam. A message is the indices of the minibatch a node just trained on plus its payload: true
labels, logits (soft labels softmax(v / tau) at the receiver, eq. 2.2.1-2.2.2) or top-level
features (MSE, eq. 2.2.3). Every
``eval_every`` steps every node predicts the whole test set once; the node average and the
collective decision under all four weightings of :mod:`jaxcomm.decision` are computed from those
same predictions.

Rows (Tables 2.1/2.2): ``1_node_no_sharing``, ``10_nodes_no_sharing``, ``10_nodes_logits``,
``10_nodes_true_labels``, ``10_nodes_features``, ``20_nodes_true_labels``; accuracy at the final
step and the first evaluated step at which the target accuracy is reached.

Bandwidth: ``bytes_sent_per_node_step`` is measured, the inbox ``sent`` counter (one copy per
receiver) times :func:`jaxcomm.exchange.message_bytes` (int32 indices + payload: a uint8 class id
per sample for true labels, float32 logits or features) over N x steps.
``allreduce_bytes_per_node_step`` is what a synchronous ring all-reduce of the same CNN's float32
gradients moves per node and step: 2 (N - 1) / N x 4 x num_params bytes (each node sends that
much and receives as much; 0 for one node).

Studies (§2.3.1, reported in words by the thesis): number of nodes, neighbours p on the ring,
consume/broadcast frequencies, temperature of the shared logits; each run once, with
``study_steps`` steps and ``study_widths`` channels. Identical configurations are run once and
shared between studies.

References:
  Lacaille (2018), §2.2-2.3.2, Algorithms 2-3, eq. 2.2.1-2.2.3, Tables 2.1 and 2.2.
"""

from .presets import (
    CPU_SCALE_DOWNS,
    PRESETS,
    OutputsExchangeConfig,
    cpu_config,
    smoke_config,
    study_runs,
    thesis_config,
    with_recipe,
)
from .report import (
    EXPERIMENT,
    PAIRED_KEYS,
    ROWS,
    SELECTION,
    STUDIES,
    STUDY_ORDER,
    THESIS_TABLE,
    write_report,
)
from .run import main, row_network, run, run_names, study_network

__all__ = ["CPU_SCALE_DOWNS", "EXPERIMENT", "PAIRED_KEYS", "PRESETS", "ROWS", "SELECTION", "STUDIES", "STUDY_ORDER",
           "THESIS_TABLE", "OutputsExchangeConfig", "cpu_config", "main", "row_network", "run", "run_names",
           "smoke_config", "study_network", "study_runs", "thesis_config", "with_recipe", "write_report"]
