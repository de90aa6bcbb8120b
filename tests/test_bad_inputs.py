"""Bad inputs fail before anything is built, timed or compiled, naming the field (issue 72 item 4).

Each row of the table is a run that must not start: the message names the field and the value. The backend chooser
(the first thing a build times) is replaced by one that fails loudly, so a row that reached it fails the test.
"""

from __future__ import annotations

import math

import pytest

from jaxcomm import classifier, clock, kit, local_sgd, methods, network, pace
from jaxcomm.models import MLP

MODEL = MLP(hidden=(8,), num_classes=4)
GOOD = clock.Compute(1.0, speed=(1.0, 1.0, 3.0))


def _cluster(**changes) -> clock.Cluster:
    return clock.Cluster(GOOD, clock.LAN)._replace(**changes)


BAD = [  # (what, the run's keyword arguments, the message it must raise)
    ("zero speed", {"cluster": _cluster(compute=GOOD._replace(speed=(1.0, 0.0, 1.0)))}, r"compute\.speed"),
    ("negative speed", {"cluster": _cluster(compute=GOOD._replace(speed=(1.0, -1.0, 1.0)))}, r"compute\.speed"),
    ("speeds of the wrong length", {"cluster": _cluster(compute=GOOD._replace(speed=(1.0, 1.0)))}, r"compute\.speed"),
    ("zero step time", {"cluster": _cluster(compute=GOOD._replace(seconds_per_step=0.0))},
     r"compute\.seconds_per_step"),
    ("negative step time", {"cluster": _cluster(compute=GOOD._replace(seconds_per_step=-0.01))},
     r"compute\.seconds_per_step"),
    ("infinite step time", {"cluster": _cluster(compute=GOOD._replace(seconds_per_step=math.inf))},
     r"compute\.seconds_per_step"),
    ("negative jitter", {"cluster": _cluster(compute=GOOD._replace(jitter=-0.1))}, r"compute\.jitter"),
    ("NaN jitter", {"cluster": _cluster(compute=GOOD._replace(jitter=math.nan))}, r"compute\.jitter"),
    ("a trace of the wrong shape", {"cluster": _cluster(compute=GOOD._replace(trace=((1.0, 2.0),)))},
     r"compute\.trace"),
    ("a trace with a zero", {"cluster": _cluster(compute=GOOD._replace(trace=((1.0,), (0.0,), (1.0,))))},
     r"compute\.trace"),
    ("negative availability", {"cluster": _cluster(availability=clock.Availability(-5.0, 1.0))},
     r"availability\.mean_up"),
    ("negative down time", {"cluster": _cluster(availability=clock.Availability(5.0, -1.0))},
     r"availability\.mean_down"),
    ("a window backwards", {"cluster": _cluster(availability=clock.Availability(windows={0: ((3.0, 1.0),)}))},
     r"availability\.windows"),
    ("a window of a node that is not there", {"cluster": _cluster(
        availability=clock.Availability(windows={7: ((1.0, 2.0),)}))}, r"availability\.windows"),
    ("zero bandwidth", {"cluster": _cluster(link=clock.Link(0.0, 0.001))}, r"link\.bandwidth"),
    ("negative latency", {"cluster": _cluster(link=clock.Link(1e9, -0.001))}, r"link\.latency"),
    ("an edge's link", {"cluster": _cluster(edges={(0, 1): clock.Link(1e9, math.nan)})}, r"edges\[\(0, 1\)\]"),
    ("an edge to itself", {"cluster": _cluster(edges={(1, 1): clock.LAN})}, r"edges"),
    ("uplinks of the wrong length", {"cluster": _cluster(uplinks=(1e9,))}, r"uplinks"),
    ("a zero bottleneck", {"cluster": _cluster(bottleneck=clock.Link(0.0, 0.0))}, r"bottleneck\.bandwidth"),
    ("a NaN hyperparameter", {"hyper": {"outer": math.nan}}, r"hyper\['outer'\]"),
    ("a horizon of no time", {"cluster": _cluster(), "own_pace": True, "until_seconds": 0.0}, r"until_seconds"),
    ("a horizon without a pace", {"until_seconds": 5.0}, r"until_seconds"),
]


def _method():
    """Local SGD with a hyperparameter of its own, so a NaN value has a field to be named."""
    method = local_sgd.local_sgd(2)
    return method._replace(hyper={"outer": 1.0})


@pytest.mark.parametrize("what, kwargs, message", BAD, ids=[row[0] for row in BAD])
def test_a_bad_input_fails_before_anything_compiles_naming_its_field(what, kwargs, message, tiny_dataset,
                                                                    monkeypatch):
    def compiled(*args, **kw):
        raise AssertionError(f"{what}: reached the backend chooser (timing, compiling) before failing")

    monkeypatch.setattr(classifier, "choose_backend", compiled)
    config = kit.RunConfig(num_nodes=3, batch_size=8, num_steps=4, eval_every=4)
    with pytest.raises(ValueError, match=message):
        methods.train(_method(), config, MODEL, tiny_dataset, progress=False, **kwargs)


@pytest.mark.parametrize("what, make, message", [
    ("an infinite learning rate", lambda: kit.RunConfig(learning_rate=math.inf), "learning_rate"),
    ("a NaN learning rate", lambda: network.NetworkConfig(learning_rate=math.nan), "learning_rate"),
    ("a NaN outer learning rate", lambda: local_sgd.diloco(2, learning_rate=math.nan), "learning_rate"),
    ("an outer momentum of 1", lambda: local_sgd.diloco(2, momentum=1.0), "momentum"),
    ("a quorum of more nodes than there are", lambda: pace.Waits(2, 4).check(3), "quorum"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_bad_value_fails_where_it_is_made(what, make, message):
    with pytest.raises(ValueError, match=message):
        make()
