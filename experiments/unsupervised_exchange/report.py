"""The report of the chapter-2 unsupervised experiment (``python -m experiments.unsupervised_exchange``): Table 2.3
and its plots, drawn from a run's ``summary.json`` and ``curves.jsonl``.

:func:`write_report` writes ``table.md``: the thesis' rows beside the measured ones (linear probes of the frozen
features, beside the untrained encoders' control), paired comparisons by seed, every probe stage, the four weightings
of the collective decision, the local objective and cost, and a table of its own for the runs under ``variants/``;
then (with ``plots``) ``probes.png``, ``objectives.png`` and ``pictures.png``, matplotlib imported only then
(:func:`jaxcomm.harness.report.pyplot`). The rows and their objectives (:data:`ROWS`, :data:`ROW_OBJECTIVES`) are
defined here, read by the experiment's config and run too.
"""

from __future__ import annotations

import base64
import functools
import pathlib

import numpy as np

from jaxcomm import unsupervised
from jaxcomm.harness import report, results

FAMILIES = unsupervised.FAMILIES

# row -> (family, nodes, communication). The row names are the schema.
ROWS: dict[str, tuple[str, int, bool]] = {
    "vae_1_node": ("vae", 1, False),
    "vae_10_nodes_no_comm": ("vae", 10, False),
    "vae_10_nodes_full_comm": ("vae", 10, True),
    "vae_10_nodes_full_comm_add": ("vae", 10, True),
    "bigan_1_node": ("bigan", 1, False),
    "bigan_10_nodes_no_comm": ("bigan", 10, False),
    "bigan_10_nodes_full_comm": ("bigan", 10, True),
    "bigan_10_nodes_full_comm_add": ("bigan", 10, True),
}
# Rows whose consumed minibatches train another objective than the config's (the thesis' Algorithm 2 replaces the
# local loss; "add" trains both, so communicating nodes never leave their own objective; not in the thesis).
ROW_OBJECTIVES: dict[str, str] = {"vae_10_nodes_full_comm_add": "add", "bigan_10_nodes_full_comm_add": "add"}
# Thesis Table 2.3: test accuracy (%) of the linear classifier, (average, collective); None = "N.A.".
THESIS_TABLE: dict[str, tuple[float, float | None]] = {
    "vae_1_node": (41.8, None),
    "vae_10_nodes_no_comm": (41.6, 45.2),
    "vae_10_nodes_full_comm": (41.5, 42.7),
    "bigan_1_node": (46.9, None),
    "bigan_10_nodes_no_comm": (44.5, 49.9),
    "bigan_10_nodes_full_comm": (44.3, 46.2),
}


def decode_images(encoded: dict) -> np.ndarray:
    """uint8 ``[K, H, W, C]`` images from their JSON form (shape and base64 bytes), as a run's pictures hold them."""
    return np.frombuffer(base64.b64decode(encoded["base64"]), np.uint8).reshape(encoded["shape"])


def _colours(plt, curves):
    return dict(zip([c["run"] for c in curves], plt.cm.tab10(np.arange(len(curves))), strict=True))


