"""Chapter 2's training recipe as a value: the model, optimiser and sharing settings a network of nodes trains with.

The thesis' supervised experiments (§2.3) and every comparison built on them
(output sharing against gradient exchange, reliability, ...) train the same
nodes: a strided CNN on CIFAR-10 (an MLP on MNIST), Adam, minibatches of B,
fully connected nodes consuming with probability p_c and broadcasting at the
equilibrium rate ``p_b = factor x p_c / (N - 1)`` (:func:`jaxcomm.inbox.equilibrium_broadcast_prob`).
A :class:`Chapter2Recipe` holds those choices once; :meth:`Chapter2Recipe.model`
and :meth:`Chapter2Recipe.network` build the Flax model and the
:class:`jaxcomm.network.NetworkConfig` of any number of nodes and content from it.
An experiment's config extends it with what the experiment runs (rows, studies,
budgets), so command-line overrides of the recipe's fields stay flat.

:func:`summarize` turns :func:`jaxcomm.network.train_network`'s result into the
chapter's per-run numbers (accuracies, inbox counters, bytes per node and step
beside a dense all-reduce's); :func:`steps_to_target` reads Table 2.2's
steps-to-target from an evaluation history.

Example::

    recipe = recipes.cpu()
    dataset = recipe.load()
    model = recipe.model(dataset.num_classes)
    out = network.train_network(recipe.network(10, "true_labels", eval_every=500), model, dataset)
    row = recipes.summarize(out, num_params=bandwidth.model_num_params(model, dataset.train.images.shape[1:]))

References:
  Lacaille (2018), §2.2-2.3, Algorithm 2, Tables 2.1 and 2.2.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import numpy as np

from jaxcomm import bandwidth, data, driver, exchange, inbox, network, population, stats
from jaxcomm.models import MLP
from jaxcomm.models.cnn import NORMS, StridedCNN
from jaxcomm.validation import integer, named_fields, one_of, positive, probability, require, widths

__all__ = ["Chapter2Recipe", "PRESETS", "cpu", "describe", "smoke", "steps_to_target", "summarize", "thesis"]


@named_fields
@dataclasses.dataclass(frozen=True)
class Chapter2Recipe:
    """How chapter 2's nodes train; validated on construction. The defaults are the cpu recipe (:func:`cpu`).

    Attributes:
      dataset: one of :data:`jaxcomm.data.DATASET_NAMES`: "cifar10" (the chapter's data; strided CNN
        nodes) or an MNIST variant (MLP nodes, for smoke tests).
      data_dir: where the dataset lives ("" = ``JAXCOMM_DATA_DIR`` or tfds).
      validation_size: the last training examples held out of every shard as the validation split
        (CIFAR-10: 5,000), on which recipes, targets and early stops are chosen; test accuracy is reported.
      widths: the strided CNN's channels (CIFAR-10) or the MLP's hidden widths (MNIST).
      hidden: width of the CNN's dense layer before the logits, whose output is the exchanged
        "features" (0: none, the flattened last convolution is).
      norm: the CNN's normalisation, one of :data:`jaxcomm.models.cnn.NORMS`.
      augment: random flips and 4-pixel-padded crops of every training minibatch (CIFAR-10 only).
      batch_size: B, per node and per message.
      learning_rate: Adam's step size (thesis: Adam defaults).
      lr_schedule: "constant" (the thesis) or "cosine" (to 0 at each run's last step),
        :data:`jaxcomm.network.LR_SCHEDULES`.
      consume_prob: p_c; nodes broadcast with ``broadcast_factor x p_c / (out-neighbours)``.
      broadcast_factor: 1 keeps the inboxes in equilibrium (§2.3.1.2).
      inbox_capacity: K messages per inbox.
      temperature: tau of the soft labels made from shared logits.
      num_steps: training steps of a run.
      backend: the node lift's backend ("auto": measured fastest for the model and N; "map" runs
        nodes one after another under ``lax.map``, compiled once whatever N).
      seed: seeds partitions, initialisations and every draw.
    """

    dataset: str = "cifar10"
    data_dir: str = ""
    validation_size: int = 5000
    widths: tuple[int, ...] = (16, 32, 64)
    hidden: int = 128
    norm: str = "batch"
    augment: bool = False
    batch_size: int = 32
    learning_rate: float = 3e-3
    lr_schedule: str = "cosine"
    consume_prob: float = 0.5
    broadcast_factor: float = 1.0
    inbox_capacity: int = 16
    temperature: float = 1.0
    num_steps: int = 5000
    backend: str = "auto"
    seed: int = 0

    def __post_init__(self):
        one_of("dataset", self.dataset, data.DATASET_NAMES)
        require(isinstance(self.data_dir, str), "data_dir", "a string", self.data_dir)
        integer("validation_size", self.validation_size, low=0)
        widths("widths", self.widths)
        integer("hidden", self.hidden, low=0)
        one_of("norm", self.norm, NORMS)
        require(isinstance(self.augment, bool), "augment", "True or False", self.augment)
        for name in ("batch_size", "inbox_capacity", "num_steps"):
            integer(name, getattr(self, name), low=1)
        positive("learning_rate", self.learning_rate)
        one_of("lr_schedule", self.lr_schedule, network.LR_SCHEDULES)
        probability("consume_prob", self.consume_prob)
        positive("broadcast_factor", self.broadcast_factor)
        positive("temperature", self.temperature)
        one_of("backend", self.backend, ("auto", *population.BACKENDS))
        integer("seed", self.seed)

    def load(self) -> data.ImageDataset:
        """The recipe's dataset (:func:`jaxcomm.data.load_dataset`), its last ``validation_size`` training
        examples held out as the validation split."""
        return data.load_dataset(self.dataset, self.data_dir or None, validation_size=self.validation_size)

    def model(self, num_classes: int, *, widths: tuple[int, ...] | None = None) -> nn.Module:
        """A node's classifier: the strided CNN on CIFAR-10, an MLP otherwise.

        Args:
          num_classes: C.
          widths: channels (or hidden widths) instead of the recipe's ``widths``.
        """
        channels = self.widths if widths is None else widths
        if self.dataset == "cifar10":
            return StridedCNN(widths=channels, num_classes=num_classes, hidden=self.hidden or None, norm=self.norm)
        return MLP(hidden=channels, num_classes=num_classes)

    def network(self, num_nodes: int, content: str, *, eval_every: int, steps: int | None = None,
                topology: str = "full", num_neighbours: int = 1, consume_prob: float | None = None,
                broadcast_factor: float | None = None, temperature: float | None = None) -> network.NetworkConfig:
        """One network of the chapter: ``num_nodes`` nodes sharing ``content`` at the equilibrium broadcast rate.

        Fully connected by default (out-degree N - 1), or a ring of ``num_neighbours``; nodes consume with
        p_c and broadcast with ``factor x p_c / out-degree``. One node, or content "none", shares nothing
        (p_c = p_b = 0).

        Args:
          num_nodes: N >= 1.
          content: one of :data:`jaxcomm.exchange.CONTENTS`.
          eval_every: steps between evaluations.
          steps: training steps (default the recipe's ``num_steps``).
          topology: "full" or another of :data:`jaxcomm.network.TOPOLOGIES` with ``num_neighbours``.
          num_neighbours: p, out-neighbours when not fully connected (capped at N - 1).
          consume_prob, broadcast_factor, temperature: instead of the recipe's.
        """
        p_c = self.consume_prob if consume_prob is None else consume_prob
        factor = self.broadcast_factor if broadcast_factor is None else broadcast_factor
        fanout = (num_nodes - 1) if topology == "full" else num_neighbours
        sharing = content != "none" and num_nodes > 1
        return network.NetworkConfig(
            num_nodes=num_nodes, topology=topology, num_neighbours=min(num_neighbours, num_nodes - 1),
            content=content if sharing else "none", consume_prob=p_c if sharing else 0.0,
            broadcast_prob=inbox.equilibrium_broadcast_prob(p_c, fanout, factor) if sharing else 0.0,
            temperature=self.temperature if temperature is None else temperature,
            inbox_capacity=self.inbox_capacity, batch_size=self.batch_size, learning_rate=self.learning_rate,
            lr_schedule=self.lr_schedule, augment=self.augment and self.dataset == "cifar10",
            num_steps=self.num_steps if steps is None else steps, eval_every=eval_every,
            backend=self.backend, seed=self.seed)

    def describe(self) -> str:
        """The model and optimiser in words (:func:`describe`)."""
        return describe(dataclasses.asdict(self))


def describe(config: Mapping[str, Any]) -> str:
    """The model and optimiser a recipe (or a run's summary ``config`` dict holding its fields) trains with.

    E.g. "strided CNN, channels (16, 32, 64), dense 128, norm batch, augmentation False; batch 32,
    Adam 0.003 (cosine)". Configs written before ``lr_schedule`` existed read as "constant".
    """
    if config["dataset"] == "cifar10":
        model = (f"strided CNN, channels {tuple(config['widths'])}, dense {config['hidden']}, norm {config['norm']}, "
                 f"augmentation {config['augment']}")
    else:
        model = f"MLP, hidden {tuple(config['widths'])}"
    return (f"{model}; batch {config['batch_size']}, Adam {config['learning_rate']} "
            f"({config.get('lr_schedule', 'constant')})")


def cpu() -> Chapter2Recipe:
    """CNN channels 16-32-64 (a quarter of the thesis'), BatchNorm, a 128-wide dense layer, no augmentation, Adam
    3e-3 with a cosine decay, 5,000 steps: the best of 16 candidates on the validation split
    (``experiments/chapter2_recipe/``, ``results/outputs_exchange/recipe/``), and sized for 2 CPU cores."""
    return Chapter2Recipe()


def thesis() -> Chapter2Recipe:
    """The thesis' settings, for an accelerator: 64-128-256 channels, Adam defaults (1e-3, constant), no
    augmentation, 5,000 steps."""
    return Chapter2Recipe(widths=(64, 128, 256), hidden=256, augment=False, learning_rate=1e-3,
                          lr_schedule="constant", num_steps=5000)


def smoke() -> Chapter2Recipe:
    """Seconds: 16-wide MLP nodes on the shipped MNIST sample (1,000 of its 5,000 training digits held out for
    validation), 20 steps."""
    return Chapter2Recipe(dataset="mnist_sample", validation_size=1000, widths=(16,), num_steps=20)


PRESETS: dict[str, Callable[[], Chapter2Recipe]] = {"smoke": smoke, "cpu": cpu, "thesis": thesis}
"""The recipe presets, by name (experiments' ``--preset`` names)."""


def validation_target(curves: Sequence[Mapping[str, Any]]) -> float | None:
    """Table 2.2's target chosen on validation, as the thesis' 85 % sits at its single node's final accuracy
    (84.5 %): the single node's final validation accuracy, mean over seeds, rounded to the nearest point. ``curves``:
    a chapter-2 run's (``experiments/outputs_exchange/``: ``kind`` "row", ``nodes``, ``validation_avg_accuracy``
    per evaluation). None without a single-node row evaluated on validation."""
    single = [c["validation_avg_accuracy"][-1] for c in curves
              if c.get("kind") == "row" and c.get("nodes") == 1 and c.get("validation_avg_accuracy")]
    return float(round(sum(single) / len(single))) if single else None


def steps_to_target(history: Sequence[Mapping[str, Any]], target: float,
                    key: Callable[[Mapping[str, Any]], float]) -> int | None:
    """The first evaluated step whose accuracy ``key(record)`` is >= ``target`` (Table 2.2), or None.

    Args:
      history: evaluation records in step order, each with a ``step``.
      target: accuracy in %.
      key: reads a record's accuracy, e.g. ``lambda r: r["collective_accuracy"]["negentropy"]``.
    """
    record = driver.first_reaching(history, target, key)
    return None if record is None else int(record["step"])


def summarize(out: Mapping[str, Any], *, num_params: int) -> dict[str, Any]:
    """A trained network's numbers: final accuracies, inbox counters, bytes per node and step, its settings.

    Args:
      out: :func:`jaxcomm.network.train_network`'s result (its ``network``, ``history``, ``final``,
        ``steps_done``, ``train_seconds``).
      num_params: P of one node's model (:func:`jaxcomm.bandwidth.model_num_params`), for the dense
        all-reduce it is compared with.

    Returns:
      ``nodes``, ``content``, ``topology``, ``num_neighbours`` (out-degree), ``consume_prob``,
      ``broadcast_prob``, ``temperature``; ``avg_accuracy``, ``collective_accuracy`` (negentropy),
      ``collective_accuracy_by_weighting``, ``node_accuracy_min_max``; ``steps``;
      ``bytes_sent_per_node_step`` (measured: the inbox ``sent`` copies x ``message_bytes`` / (N x steps),
      :func:`jaxcomm.bandwidth.bytes_per_node_step`), ``message_bytes`` (one message,
      :func:`jaxcomm.exchange.message_bytes`), ``allreduce_bytes_per_node_step`` (a ring all-reduce of
      the gradients, :func:`jaxcomm.bandwidth.allreduce_bytes`), ``num_params``, ``counters``;
      ``data_model`` (of the bytes), ``message_bytes_shared`` and ``bytes_sent_per_node_step_shared``
      (the same messages with indices for inputs, the "shared" data model);
      ``consumed_fraction`` (mean over evaluations), ``final_loss``, ``seconds`` (``out``'s
      ``train_seconds``, 0.1 s: time in training chunks, their first compilation included, evaluations not; for a
      run of a sweep trained as one population, the whole sweep's), ``lift`` (``"backend/step_loop"`` it
      trained under: backends agree to float32 rounding, not bit for bit); when the records hold a
      ``validation`` evaluation (``eval_split=("test", "validation")``),
      ``validation_avg_accuracy`` and ``validation_collective_accuracy`` (negentropy) at the final step.
    """
    net, history, final = out["network"], out["history"], out["final"]
    config = net.config
    shared_bytes = exchange.message_bytes(net.exchange, config.batch_size, net.payload_dim, sample_bytes=0,
                                          data_model="shared")
    return {
        "nodes": config.num_nodes, "content": config.content, "topology": config.topology,
        "num_neighbours": config.num_neighbours if config.topology != "full" else config.num_nodes - 1,
        "consume_prob": config.consume_prob, "broadcast_prob": config.broadcast_prob,
        "temperature": config.temperature,
        "avg_accuracy": final["avg_accuracy"],
        "collective_accuracy": final["collective_accuracy"]["negentropy"],
        "collective_accuracy_by_weighting": dict(final["collective_accuracy"]),
        "node_accuracy_min_max": [min(final["node_accuracies"]), max(final["node_accuracies"])],
        "steps": out["steps_done"],
        "bytes_sent_per_node_step": bandwidth.bytes_per_node_step(
            final["counters"]["sent"], net.message_bytes, num_nodes=config.num_nodes, steps=out["steps_done"]),
        "message_bytes": net.message_bytes, "data_model": config.data_model,
        "message_bytes_shared": shared_bytes,
        "bytes_sent_per_node_step_shared": bandwidth.bytes_per_node_step(
            final["counters"]["sent"], shared_bytes, num_nodes=config.num_nodes, steps=out["steps_done"]),
        "allreduce_bytes_per_node_step": bandwidth.allreduce_bytes(config.num_nodes, num_params),
        "num_params": num_params, "counters": final["counters"],
        "consumed_fraction": float(np.mean([h["consumed_fraction"] for h in history])),
        "final_loss": final["loss"], "seconds": round(out["train_seconds"], 1),
        "lift": f"{net.backend}/{net.step_loop}",
        **({"validation_avg_accuracy": final["validation"]["avg_accuracy"],
            "validation_collective_accuracy": final["validation"]["collective_accuracy"]["negentropy"]}
           if "validation" in final else {}),
    }


SPREAD = ("avg_accuracy", "collective_accuracy", "validation_avg_accuracy", "validation_collective_accuracy")
"""The accuracies :func:`summarize_seeds` gives a standard deviation."""


def summarize_seeds(summaries: Sequence[Mapping[str, Any]], seeds: Sequence[int], *,
                    spread: Sequence[str] = SPREAD) -> dict[str, Any]:
    """One network's :func:`summarize` over seeds: the mean of every number, the spread of the accuracies.

    Args:
      summaries: :func:`summarize` of the same network trained with each seed (a sweep's runs).
      seeds: their seeds.
      spread: the keys given a ``{key}_sd`` where the summaries have them.

    Returns:
      The first summary's settings with every number (nested dicts' too) replaced by its mean over seeds and every
      string by the seeds' distinct values (comma-separated: one where they agree),
      ``node_accuracy_min_max`` over all seeds' nodes; plus ``seeds``, ``per_seed`` (the summaries) and
      ``{key}_sd`` for every key of ``spread`` the summaries have (sample standard deviations; 0 for one seed
      or where a seed has None).
    """
    if len(summaries) != len(seeds) or not summaries:
        raise ValueError(f"need one summary per seed, got {len(summaries)} summaries and {len(seeds)} seeds")

    def mean(values):
        first = values[0]
        if any(v is None for v in values):  # e.g. no collective decision when every node was down
            return None
        if isinstance(first, Mapping):
            return {k: mean([v[k] for v in values]) for k in first}
        if isinstance(first, str):  # e.g. the lift: each seed's where they differ
            return ", ".join(dict.fromkeys(values))
        if isinstance(first, bool) or not isinstance(first, int | float):
            return first
        return float(np.mean(values))

    out = {k: mean([s[k] for s in summaries]) for k in summaries[0]}
    lows, highs = zip(*(s["node_accuracy_min_max"] for s in summaries), strict=True)
    out["node_accuracy_min_max"] = [min(lows), max(highs)]
    for key in spread:
        if key not in summaries[0]:
            continue
        values = [s[key] for s in summaries]
        out[f"{key}_sd"] = stats.mean_sd(values)[1] if None not in values else 0.0
    for key in ("nodes", "steps", "num_params", "message_bytes", "message_bytes_shared"):  # the same per seed
        if key in summaries[0]:
            out[key] = summaries[0][key]
    return out | {"seeds": list(seeds), "per_seed": [dict(s) for s in summaries]}


def train_seeds(net: network.NetworkConfig, model: nn.Module, dataset: data.ImageDataset, *, name: str,
                seeds: Sequence[int], checkpoints: Any = None, progress: bool = True, cluster: Any = None) -> dict:
    """A chapter-2 network trained with every seed as one sweep (:func:`jaxcomm.network_sweep.train_networks`), on test
    and validation where the dataset holds one, summarised per seed (:func:`summarize`) and over seeds
    (:func:`summarize_seeds`).

    Args:
      net: the network (its seed replaced by each of ``seeds``).
      name: the run's name: its progress label, its checkpoints' folder, its curves' ``run``.
      checkpoints: a :class:`jaxcomm.checkpoint.Checkpoints` (the sweep saves and resumes in ``name``), or None.
      cluster: a :class:`jaxcomm.clock.Cluster`: the messages spend their transfer time in flight.

    Returns:
      ``summary`` (:func:`summarize_seeds`), ``curves`` (per seed: steps, accuracies of every collective
      weighting, loss, wall seconds at each evaluation), ``histories``.
    """
    from jaxcomm import decision, network_sweep  # noqa: PLC0415  (the sweep imports orbax's checkpointing: slow)

    eval_split = ("test", "validation") if len(dataset.validation.labels) else "test"
    outs = network_sweep.train_networks([net.replace(seed=seed) for seed in seeds], model, dataset,
                                        eval_split=eval_split,
                                        progress=progress, desc=name, cluster=cluster,
                                        checkpointer=checkpoints.run(name) if checkpoints else None)
    num_params = bandwidth.model_num_params(model, dataset.train.images.shape[1:])
    summary = summarize_seeds([summarize(out, num_params=num_params) for out in outs], seeds)
    curves = [{"run": name, "seed": seed, "nodes": net.num_nodes, "content": net.content,
               "steps": [h["step"] for h in out["history"]],
               "avg_accuracy": [round(h["avg_accuracy"], 3) for h in out["history"]],
               "collective_accuracy": {w: [round(h["collective_accuracy"][w], 3) for h in out["history"]]
                                       for w in decision.WEIGHTINGS},
               "loss": [round(h["loss"], 4) for h in out["history"]],
               "seconds": [round(h["seconds"], 1) for h in out["history"]],
               **({"validation_avg_accuracy": [round(h["validation"]["avg_accuracy"], 3) for h in out["history"]],
                   "validation_collective_accuracy": [round(h["validation"]["collective_accuracy"]["negentropy"], 3)
                                                      for h in out["history"]]}
                  if eval_split != "test" else {})}
              for seed, out in zip(seeds, outs, strict=True)]
    print(f"[{name}] N={net.num_nodes} {net.content}, {len(seeds)} seeds: avg {summary['avg_accuracy']:.1f} "
          f"(sd {summary['avg_accuracy_sd']:.1f}) collective {summary['collective_accuracy']:.1f} "
          f"(sd {summary['collective_accuracy_sd']:.1f}) in {summary['seconds']:.0f} s", flush=True)
    return {"summary": summary, "curves": curves, "histories": [out["history"] for out in outs]}
