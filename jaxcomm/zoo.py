"""The method zoo: method values from short specs, for command lines and presets.

:func:`parse` turns a spec into a :class:`jaxcomm.methods.Method` named by what it is and its setting:

* ``outputs:<none|true_labels|logits|features>``: Algorithm 2 (:func:`jaxcomm.network.output_sharing`) with the
  chapter-2 recipe's sharing settings (p_c, p_b, tau); rows ``isolated``, ``true_labels``, ``logits``, ``features``;
* ``sync``: synchronous SGD, dense all-reduce (``sync_sgd``);
* ``gossip:<k>``: gossip averaging every k steps on a ring (``gossip_<k>``);
* ``<top_k|random_k|induced>:<fraction>``, ``sign``, ``natural``, ``natural_det``, ``qsgd:<levels>``,
  ``adacomp[:<bin length>]``, each optionally ``:whole``/``:layer`` and ``:ef``/``:noef``: synchronous SGD with a
  compressor (:mod:`jaxcomm.compression`; error feedback by default for the biased top-k, sign and deterministic
  natural compression; AdaComp's residual is its own); rows ``top_k_1pct``, ``sign``, ``qsgd_4lvl_ef``,
  ``induced_1pct``, ``adacomp``, ...;
* ``powersgd:<rank>``: synchronous SGD with rank-r PowerSGD (``powersgd_r<rank>``);
* ``diloco:<H>`` / ``local_sgd:<H>``: local SGD with DiLoCo's or plain averaging outer step (``diloco_h<H>``);
* ``codistill:<K>``: codistillation with checkpoints every K steps (``codistill_k<K>``);
* ``fedavg:<H>[:<K>]``, ``fedavgm:<H>[:<K>]``, ``fedadam:<H>[:<K>]``, ``fedyogi:<H>[:<K>]``, ``scaffold:<H>[:<K>]``,
  ``fedprox:<H>:<mu>[:<K>]``: the federated methods (:mod:`jaxcomm.federated`), H client steps per round, a cohort
  of K of the config's ``num_nodes`` clients (default all); rows ``fedavg_h<H>_k<K>``, ``fedprox_h<H>_mu<mu>``, ...;
* ``osgp:<tau>``: overlap Stochastic Gradient Push, messages mixed tau steps after they are sent (``sgp`` is the
  factory below, :func:`jaxcomm.sgp.sgp`);
* any other ``[module.]factory[:arg[:arg...]]``: the factory called with the arguments (ints, floats or
  strings), a bare name meaning ``jaxcomm.<name>.<name>`` (``sparta:0.005`` is
  :func:`jaxcomm.sparta.sparta` ``(0.005)``). A new method in the library, or in research code on the path,
  needs no edit here.
"""

from __future__ import annotations

import importlib

import numpy as np

from jaxcomm import (
    codistillation,
    compression,
    data_parallel,
    federated,
    gossip,
    local_sgd,
    methods,
    network,
    powersgd,
    recipes,
    sgp,
)
from jaxcomm.validation import scalar

FAMILIES = ("outputs", "sync", "gossip", "compressed", "local_sgd", "codistillation")
"""The families the built-in specs make (a method from elsewhere names its own)."""
DEFAULT_FEEDBACK = {"top_k": True, "sign": True, "random_k": False, "qsgd": False, "adacomp": True, "natural": False,
                    "natural_det": True, "induced": False}
"""Error feedback by default for the biased compressors (AdaComp's residual is its own)."""
UNSET = ("sign", "natural", "natural_det")
"""Compressors with no setting (AdaComp's bin length is optional: its default is the paper's per layer kind)."""
CONTENTS = ("none", "true_labels", "logits", "features")
FEDERATED = {"fedavg": federated.fedavg, "fedavgm": federated.fedavgm, "fedadam": federated.fedadam,
             "fedyogi": federated.fedyogi, "scaffold": federated.scaffold}
"""The federated specs ``<name>:<H>[:<K>]`` (``fedprox:<H>:<mu>[:<K>]`` beside them)."""


def _usage(spec: str) -> ValueError:
    return ValueError(f"method {spec!r}: expected outputs:<none|true_labels|logits|features>, sync, gossip:<k>, "
                      "diloco:<H>, local_sgd:<H>, codistill:<K>, osgp:<tau>, powersgd:<rank>, fedavg:<H>[:<K>] "
                      "(fedavgm, fedadam, fedyogi, scaffold alike), fedprox:<H>:<mu>[:<K>], top_k:<fraction>, "
                      "random_k:<fraction>, induced:<fraction>, sign, natural, natural_det, qsgd:<levels> or "
                      "adacomp[:<bin length>] (the compressors optionally followed by :whole or "
                      ":layer and :ef or :noef), or [module.]factory[:arg...] of a method factory")


def _percent(fraction: float) -> str:
    """``fraction`` x 100 without trailing zeros or an exponent: 0.01 -> "1", 0.001 -> "0.1"."""
    return np.format_float_positional(round(fraction * 100, 12), trim="-")


def outputs(content: str, recipe: recipes.Chapter2Recipe | None = None) -> methods.Method:
    """Output sharing of a named content with ``recipe``'s sharing settings (p_c, p_b at its equilibrium
    broadcast rate, tau) on the thesis' fully connected network; content "none" is isolated nodes (row
    ``isolated``)."""
    recipe = recipe or recipes.cpu()

    def configure(c: network.NetworkConfig) -> network.NetworkConfig:
        shared = recipe.network(c.num_nodes, content, eval_every=c.eval_every)
        return network.as_network_config(c).replace(
            topology=shared.topology, num_neighbours=shared.num_neighbours, content=shared.content,
            consume_prob=shared.consume_prob, broadcast_prob=shared.broadcast_prob, temperature=shared.temperature)

    method = network.output_sharing(None, name="isolated" if content == "none" else content)
    return method._replace(configure=configure)


