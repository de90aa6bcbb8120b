"""Thesis ch. 2, unsupervised: VAE and BiGAN nodes exchanging features — Table 2.3.

    JAXCOMM_DATA_DIR=/work/shared-cifar python -m experiments.unsupervised_exchange --preset cpu
    python -m experiments.unsupervised_exchange --preset smoke --out /tmp/ue   # seconds, shipped MNIST sample
    python -m experiments.unsupervised_exchange report results/unsupervised_exchange   # redraw table.md + plots

N unsupervised nodes run Algorithm 2 on the engine's network step (:func:`jaxcomm.network.train_network`
with a :class:`jaxcomm.network.NodeProgram`), each on a disjoint 1/N of the training split, no labels
read: VAE nodes (:func:`jaxcomm.unsupervised.vae_program`) maximise their ELBO, BiGAN nodes
(:func:`jaxcomm.unsupervised.bigan_program`) play the BiGAN game. With communication the network is
fully connected, nodes consume with p_c = 0.5 and broadcast with p_c / (N - 1) (the chapter's
equilibrium, §2.3.1.2); a message is the indices of the minibatch the sender trained on and its
features: the VAE's posterior (mu, logvar), pulled toward by the receiver with KL(q_sender || q_receiver),
or the BiGAN's E(x), matched with the MSE of eq. 2.2.3 (§2.2.4.2).

Evaluation (§2.2.4.1, §2.3.3): every ``eval_every`` steps the local objective (-ELBO and its terms;
the BiGAN's losses) is measured on a fixed validation batch. At every ``probe_every`` steps (a
"stage"), every node's frozen encoder features (VAE: posterior mean; BiGAN: E(x)) of the whole
training, validation and test splits are extracted once and a linear softmax classifier per node
is trained on the whole labelled training split with early stopping on the validation split (all
nodes' probes together, vmapped). The node average and the collective decision (Algorithm 3,
confident nodes weighted more; the other weightings are recorded) of the probes' probabilities are
measured on the test split. The stage with the best validation node average is reported.

Rows (Table 2.3): ``vae_1_node``, ``vae_10_nodes_no_comm``, ``vae_10_nodes_full_comm``,
``bigan_1_node``, ``bigan_10_nodes_no_comm``, ``bigan_10_nodes_full_comm``; beside them
``*_full_comm_add``, where a consumed minibatch trains the node's own objective plus the exchange
loss instead of the exchange loss alone (``consumed_objective="add"``; with "replace" about half
of a communicating node's steps leave its own objective). Every row is paired by seed with the
untrained encoders of its seed (the control) and with the rows it is compared to.

References:
  Lacaille (2018), §2.2.4, §2.3.3, Algorithms 2-3, eq. 2.2.3, Table 2.3.
"""

from .presets import (
    CPU_SCALE_DOWNS,
    DATASETS,
    EXPERIMENT,
    PRESETS,
    UnsupervisedExchangeConfig,
    cpu_config,
    smoke_config,
    thesis_config,
)
from .report import ROW_OBJECTIVES, ROWS, THESIS_TABLE, write_report
from .run import load, main, run, train

__all__ = ["CPU_SCALE_DOWNS", "DATASETS", "EXPERIMENT", "PRESETS", "ROWS", "ROW_OBJECTIVES", "THESIS_TABLE",
           "UnsupervisedExchangeConfig", "cpu_config", "load", "main", "run", "smoke_config", "thesis_config", "train",
           "write_report"]
