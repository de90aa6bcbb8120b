"""The own-pace study's presets (:class:`Preset`: data, model, nodes, the nominal step, the horizon, seeds),
its conditions (links, stragglers, churn) and the methods it compares."""

from __future__ import annotations

import dataclasses
import functools

from jaxcomm import clock


@dataclasses.dataclass(frozen=True)
class Preset:
    dataset: str = "mnist"
    hidden: tuple[int, ...] = (128,)
    num_nodes: int = 10
    batch_size: int = 32
    step_seconds: float = 0.01
    horizon_seconds: float = 30.0
    evaluations: int = 20
    seeds: tuple[int, ...] = (0, 1, 2)
    sync_every: int = 10
    quorum: int = 7
    conditions: tuple[str, ...] | None = None  # None: every one of CONDITIONS


PRESETS = {"cpu": Preset, "smoke": functools.partial(  # the pipeline in seconds: LAN, and WAN with churn
    Preset, dataset="mnist_sample", hidden=(32,), num_nodes=4, horizon_seconds=1.0, evaluations=2, seeds=(0, 1),
    quorum=3, conditions=("lan_1g_0_stragglers", "wan_100m_1_stragglers_churn"))}
CONDITIONS = {f"{link}_{k}_stragglers{'_churn' if churn else ''}": (link, k, churn)
              for link, k, churn in [("lan_1g", 0, False), ("lan_1g", 1, False), ("lan_1g", 3, False),
                                     ("wan_100m", 0, False), ("wan_100m", 1, False), ("wan_100m", 3, False),
                                     ("lan_1g", 1, True), ("wan_100m", 1, True)]}
CHURN = clock.Availability(mean_up=10.0, mean_down=2.0)
NETWORKS = ("isolated", "outputs")


METHODS = ("isolated", "outputs", "sync_sgd", "diloco", "diloco_quorum", "sgp", "osgp")