def _compressed(spec: str, head: str, args: list[str]) -> methods.Method:
    optional = head == "adacomp" and bool(args) and args[0].isdigit()
    if head not in UNSET and head != "adacomp" and not args:
        raise _usage(spec)
    setting, flags = (args[0], args[1:]) if head not in UNSET and (head != "adacomp" or optional) else (None, args)
    if any(f not in ("whole", "layer", "ef", "noef") for f in flags) \
            or len(set(flags)) != len(flags):
        raise _usage(spec)
    kwargs = {"per_layer": "whole" not in flags,
              "feedback": "ef" in flags or (DEFAULT_FEEDBACK[head] and "noef" not in flags)}
    try:
        if head in ("top_k", "random_k", "induced"):
            kwargs["fraction"] = float(setting)
        elif head == "qsgd":
            kwargs["levels"] = int(setting)
        elif setting is not None:
            kwargs["bin_size"] = int(setting)
        compression.check(head, fraction=kwargs.get("fraction", 0.01), levels=kwargs.get("levels", 4),
                          per_layer=kwargs["per_layer"], feedback=kwargs["feedback"],
                          bin_size=kwargs.get("bin_size"))
    except ValueError as error:
        raise ValueError(f"method {spec!r}: {error}") from None
    if head in ("top_k", "random_k", "induced"):
        name = f"{head}_{_percent(kwargs['fraction'])}pct"
    elif head == "qsgd":
        name = f"qsgd_{kwargs['levels']}lvl"
    else:
        name = head + (f"_l{kwargs['bin_size']}" if "bin_size" in kwargs else "")
    name += "" if kwargs["per_layer"] else "_whole"
    if kwargs["feedback"] != DEFAULT_FEEDBACK[head]:
        name += "_ef" if kwargs["feedback"] else "_noef"
    return data_parallel.sync_sgd(compression.make(head, **kwargs), name=name)


def _federated(spec: str, head: str, args: list[str]) -> methods.Method:
    """``<name>:<H>[:<K>]`` of :data:`FEDERATED`, or ``fedprox:<H>:<mu>[:<K>]``."""
    counts = args[:1] + args[2 if head == "fedprox" else 1:]  # H and K, fedprox's mu between them
    if len(args) not in ((2, 3) if head == "fedprox" else (1, 2)) or not all(a.isdigit() and int(a) >= 1
                                                                               for a in counts):
        raise _usage(spec)
    steps, cohort = int(args[0]), int(counts[1]) if len(counts) > 1 else None
    try:
        if head == "fedprox":
            return federated.fedprox(steps, float(args[1]), cohort=cohort)
        return FEDERATED[head](steps, cohort=cohort)
    except ValueError as error:
        raise ValueError(f"method {spec!r}: {error}") from None


def _factory(spec: str, head: str, args: list[str]) -> methods.Method:
    """``[module.]factory`` called with ``args``; a bare name is ``jaxcomm.<name>.<name>``."""
    module, _, name = head.rpartition(".")
    try:
        found = getattr(importlib.import_module(module or f"jaxcomm.{name}"), name)
    except (ImportError, AttributeError):
        raise _usage(spec) from None
    method = found(*(scalar(a) for a in args))
    if not isinstance(method, methods.Method):
        raise ValueError(f"method {spec!r}: {head} returned {type(method).__name__}, not a jaxcomm.methods.Method")
    return method


def parse(spec: str, *, recipe: recipes.Chapter2Recipe | None = None, gossip_neighbours: int = 2) -> methods.Method:
    """The method of ``spec`` (module docstring); ValueError naming what is wrong.

    Args:
      spec: e.g. ``"outputs:true_labels"``, ``"diloco:50"``, ``"top_k:0.01:whole"``, ``"sparta:0.005"``.
      recipe: the chapter-2 recipe whose sharing settings output sharing takes (default :func:`recipes.cpu`).
      gossip_neighbours: out-neighbours on the gossip ring.
    """
    head, *args = spec.split(":")
    positive = len(args) == 1 and args[0].isdigit() and int(args[0]) >= 1
    if head in ("diloco", "local_sgd", "codistill", "powersgd", "gossip", "osgp"):
        if not positive:
            raise _usage(spec)
        value = int(args[0])
        return {"diloco": lambda: local_sgd.diloco(value),
                "local_sgd": lambda: local_sgd.local_sgd(value),
                "codistill": lambda: codistillation.codistillation(value),
                "powersgd": lambda: data_parallel.sync_sgd(powersgd.power_sgd(value), name=f"powersgd_r{value}"),
                "gossip": lambda: gossip.gossip_averaging(value, num_neighbours=gossip_neighbours),
                "osgp": lambda: sgp.osgp(value)}[head]()
    if head == "outputs":
        if len(args) != 1 or args[0] not in CONTENTS:
            raise _usage(spec)
        return outputs(args[0], recipe)
    if head == "sync":
        if args:
            raise _usage(spec)
        return data_parallel.sync_sgd()
    if head in DEFAULT_FEEDBACK:
        return _compressed(spec, head, args)
    if head in FEDERATED or head == "fedprox":
        return _federated(spec, head, args)
    return _factory(spec, head, args)
