"""Writes tests/golden/network_draws_by_name.json: the five golden network runs of tests/test_exchange.py under the
current code (run from the repository root: ``python tests/golden/write_network_golden.py``).

Rewritten when the draws became named streams (issue 57): the old golden file (network_before_refactor.json, pinned
at 8d7693f from the string-switch step, in git history) drew its keys positionally, so its numbers cannot be
reproduced by named streams; that code passed it until the change. The cases (configs) are kept; the other parts of
the step are unchanged, and the golden pins them from here on. Rerun only where a change of the numbers is intended,
and say so in the commit.
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import conftest  # noqa: E402
import test_exchange as tx  # noqa: E402

from jaxcomm import network  # noqa: E402
from jaxcomm.data import ImageDataset  # noqa: E402


def main() -> None:
    rng = np.random.default_rng(0)
    split = conftest.synthetic_split
    dataset = ImageDataset("synthetic", split(rng, 240), split(rng, 0), split(rng, 64), 4)
    old = json.loads((HERE / "network_draws_by_name.json").read_text())  # the cases: their configs
    out = {}
    for case, entry in old.items():
        kw = {k: tuple(tuple(o) for o in v) if k == "failure_schedule" else v for k, v in entry["config"].items()}
        result = network.train_network(tx.config(**kw), tx.MODEL, dataset, progress=False)
        keys = ("step", "loss", "counters", "consumed_fraction", "alive_fraction", "avg_accuracy")
        out[case] = {"config": entry["config"], "history": [{k: r[k] for k in keys} for r in result["history"]],
                     "param_sum": tx.params_sum(result)}
    (HERE / "network_draws_by_name.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main()
