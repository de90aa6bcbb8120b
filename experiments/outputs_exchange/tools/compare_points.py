"""Paired comparisons between study points of two committed runs that no table pairs (each table pairs a point with
its own study's reference): the same seeds draw the same shards, initialisations and message randomness in both.
Holm-adjusted over the four accuracies of each comparison. From the repository root:

    python -m experiments.outputs_exchange.tools.compare_points A_SUMMARY A_LABEL B_SUMMARY B_LABEL

e.g. the 100-node ring (p = 5) against 100 fully connected nodes, both trained on one H200:

    python -m experiments.outputs_exchange.tools.compare_points \
        results/outputs_exchange/studies_5000/neighbours/ring_h200/summary.json N=100,p=5 \
        results/outputs_exchange/studies_5000/nodes/n100_h200/summary.json N=100
"""
import json
import sys

from experiments.outputs_exchange.report import PAIRED_KEYS
from jaxcomm.harness import report


def point(path: str, label: str) -> dict:
    """The study point ``label`` of the summary at ``path``, with that summary's device."""
    summary = json.loads(open(path).read())
    found = [s for s in summary["studies"] if s["label"] == label]
    if len(found) != 1:
        sys.exit(f"{path}: {len(found)} points labelled {label!r}")
    return {**found[0], "device": summary["device"]}


def main(a_path: str, a_label: str, b_path: str, b_label: str) -> None:
    a, b = point(a_path, a_label), point(b_path, b_label)
    if a["seeds"] != b["seeds"]:
        sys.exit(f"not paired: seeds {a['seeds']} against {b['seeds']}")
    print(f"A = {a_label} ({a['device']}), B = {b_label} ({b['device']})")
    print("\n".join(report.paired_comparisons({"A": a, "B": b}, [("A", "B", f"{a_label} vs {b_label}")], PAIRED_KEYS,
                                              title="A against B", why_paired="the same draws in both runs")))


if __name__ == "__main__":
    main(*sys.argv[1:5])
