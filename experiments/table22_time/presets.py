"""Table 2.2 in time: the config (:class:`Table22TimeConfig`: the chapter-2 run it reads, the links, the rows
trained again with their messages in flight) and :data:`PRESETS` (``cpu``)."""

from __future__ import annotations

import dataclasses

from experiments.outputs_exchange.report import ROWS
from jaxcomm import clock
from jaxcomm.validation import require

EXPERIMENT = "table22_time"


@dataclasses.dataclass(frozen=True)
class Table22TimeConfig:
    """Attributes:
      outputs_dir: a chapter-2 results folder (``python -m experiments.outputs_exchange``) with a single-node row.
      links: names of :data:`jaxcomm.clock.LINKS`, a cluster each.
      seconds_per_step: one node's local step in seconds; 0: the run's single node's measured step (its curves'
        wall seconds between the first and last evaluations over the steps between them, median over seeds).
      rerun: rows of the run trained again, with their messages in flight, on every link of ``links`` that
        delays them (hours on a CPU for the 5,000-step rows; checkpointed, ``--resume``).
    """

    outputs_dir: str = "results/outputs_exchange"
    links: tuple[str, ...] = ("instant", "datacenter", "lan_1g", "wan_100m")
    seconds_per_step: float = 0.0
    rerun: tuple[str, ...] = ()

    def __post_init__(self):
        require(isinstance(self.outputs_dir, str) and self.outputs_dir, "outputs_dir", "a results folder",
                self.outputs_dir)
        require(isinstance(self.links, tuple) and self.links and set(self.links) <= set(clock.LINKS), "links",
                f"a non-empty tuple of {sorted(clock.LINKS)}", self.links)
        require(isinstance(self.seconds_per_step, float | int) and self.seconds_per_step >= 0, "seconds_per_step",
                "seconds >= 0", self.seconds_per_step)
        sharing = [name for name, (n, content) in ROWS.items() if n > 1 and content != "none"]
        require(isinstance(self.rerun, tuple) and set(self.rerun) <= set(sharing), "rerun",
                f"a tuple of rows that send messages, from {sharing}", self.rerun)


PRESETS = {"cpu": Table22TimeConfig}