def plot_probes(curves: list[dict], path: pathlib.Path, thesis: bool = True) -> None:
    """Probe test accuracy vs steps: node average (dashed) and collective decision (solid), one panel per family."""
    plt = report.pyplot()
    rows = [c for c in curves if c["kind"] == "row"]
    families = [f for f in FAMILIES if any(c["family"] == f for c in rows)]
    fig, axes = plt.subplots(1, len(families), figsize=(6 * len(families), 4), squeeze=False)
    colour = _colours(plt, rows)
    for ax, family in zip(axes[0], families, strict=True):
        for c in (c for c in rows if c["family"] == family):
            ax.plot(c["probe_steps"], c["avg_accuracy"], "o--", color=colour[c["run"]], label=f"{c['run']} average")
            if c["nodes"] > 1:
                ax.plot(c["probe_steps"], c["collective_accuracy"], "s-", color=colour[c["run"]],
                        label=f"{c['run']} collective")
            if c.get("untrained_avg_accuracy") is not None:  # the untrained encoders, at step 0
                ax.plot([0], [c["untrained_avg_accuracy"]], "o", color=colour[c["run"]], fillstyle="none")
                if c["nodes"] > 1:
                    ax.plot([0], [c["untrained_collective_accuracy"]], "s", color=colour[c["run"]], fillstyle="none")
            if thesis and c["run"] in THESIS_TABLE:
                ax.axhline(THESIS_TABLE[c["run"]][0], color=colour[c["run"]], linestyle=":", linewidth=0.8)
        ax.set(title=f"{family.upper()}: linear probe on frozen features\n(open marks at 0: untrained encoders; "
               "dotted: thesis avg)", xlabel="step",
               ylabel="test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    report.save_figure(fig, path)


OBJECTIVE_PANELS = {"vae": [("neg_elbo", "-ELBO (nats / image)"), ("reconstruction", "reconstruction NLL (nats)"),
                            ("kl", "KL(q(z|x) || p(z)) (nats)")],
                    "bigan": [("d_loss", "discriminator loss"), ("ge_loss", "generator + encoder loss"),
                              ("reconstruction_mse", "MSE of G(E(x)) vs x")]}


def plot_objectives(curves: list[dict], path: pathlib.Path) -> None:
    """The local objective on the fixed validation batch vs steps (mean over nodes), three panels per family."""
    plt = report.pyplot()
    rows = [c for c in curves if c["kind"] == "row"]
    families = [f for f in FAMILIES if any(c["family"] == f for c in rows)]
    fig, axes = plt.subplots(len(families), 3, figsize=(15, 3.6 * len(families)), squeeze=False)
    colour = _colours(plt, rows)
    for line, family in zip(axes, families, strict=True):
        for ax, (key, title) in zip(line, OBJECTIVE_PANELS[family], strict=True):
            for c in (c for c in rows if c["family"] == family):
                ax.plot(c["steps"], c["objective"][key], color=colour[c["run"]], label=c["run"])
            ax.set(title=title, xlabel="step")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    report.save_figure(fig, path)


def plot_pictures(records: list[dict], path: pathlib.Path) -> None:
    """Per row (node 0, last step): test images, their reconstructions, samples from the prior."""
    plt = report.pyplot()
    if not records:
        return
    fig, axes = plt.subplots(len(records), 1, figsize=(12, 0.85 * len(records) + 0.3), squeeze=False)
    for ax, record in zip(axes[:, 0], records, strict=True):
        strips = []
        for key in ("originals", "reconstructions", "samples"):
            images = decode_images(record[key])
            strips.append(np.concatenate(list(np.pad(images, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=255)),
                                         axis=1))
        gap = np.full((strips[0].shape[0], 8, strips[0].shape[2]), 255, np.uint8)
        grid = np.concatenate([strips[0], gap, strips[1], gap, strips[2]], axis=1)
        ax.imshow(grid[..., 0] if grid.shape[-1] == 1 else grid, cmap="gray" if grid.shape[-1] == 1 else None)
        ax.set_axis_off()
        ax.set_title(f"{record['run']} (node 0, step {record['step']}): test images | reconstructions | samples",
                     fontsize=8)
    report.save_figure(fig, path)


_num = functools.partial(report.cell, missing="N.A.")
_acc = functools.partial(report.mean_sd_cell, missing="N.A.")


def table_markdown(summary: dict) -> str:
    """table.md: Table 2.3 beside the thesis', its paired comparisons, every probe stage, the collective decision's
    weightings, the local objective and the cost."""
    rows = summary["rows"]
    lines = _heading(summary) + _table_2_3(summary)
    lines += paired_markdown(rows)
    lines += _stages_section(summary) + _weightings_section(rows) + _objective_section(summary)
    lines += ["", "![probe accuracy vs steps](probes.png)", "", "![local objective vs steps](objectives.png)", "",
              "![reconstructions and samples](pictures.png)", ""]
    return "\n".join(lines)


def _heading(summary: dict) -> list[str]:
    """The title, the run (command, preset, wall time, device, commit, the command that redraws it), the data,
    models and communication, the evaluation, and the cpu preset's scale-downs."""
    config = summary["config"]
    note = f" ({summary['note']})" if summary.get("note") else ""
    stages = ", ".join(f"{s:,}" for s in range(config["probe_every"], config["num_steps"] + 1, config["probe_every"]))
    lines = [
        "# Chapter 2, unsupervised: VAE and BiGAN nodes exchanging features (Table 2.3)", "",
        f"Command: `{summary['command']}`  ",
        f"Preset `{summary['preset']}`, wall time {summary['wall_seconds']:.0f} s on {summary['device']}; "
        f"commit `{summary['git_commit']}`.  ",
        f"Redraw: `{report.experiment_command(summary, 'unsupervised_exchange')} report results/unsupervised_exchange`",
        "",
        f"Data: {summary.get('dataset')}{note}. Models: encoders {tuple(config['widths'])} (4x4 stride-2 "
        f"convolutions, LeakyReLU), latent {config['latent']}, decoders / generators mirrored; VAE: Gaussian "
        f"posterior, Bernoulli pixels, Adam {config['vae_learning_rate']}; BiGAN: discriminator on (x, z) pairs, "
        f"{config['disc_hidden']} wide, dropout {config['disc_dropout']}, Adam {config['bigan_learning_rate']} "
        f"(beta1 {config['bigan_beta1']}). Batch {config['batch_size']}, {config['num_steps']:,} steps per node. "
        f"Communication: fully connected, consume {config['consume_prob']}, broadcast "
        f"{config['broadcast_factor']} x p_c/(N-1), inbox {config['inbox_capacity']}; consumed minibatches train "
        f"the exchange loss ({config['consumed_objective']!r}, weight {config['exchange_weight']}): VAE "
        "KL(q_sender || q_receiver), BiGAN MSE to the sender's E(x).", "",
        f"Evaluation: probe stages at steps {stages}; at each, a linear softmax classifier per node on its frozen "
        "features (VAE: posterior mean; BiGAN: E(x)) of the whole labelled training split, "
        f"{config['probe_epochs']} epochs of Adam {config['probe_learning_rate']} "
        f"(batch {config['probe_batch_size']}), "
        "the epoch with the best validation accuracy kept; the stage with the best validation node average is "
        "reported, its test accuracies below. Collective = Algorithm 3 on the probes' probabilities, confident "
        "nodes weighted more (negentropy). The last column probes the untrained encoders (step 0, the same "
        "initialisation as the trained rows): random convolutional features are the control.", "",
    ]
    if summary.get("scale_downs"):
        lines += ["Scale-downs of the cpu preset:", ""] + [f"- {s}" for s in summary["scale_downs"]] + [""]
    return lines


def _table_2_3(summary: dict) -> list[str]:
    """Table 2.3: the linear probes' test accuracy of each row beside the thesis', and the untrained encoders'."""
    rows = summary["rows"]
    note = f" ({summary['note']})" if summary.get("note") else ""
    seeds = next((row["seeds"] for row in rows.values() if len(row.get("seeds") or ()) > 1), None)
    lines = [
        f"## Table 2.3: test accuracy (%) of the linear classifier over learned features{note}"
        + (f"; mean ± sd over seeds {', '.join(map(str, seeds))}, each seed's best step" if seeds else ""), "",
        "| row | thesis avg | thesis coll. | measured avg | measured coll. | coll. - avg | best step | "
        "val avg | node min-max | untrained encoders avg / coll. |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        t = THESIS_TABLE.get(name, (None, None))  # the add rows are not in the thesis
        gain = "-" if row["collective_accuracy"] is None else f"{row['collective_accuracy'] - row['avg_accuracy']:+.1f}"
        low, high = row["node_accuracy_min_max"]
        control = ("-" if "untrained_avg_accuracy" not in row else
                   f"{_acc(row, 'untrained_avg_accuracy')} / {_acc(row, 'untrained_collective_accuracy')}")
        best = " / ".join(f"{step:,}" for step in row.get("best_steps", [row["best_step"]]))
        lines.append(f"| {name} | {_num(t[0])} | {_num(t[1])} | {_acc(row, 'avg_accuracy')} | "
                     f"{_acc(row, 'collective_accuracy')} | {gain} | {best} | "
                     f"{_acc(row, 'val_avg_accuracy')} | {low:.1f}-{high:.1f} | {control} |")
    if any(name in ROW_OBJECTIVES for name in rows):
        lines += ["", "Rows ending `_add` (not in the thesis): a consumed minibatch trains the node's own objective "
                  "plus the exchange loss (`consumed_objective='add'`) instead of the exchange loss alone."]
    return lines


def _stages_section(summary: dict) -> list[str]:
    """Every probe stage's test (and validation) accuracy of each row."""
    rows, config = summary["rows"], summary["config"]
    lines = ["", "## Every stage (test accuracy %, validation in brackets)", "",
             "| row | " + " | ".join(f"step {s:,}" for s in range(config["probe_every"], config["num_steps"] + 1,
                                                                  config["probe_every"])) + " |",
             "|---|" + "---|" * len(range(config["probe_every"], config["num_steps"] + 1, config["probe_every"]))]
    for name, row in rows.items():
        cells = []
        for s in row["stages"]:
            coll = ("" if row["nodes"] == 1 else
                    f" / coll. {s['collective_accuracy']:.1f} ({s['val_collective_accuracy']:.1f})")
            cells.append(f"avg {s['avg_accuracy']:.1f} ({s['val_avg_accuracy']:.1f}){coll}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _weightings_section(rows: dict) -> list[str]:
    """The collective decision under its four weightings, for the rows of more than one node."""
    many = {name: row for name, row in rows.items() if row["nodes"] > 1}
    if not many:
        return []
    lines = ["", "## Collective decision: the four weightings on the same probe predictions (best stage, %)", "",
             "| row | node average | negentropy | entropy (Alg. 3 as printed) | mean | vote |",
             "|---|---|---|---|---|---|"]
    for name, row in many.items():
        w = row["collective_accuracy_by_weighting"]
        lines.append(f"| {name} | {_num(row['avg_accuracy'])} | {_num(w['negentropy'])} | {_num(w['entropy'])} | "
                     f"{_num(w['mean'])} | {_num(w['vote'])} |")
    return lines


def _objective_section(summary: dict) -> list[str]:
    """The local objective at the last step, and each row's parameters, message bytes and seconds."""
    rows, config = summary["rows"], summary["config"]
    models = {row.get("data_model", "shared") for row in rows.values()}
    lines = ["", "## Local objective at the last step (fixed validation batch, mean over nodes) and cost", "",
             ("Message bytes under the private data model: the minibatch's uint8 images travel with the features."
              if models == {"private"} else
              "Message bytes under the shared data model (int32 indices instead of images; written before messages "
              f"counted their inputs): under the thesis' private shards each message also carries its "
              f"{config['batch_size']} uint8 images."), "",
             "| row | objective | params / node | message bytes | bytes sent / node / step | train s | probe s |",
             "|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        objective = ", ".join(f"{k} {v:.3g}" for k, v in row["final_objective"].items())
        lines.append(f"| {name} | {objective} | {row['num_params']:,} | {row['message_bytes']:,} | "
                     f"{row['bytes_sent_per_node_step']:,.0f} | {row['seconds']:,.0f} | {row['probe_seconds']:,.0f} |")
    return lines


COMPARISONS = tuple(
    (f"{family}_{a}", f"{family}_{b}", f"{family.upper()}: {question}")
    for family in FAMILIES
    for a, b, question in (
        ("10_nodes_no_comm", "1_node", "10 isolated nodes vs one node on all the data"),
        ("10_nodes_full_comm", "10_nodes_no_comm", "exchanging features (replace) vs isolated nodes"),
        ("10_nodes_full_comm_add", "10_nodes_no_comm", "exchanging features (add) vs isolated nodes"),
        ("10_nodes_full_comm_add", "10_nodes_full_comm", "add vs replace"),
        ("10_nodes_no_comm", "10_nodes_untrained", "isolated nodes vs their untrained encoders"),
        ("10_nodes_full_comm", "10_nodes_untrained", "exchanging (replace) vs untrained encoders"),
        ("10_nodes_full_comm_add", "10_nodes_untrained", "exchanging (add) vs untrained encoders"),
        ("1_node", "1_node_untrained", "one node vs its untrained encoder")))
"""The directions Table 2.3 is read for, each paired by seed; ``*_untrained`` are the rows' controls."""


def paired_markdown(rows: dict) -> list[str]:
    """:data:`COMPARISONS` whose rows ran with the same >= 2 seeds, as paired differences of the node average and
    the collective (:func:`jaxcomm.harness.report.paired_comparisons`). The untrained encoders of a family and
    size are the rows ``{family}_{N}_untrained`` here, read from the per-seed controls of a trained row."""
    controls = {}
    for name, row in rows.items():
        family, nodes, _ = ROWS[name]
        per_seed = row.get("per_seed") or ()
        if per_seed and all(p.get("untrained_avg_accuracy") is not None for p in per_seed):
            size = "1_node" if nodes == 1 else f"{nodes}_nodes"
            controls.setdefault(f"{family}_{size}_untrained", {
                "seeds": row["seeds"],
                "per_seed": [{"avg_accuracy": p["untrained_avg_accuracy"],
                              "collective_accuracy": p["untrained_collective_accuracy"]} for p in per_seed]})
    return report.paired_comparisons(
        {**rows, **controls}, COMPARISONS, ("avg_accuracy", "collective_accuracy"),
        why_paired="the same seed draws the same shards, initialisations, probes and messages' randomness; the "
        "untrained encoders are each seed's initialisation")


def overrides_of(command: str) -> str:
    """The ``field=value`` overrides of a run's command, without the ones every variant shares."""
    shared = ("rows=", "probe_untrained=")
    return " ".join(w for w in command.split() if "=" in w and not w.startswith(("--", *shared))) or "(cpu preset)"


def variants_markdown(runs: list[tuple[dict, list[dict]]]) -> str:
    """One line per row of every ``(summary, curves)`` run (e.g. BiGAN recipes on 1 node): its overrides
    of the cpu preset, probe test accuracy at every stage, and the discriminator's mean ``sigmoid D``
    on real and fake pairs at the last measurement."""
    lines = ["| overrides | row | steps | probe avg at each stage | best (step) | D(real) / D(fake) at the end | "
             "train s |", "|---|---|---|---|---|---|---|"]
    for summary, records in sorted(runs, key=lambda run: (run[0]["config"]["num_steps"], len(run[0]["command"]))):
        curves = {r["run"]: r for r in records if r["kind"] == "row"}
        for name, row in summary["rows"].items():
            stages = ", ".join(f"{s['avg_accuracy']:.1f} @{s['step']:,}" for s in row["stages"])
            objective = curves[name]["objective"]
            ends = (f"{objective['d_real'][-1]:.2f} / {objective['d_fake'][-1]:.2f}" if "d_real" in objective
                    else "-")
            lines.append(f"| `{overrides_of(summary['command'])}` | {name} | {row['steps']:,} | {stages} | "
                         f"{row['avg_accuracy']:.1f} ({row['best_step']:,}) | {ends} | {row['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def write_report(out_dir: pathlib.Path, *, plots: bool = True) -> None:
    """table.md, then (with ``plots``) the plots of the run in ``out_dir``; runs under ``out_dir/variants/`` get a
    table of their own."""
    out_dir = pathlib.Path(out_dir)
    summary, records = results.read_run(out_dir)
    curves = [r for r in records if r["kind"] == "row"]
    table = table_markdown(summary)
    variants = results.read_runs_below(out_dir / "variants")
    if variants:
        table += ("\n## Variants (runs in `variants/`, each with its command there)\n\n"
                  + variants_markdown(variants))
    report.write_table(out_dir, table)
    if plots:
        report.draw(probes=lambda: plot_probes(curves, out_dir / "probes.png",
                                               thesis=summary["config"]["dataset"] == "cifar10"),
                    objectives=lambda: plot_objectives(curves, out_dir / "objectives.png"),
                    pictures=lambda: plot_pictures([r for r in records if r["kind"] == "pictures"],
                                                   out_dir / "pictures.png"))
