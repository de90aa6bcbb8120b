"""The frontier-in-time experiment's config (:class:`TimeFrontierConfig`: the frontier run it reads, the links,
the rows trained again with messages in flight) and :data:`PRESETS` (``cpu``, ``smoke``)."""

from __future__ import annotations

import dataclasses

from jaxcomm import clock
from jaxcomm.harness import frontier
from jaxcomm.validation import require

EXPERIMENT = "time_frontier"


@dataclasses.dataclass(frozen=True)
class TimeFrontierConfig:
    """Attributes:
      frontier_dir: a bandwidth-frontier results folder to read; "": train ``frontier_preset`` first.
      frontier_preset: the frontier preset trained when ``frontier_dir`` is "".
      links: names of :data:`jaxcomm.clock.LINKS`, each a cluster of its own (``instant`` is the thesis' view).
      seconds_per_step: one node's local step, in seconds; 0: the frontier run's measurement.
      rerun: rows (output sharing) trained again under each link but ``instant``, messages in flight.
      data_dir: the dataset's folder for the reruns and the traffic ("" = ``JAXCOMM_DATA_DIR`` or tfds).
    """

    frontier_dir: str = "results/bandwidth_frontier"
    frontier_preset: str = "smoke"
    links: tuple[str, ...] = ("instant", "datacenter", "lan_1g", "wan_100m")
    seconds_per_step: float = 0.0
    rerun: tuple[str, ...] = ("true_labels", "logits", "features")
    data_dir: str = ""

    def __post_init__(self):
        require(isinstance(self.links, tuple) and self.links and set(self.links) <= set(clock.LINKS), "links",
                f"a non-empty tuple of {sorted(clock.LINKS)}", self.links)
        require(isinstance(self.seconds_per_step, float | int) and self.seconds_per_step >= 0, "seconds_per_step",
                "seconds >= 0", self.seconds_per_step)
        require(isinstance(self.rerun, tuple), "rerun", "a tuple of row names", self.rerun)
        require(bool(self.frontier_dir) or self.frontier_preset in frontier.PRESETS, "frontier_preset",
                f"one of {sorted(frontier.PRESETS)}", self.frontier_preset)


PRESETS = {"cpu": TimeFrontierConfig,
           "smoke": lambda: TimeFrontierConfig(frontier_dir="", links=("instant", "wan_100m"), rerun=("true_labels",))}
