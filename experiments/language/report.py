"""The report of the chapter-4 experiment (Table 4.1): ``table.md``, Fig. 4.3 and Fig. 4.2, and the reading
generated from the numbers, all drawn from a run's ``summary.json`` and ``curves.jsonl``.

:func:`write_report` is what ``python -m experiments.language report DIR`` calls. :func:`table_markdown` sets the
thesis' Table 4.1 beside the measured rows, then the refit probe, the other cross-entropy normalisation, the study,
the ablations, the pre-registered replication, the whole-run collapse rule, the language metrics, Fig. 4.3's shape
tested on held-out seeds (:func:`curve_shape`), the same agents at a shorter run's end (:func:`continuation`, where
the run sits in a subfolder of that run) and each family's comparisons Holm-adjusted; :func:`reading` writes the
bullets that compare them with the thesis. :func:`plot_fig4_3` and :func:`plot_messages` draw the figures
(matplotlib imported on first use, through :func:`jaxcomm.harness.report.pyplot`). The constants the experiment's
run shares with it (:data:`EXPERIMENT`, :data:`LEVELS`, :data:`THESIS_TABLE`, :data:`ABLATIONS`) live here.

References:
  Lacaille (2018), §4.2-4.3, Fig. 4.2-4.3, Table 4.1.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence

import numpy as np

from jaxcomm import language, stats
from jaxcomm.harness import report, results

EXPERIMENT = "language"
LEVELS = language.LEVEL_NAMES
THESIS_TABLE = {"baseline": 64.4, "student_receiving_only": 65.7, "student_feedback_to_teacher": 69.4,
                "both_feedback": 71.4}
LABELS = {"baseline": "baseline (no communication)", "student_receiving_only": "student receiving only (4.2.6)",
          "student_feedback_to_teacher": "student feedback to teacher (4.2.7)",
          "both_feedback": "both feedback (4.2.8)"}

ABLATIONS = ("fixed_temperature", "delayed_probe", "reinforce")
"""The thesis' ablations (§4.3): a fixed Gumbel temperature, the probe started late, REINFORCE (its future work)."""


def _band(members: list[dict], key: str = "val_accuracy"):
    length = min(len(m["steps"]) for m in members)
    values = np.asarray([m[key][:length] for m in members], float)
    return np.asarray(members[0]["steps"][:length]), values.mean(0), values.std(0)


def plot_fig4_3(summary: dict, curves: list[dict], path: pathlib.Path) -> None:
    """Fig. 4.3: B's probe validation accuracy vs steps per level (mean, band = +-1 std over seeds)."""
    plt = report.pyplot()

    groups = [g for g in ("table", "ce_sum", "ce_mean") if any(c["group"] == g for c in curves)]
    fig, axes = plt.subplots(1, 4, figsize=(22, 4.8))
    for ax, group in zip(axes[:2], groups, strict=False):
        for i, lv in enumerate(LEVELS):
            ms = [c for c in curves if c["group"] == group and c["level"] == lv and not c["frozen"]]
            if not ms:
                continue
            steps, mean, std = _band(ms)
            ax.plot(steps, mean, color=f"C{i}", label=f"{LABELS[lv]} ({len(ms)} seeds)")
            ax.fill_between(steps, mean - std, mean + std, color=f"C{i}", alpha=0.15, linewidth=0)
        frozen = [c for c in curves if c["group"] == group and c["frozen"]]
        if frozen:
            steps, mean, std = _band(frozen)
            ax.plot(steps, mean, ":", color="grey", label=f"probe on untrained agents ({len(frozen)} seeds)")
        norm = next(c["normalisation"] for c in curves if c["group"] == group)
        ax.set_title(f"{'adopted' if group == 'table' else 'other reading'}: cross-entropy {norm} over heads")
        ax.set_xlabel("training steps")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    for ax in axes[len(groups):2]:  # a run without the other reading leaves its panel out
        ax.set_visible(False)
    axes[0].set_ylabel("student probe validation accuracy (%)")
    ax = axes[2]
    for j, group in enumerate(groups):
        for i, lv in enumerate(LEVELS):
            ms = [c for c in curves if c["group"] == group and c["level"] == lv and not c["frozen"]]
            if ms and ms[0].get("agreement"):
                steps, mean, _ = _band(ms, "agreement")
                ax.plot(steps, mean, "-" if j == 0 else "--", color=f"C{i}",
                        label=f"{lv} ({ms[0]['normalisation']})")
    ax.set_title("A/B hard-message agreement (1.0 with chance critic = collapse)")
    ax.set_xlabel("training steps")
    ax.set_ylim(0.3, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    ax = axes[3]
    for i, lv in enumerate(LEVELS):
        ms = [c for c in curves if c["group"] == "table" and c["level"] == lv and not c["frozen"]]
        if ms and ms[0].get("mi_bits_a"):
            steps, mean, std = _band(ms, "mi_bits_a")
            ax.plot(steps, mean, color=f"C{i}", label=lv)
            ax.fill_between(steps, mean - std, mean + std, color=f"C{i}", alpha=0.15, linewidth=0)
    cap = np.log2(summary["config"]["diag_batch"])
    ax.axhline(cap, color="grey", linestyle=":", linewidth=0.8, label=f"cap log2(batch) = {cap:.0f} bits")
    ax.set_title("I(X_A; S_A) lower bound (InfoNCE, hard messages), bits")
    ax.set_xlabel("training steps")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.suptitle("Two agents, 32-bit Gumbel-softmax language, MNIST with 10 % inverted pixels "
                 "(mean over seeds, band = +-1 std)", fontsize=10)
    report.save_figure(fig, path)


def plot_messages(summary: dict, path: pathlib.Path) -> None:
    """Fig. 4.2: the teacher's message for a few digits at high and low temperature (same logits and noise)."""
    plt = report.pyplot()

    ex = summary["message_examples"]
    n, temps = len(ex["digits"]), ex["temperatures"]
    fig, axes = plt.subplots(n, 1 + len(temps), figsize=(3 + 4 * len(temps), 1.3 * n + 1),
                             gridspec_kw={"width_ratios": [1] + [4] * len(temps)})
    for r in range(n):
        axes[r, 0].imshow(np.asarray(ex["views"][r]), cmap="gray")
        axes[r, 0].set_axis_off()
        axes[r, 0].set_title(f"digit {ex['digits'][r]} (A's view)", fontsize=7)
        for c, t in enumerate(temps):
            ax = axes[r, c + 1]
            ax.imshow(np.asarray(ex["samples"][c][r])[None, :], cmap="viridis", vmin=0, vmax=1, aspect="auto")
            ax.set_yticks([])
            ax.set_xticks([])
            if r == 0:
                ax.set_title(f"temperature {t}: P(bit = 1) of the relaxed sample", fontsize=8)
    member = ex["member"]
    fig.suptitle(f"Teacher messages after training ({member['level']}, seed {member['seed']}); same logits and "
                 f"Gumbel noise at every temperature", fontsize=9)
    report.save_figure(fig, path)


def _ci(row: dict) -> str:
    lo, hi = row.get("paired_diff_ci95", [None, None])
    if row.get("paired_diff_vs_baseline") is None or lo is None or not np.isfinite(lo):
        return "-"
    return f"{row['paired_diff_vs_baseline']:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def paired_p_value(row: dict) -> float | None:
    """Two-sided p-value of the paired t-test behind a row's 95 % interval (None without one)."""
    return stats.p_value_from_ci95(row.get("paired_diff_vs_baseline"), row.get("paired_diff_ci95"),
                                   row.get("paired_seeds", 0))


def study_answer(summary: dict, *, gain: float = 2.0) -> str:
    """The study's answer: settings where both-feedback beats the baseline by >= ``gain`` points, CI above 0.

    Looks at the table's row (10 % noise, 32 bits, adopted normalisation) and every study setting.
    """
    rows = summary["rows"]
    cells = [("table (noise10, L=32)", rows["both_feedback"])] if "both_feedback" in rows else []
    cells += [(name.split("/")[1], row) for name, row in rows.items()
              if name.startswith("study/") and name.endswith("/both_feedback")]
    cells = [(name, row) for name, row in cells if row.get("paired_diff_vs_baseline") is not None]
    hits = [f"{name} ({_ci(row)})" for name, row in cells
            if row["paired_diff_vs_baseline"] >= gain and np.isfinite(row["paired_diff_ci95"][0] or np.nan)
            and row["paired_diff_ci95"][0] > 0]
    if hits:
        tests = []
        for name, row in cells:
            p = paired_p_value(row)
            if p is not None and f"{name} (" in " ".join(hits):
                adjusted = min(1.0, p * len(cells))
                tests.append(f"{name}: two-sided paired t-test p = {p:.3f}, Bonferroni-adjusted over the "
                             f"{len(cells)} both-feedback cells p = {adjusted:.3f}: "
                             + ("a direction read" if adjusted < 0.05 else "no direction read"))
        return (f"Both-feedback gains >= {gain:g} points over the baseline with a raw 95 % interval above zero (not "
                "adjusted) in: " + "; ".join(hits) + ". (" + "; ".join(tests) + ".)")
    if not cells:
        return "No both-feedback row was measured."
    name, row = max(cells, key=lambda c: c[1]["paired_diff_vs_baseline"])
    return (f"None of the measured settings gives a both-feedback gain of >= {gain:g} points with a 95 % interval "
            f"above zero. The largest measured both-feedback gain is {name}: {_ci(row)} points.")


def _significance(row: dict) -> str:
    """Where a raw (unadjusted) interval lies, for the generator's own choices; never printed as a finding (see
    :func:`_raw`)."""
    lo, hi = row.get("paired_diff_ci95", [None, None])
    if lo is None or not np.isfinite(lo):
        return "no interval"
    return "above zero" if lo > 0 else "below zero" if hi < 0 else "contains zero"


def _raw(row: dict) -> str:
    """The label of an interval outside any Holm family: it is not read as a direction."""
    return "no interval" if _significance(row) == "no interval" else "raw interval, not adjusted"


def reading(summary: dict) -> list[str]:
    """Bullet points comparing the measured table with the thesis' Table 4.1, from the rows alone."""
    rows, out = summary["rows"], []
    if "baseline" not in rows:
        return out
    base = rows["baseline"]["test_accuracy"]
    out.append(f"- Baseline: {base:.1f} % measured vs {THESIS_TABLE['baseline']} % in the thesis "
               f"({base - THESIS_TABLE['baseline']:+.1f} points).")
    adjusted = holm_levels(rows)
    for lv in LEVELS[1:]:
        if lv not in rows:
            continue
        r = rows[lv]
        thesis_gain = THESIS_TABLE[lv] - THESIS_TABLE["baseline"]
        lo, hi = r["paired_diff_ci95"]
        inside = lo is not None and np.isfinite(lo) and lo <= thesis_gain <= hi
        out.append(f"- {LABELS[lv]}: thesis gain {thesis_gain:+.1f}, measured paired gain {_ci(r)} (interval "
                   f"{_word(r['paired_diff_vs_baseline'], r['paired_diff_ci95'], adjusted.get(lv))}; the thesis' "
                   f"gain is {'inside' if inside else 'outside'} it).")
    order = sorted((lv for lv in LEVELS if lv in rows), key=lambda lv: rows[lv]["test_accuracy"])
    out.append(f"- Thesis ordering baseline < receiving only < feedback < both feedback: "
               f"{'reproduced' if order == list(LEVELS) else 'not reproduced'} (measured, lowest to highest mean: "
               f"{', '.join(order)}).")
    if "refit_test_accuracy" in rows.get("random_init_probe", {}):
        r = rows["random_init_probe"]
        rising = r["best_step"] >= r["steps"]
        out.append(f"- Probe on untrained agents, online (as the table's): {r['test_accuracy']:.1f} %, best at step "
                   f"{r['best_step']:.0f} of {r['steps']}" + (": still rising at the end, so the trained levels' "
                                                               "margin over it is inflated" if rising else "")
                   + "; the refit probes below compare probes trained to convergence.")
    elif "random_init_probe" in rows:
        rnd = rows["random_init_probe"]["test_accuracy"]
        lowest = min(rows[lv]["test_accuracy"] for lv in LEVELS if lv in rows)
        out.append(f"- Probe on untrained agents: {rnd:.1f} %, {abs(lowest - rnd):.1f} points "
                   f"{'below' if rnd < lowest else 'ABOVE'} the lowest trained level: training the language "
                   f"{'adds' if rnd < lowest else 'does not add'} information to B's features beyond a random "
                   "projection (hazard (b) of the issue " + ("avoided)." if rnd < lowest else "present)."))
    other = [k for k in rows if k.startswith("ce_") and k.endswith("/both_feedback")]
    for key in other:
        group = key.split("/")[0]
        coll = sum(rows[f"{group}/{lv}"]["collapsed_seeds"] for lv in LEVELS if f"{group}/{lv}" in rows)
        seeds = sum(rows[f"{group}/{lv}"]["seeds"] for lv in LEVELS if f"{group}/{lv}" in rows)
        r = rows[key]
        out.append(f"- Other cross-entropy normalisation ({group}): {coll}/{seeds} runs collapsed by the rule "
                   f"above; both feedback: final A/B agreement {r.get('final_agreement', float('nan')):.2f} with "
                   f"critic accuracy {r.get('final_disc_a', float('nan')):.2f} and "
                   f"{r.get('final_distinct_a', float('nan')):.2f} distinct messages, paired gain {_ci(r)}.")
    out.append("- Note: a FIXED inversion mask is an invertible map of the image (x -> 1 - x on fixed pixels), so "
               "the 10/30/50 % views lose no information and an agent can in principle undo its own mask; only the "
               "halves views make the agents' observations truly partial.")
    strong, weak, full = (rows.get(k) for k in ("study/halves_sum/both_feedback", "study/halves/both_feedback",
                                                  "ce_sum/both_feedback"))
    if strong and weak:
        text = (f"- Partial views x normalisation (halves_sum is beyond the issue's grid): with complementary halves, "
                f"both feedback gains {_ci(weak)} with the adopted averaged cross-entropy and {_ci(strong)} with the "
                f"summed one (weights x L)")
        text += f"; on the full 10 % views the summed reading gives {_ci(full)}." if full else "."
        if _significance(strong) == "above zero" and full and _significance(full) == "below zero":
            text += (" Both raw intervals exclude 0 (not adjusted, outside any Holm family): that a strong likelihood "
                     "term helps the student when the agents' views are truly complementary and hurts it when they "
                     "are not is a hypothesis here, not a finding.")
        out.append(text)
    if any(k.startswith("study/") for k in rows):
        out.append("- Study: " + study_answer(summary))
    return out + _reading_beyond(rows)


def _word(mean: float | None, ci: Sequence | None, adjusted: float | None = None) -> str:
    """A direction only where the interval excludes 0 and, given the family's Holm-adjusted p, that is < 0.05."""
    if mean is None or not ci or ci[0] is None or not np.isfinite(ci[0]):
        return "no interval"
    word = "above zero" if ci[0] > 0 else "below zero" if ci[1] < 0 else "contains zero: no direction read"
    if adjusted is None and word != "contains zero: no direction read":
        return f"raw interval {word}, not adjusted: no direction read"
    if word != "contains zero: no direction read":
        word = (word if adjusted < 0.05 else f"raw interval {word}, no direction read after Holm") \
            + f"; Holm p = {adjusted:.3g}"
    return word


def holm_levels(rows: dict) -> dict[str, float | None]:
    """Holm-adjusted p of each level minus baseline (online probe), the Table 4.1 family."""
    levels = [lv for lv in LEVELS[1:] if rows.get(lv, {}).get("paired_diff_vs_baseline") is not None]
    return dict(zip(levels, stats.holm([paired_p_value(rows[lv]) for lv in levels]), strict=True))


def holm_ablations(rows: dict) -> dict[str, float | None]:
    """Holm-adjusted p of each ablated row minus the table (same level and seed), the ablations' family."""
    keys = [f"{g}/{lv}" for g in ABLATIONS for lv in LEVELS if rows.get(f"{g}/{lv}", {}).get("paired_diff_vs_table")
            is not None]
    raw = [stats.p_value_from_ci95(rows[k]["paired_diff_vs_table"], rows[k]["paired_diff_vs_table_ci95"],
                                   rows[k].get("paired_seeds_vs_table", 0)) for k in keys]
    return dict(zip(keys, stats.holm(raw), strict=True))


def _reading_beyond(rows: dict) -> list[str]:
    """Bullets for the refit probes, the ablations, the pre-registered cell and the whole-run collapse rule."""
    out = []
    rnd = rows.get("random_init_probe", {})
    if "refit_test_accuracy" in rnd:
        refits = [lv for lv in LEVELS if RANDOM_CI in rows.get(lv, {})]
        adjusted = dict(zip(refits, stats.holm([stats.p_value_from_ci95(
            rows[lv]["refit_paired_diff_vs_random_init"], rows[lv][RANDOM_CI], rows[lv].get("paired_seeds", 0))
            for lv in refits]), strict=True))
        parts = [f"{lv} {_interval(rows[lv]['refit_paired_diff_vs_random_init'], rows[lv][RANDOM_CI])} "
                 f"({_word(rows[lv]['refit_paired_diff_vs_random_init'], rows[lv][RANDOM_CI], adjusted[lv])})"
                 for lv in refits]
        out.append(f"- Probes refit to convergence: untrained agents {rnd['refit_test_accuracy']:.1f} % (online probe "
                   f"{rnd['test_accuracy']:.1f} %, best at step {rnd['best_step']:.0f} of {rnd['steps']}); trained "
                   "minus untrained, paired by seed: " + "; ".join(parts) + ".")
    ablated = holm_ablations(rows)
    for g in ABLATIONS:
        parts = [f"{lv} {_interval(r['paired_diff_vs_table'], r['paired_diff_vs_table_ci95'])} "
                 f"({_word(r['paired_diff_vs_table'], r['paired_diff_vs_table_ci95'], ablated.get(f'{g}/{lv}'))})"
                 for lv in LEVELS if (r := rows.get(f"{g}/{lv}"))]
        if parts:
            both = rows.get(f"{g}/both_feedback")
            tail = (f"; both feedback minus baseline under it {_ci(both)} ({_raw(both)})" if both else "")
            out.append(f"- Ablation {g.replace('_', ' ')}: minus the table, same level and seed: " + "; ".join(parts)
                       + tail + ".")
    if "prereg/both_feedback" in rows:
        r = rows["prereg/both_feedback"]
        out.append(f"- Pre-registered halves_sum replication (seeds {r['seed_list'][0]}-{r['seed_list'][-1]}): both "
                   f"feedback minus baseline {_ci(r)}: **{prereg_verdict(r)}**" + _post_hoc(rows) + ").")
    runs = [(k, r) for k, r in rows.items() if "collapsed_runs" in r]
    if runs:
        hit = [f"{k} {r['collapsed_runs']}/{r['seeds']}" for k, r in runs if r["collapsed_runs"]]
        out.append("- Collapse over the whole run: " + (", ".join(hit) if hit else "no run of any row")
                   + f" (final-evaluation rule: {sum(r['collapsed_seeds'] for _, r in runs)} runs).")
    return out


def _post_hoc(rows: dict) -> str:
    """The study cell the pre-registration tested, as this run measured it (empty without it)."""
    post = rows.get("study/halves_sum/both_feedback")
    if post is None:
        return ""
    return f" (the study's post hoc estimate on its {post['paired_seeds']} seeds: {_ci(post)}"


def curve_shape(curves: list[dict], level: str, group: str = "table") -> dict | None:
    """Whether ``level``'s validation curve peaks and then declines (Fig. 4.3), read without selection bias: the
    peak step is chosen on the mean curve of the first half of the seeds, the decline (final minus value at that
    step, paired by seed) measured on the other half. None with fewer than 4 seeds."""
    ms = sorted((c for c in curves if c["group"] == group and c["level"] == level and not c["frozen"]),
                key=lambda c: c["seed"])
    if len(ms) < 4:
        return None
    choose, test = ms[: len(ms) // 2], ms[len(ms) // 2:]
    steps, mean_choose, _ = _band(choose)
    _, mean_all, _ = _band(ms)
    k = int(np.argmax(mean_choose))
    diffs = [m["val_accuracy"][len(steps) - 1] - m["val_accuracy"][k] for m in test]
    return {"peak_step": int(steps[k]), "last_step": int(steps[-1]), "peak_step_all": int(steps[np.argmax(mean_all)]),
            "val_at_peak": float(mean_all[k]), "val_final": float(mean_all[-1]),
            "chosen_on": [m["seed"] for m in choose], "tested_on": [m["seed"] for m in test],
            "decline": float(np.mean(diffs)), "decline_ci95": list(stats.paired_ci95(diffs, digits=None)),
            "p": stats.paired_t_p_value(diffs)}


def _shape_section(curves: list[dict] | None) -> list[str]:
    shapes = {lv: curve_shape(curves, lv) for lv in LEVELS} if curves else {}
    shapes = {lv: s for lv, s in shapes.items() if s}
    if not shapes:
        return []
    adjusted = dict(zip(shapes, stats.holm([s["p"] for s in shapes.values()]), strict=True))
    first = next(iter(shapes.values()))
    lines = ["", "## Fig. 4.3's shape: does validation accuracy peak early and then decline?", "",
             f"Peak step chosen on the mean validation curve of seeds {first['chosen_on']}, the decline (final "
             f"minus the value at that step, paired by seed) measured on seeds {first['tested_on']}, so the choice "
             "does not bias the test; Holm-adjusted over the levels. 'Declines' only where the adjusted p < 0.05 "
             "and the interval is below 0.", "",
             "| level | peak step (chosen) / of all seeds | val. at peak / final (all seeds) | decline on held-out "
             "seeds [95 % CI] | p (Holm) | reading |", "|---|---|---|---|---|---|"]
    for lv, sh in shapes.items():
        lo, hi = sh["decline_ci95"]
        verdict = ("declines" if adjusted[lv] < 0.05 and hi < 0 else "rises" if adjusted[lv] < 0.05 and lo > 0
                   else "no change detected")
        lines.append(f"| {LABELS[lv]} | {sh['peak_step']} / {sh['peak_step_all']} of {sh['last_step']} | "
                     f"{sh['val_at_peak']:.2f} / {sh['val_final']:.2f} | {_interval(sh['decline'], [lo, hi])} | "
                     f"{sh['p']:.3g} ({adjusted[lv]:.3g}) | {verdict} |")
    return lines


def _holm_section(rows: dict) -> list[str]:
    """Each family's paired comparisons with their raw and Holm-adjusted two-sided p-values."""
    families = {"Table 4.1, online probe: level minus baseline": [
        (LABELS[lv], rows[lv].get("paired_diff_vs_baseline"), rows[lv].get("paired_diff_ci95"),
         rows[lv].get("paired_seeds", 0)) for lv in LEVELS[1:] if lv in rows]}
    families["Table 4.1, refit probe: level minus baseline"] = [
        (LABELS[lv], rows[lv]["refit_paired_diff_vs_baseline"], rows[lv]["refit_paired_diff_ci95"],
         rows[lv].get("paired_seeds", 0)) for lv in LEVELS[1:] if "refit_paired_diff_vs_baseline" in rows.get(lv, {})]
    families["Refit probe: trained minus untrained agents, same seed"] = [
        (LABELS[lv], rows[lv]["refit_paired_diff_vs_random_init"], rows[lv][RANDOM_CI], rows[lv].get("paired_seeds", 0))
        for lv in LEVELS if RANDOM_CI in rows.get(lv, {})]
    families["Ablations: ablated minus the table, same level and seed"] = [
        (f"{g.replace('_', ' ')}, {lv}", r["paired_diff_vs_table"], r["paired_diff_vs_table_ci95"],
         r.get("paired_seeds_vs_table", 0)) for g in ABLATIONS for lv in LEVELS if (r := rows.get(f"{g}/{lv}"))]
    lines = []
    for title, family in families.items():
        family = [f for f in family if f[1] is not None]
        if not family:
            continue
        raw = [stats.p_value_from_ci95(mean, ci, n) for _, mean, ci, n in family]
        adjusted = stats.holm(raw)
        lines += ["", f"**{title}** ({len(family)} comparisons, Holm-adjusted):", "",
                  "| comparison | paired diff [95 % CI] | p | p (Holm) | direction read |", "|---|---|---|---|---|"]
        for (name, mean, ci, _), p, q in zip(family, raw, adjusted, strict=True):
            word = "-" if q is None else ("above zero" if q < 0.05 and mean > 0 else "below zero" if q < 0.05
                                          else "none (adjusted p >= 0.05)")
            lines.append(f"| {name} | {_interval(mean, ci)} | {'-' if p is None else f'{p:.3g}'} | "
                         f"{'-' if q is None else f'{q:.3g}'} | {word} |")
    return (["", "## Multiplicity: each family's comparisons, Holm-adjusted", "",
             "A direction is read only where the Holm-adjusted p-value is below 0.05 (p recovered from the "
             "recorded mean and 95 % interval, paired t-test)."] + lines) if lines else []


def continuation(curves: list[dict], earlier: list[dict]) -> dict | None:
    """This run against a shorter run of the same table members (level, seed), where it is the same trajectory
    continued (validation curves identical over the shorter run's steps): per level, the refit probe's test accuracy
    at the end of this run minus at the end of the shorter one, paired by seed, Holm-adjusted over the levels. None
    where the runs are not one trajectory."""
    key = lambda c: (c["level"], c["seed"])  # noqa: E731
    mine = {key(c): c for c in curves if c["group"] == "table" and not c["frozen"] and "refit_test_accuracy" in c}
    theirs = {key(c): c for c in earlier if c["group"] == "table" and not c["frozen"] and "refit_test_accuracy" in c}
    shared = sorted(set(mine) & set(theirs))
    if not shared or any(len(theirs[k]["steps"]) >= len(mine[k]["steps"])
                         or mine[k]["val_accuracy"][:len(theirs[k]["steps"])] != theirs[k]["val_accuracy"]
                         for k in shared):
        return None
    levels = [lv for lv in LEVELS if any(k[0] == lv for k in shared)]
    diffs = {lv: [mine[k]["refit_test_accuracy"] - theirs[k]["refit_test_accuracy"] for k in shared if k[0] == lv]
             for lv in levels}
    adjusted = stats.holm([stats.paired_t_p_value(d) for d in diffs.values()])
    return {"from_step": theirs[shared[0]]["steps"][-1], "to_step": mine[shared[0]]["steps"][-1],
            "levels": {lv: {"diff": float(np.mean(d)), "ci95": list(stats.paired_ci95(d, digits=None)), "seeds": len(d),
                            "p_holm": q} for (lv, d), q in zip(diffs.items(), adjusted, strict=True)}}


def _continuation_section(result: dict | None, folder: str) -> list[str]:
    if result is None:
        return []
    lines = ["", f"## The same agents at step {result['from_step']:,} and at step {result['to_step']:,}", "",
             f"`{folder}` holds the shorter run of the same members: its validation curves are this run's, value for "
             f"value, up to step {result['from_step']:,} (one trajectory, continued). The probe refit to convergence "
             f"on B's frozen features at step {result['to_step']:,} minus at step {result['from_step']:,}, paired by "
             "seed, Holm-adjusted over the levels:", "",
             "| level | refit probe, later minus earlier [95 % CI] | seeds | p (Holm) | reading |",
             "|---|---|---|---|---|"]
    for lv, r in result["levels"].items():
        lo, hi = r["ci95"]
        verdict = ("declines" if r["p_holm"] < 0.05 and hi < 0 else "rises" if r["p_holm"] < 0.05 and lo > 0
                   else "no change detected")
        lines.append(f"| {LABELS[lv]} | {_interval(r['diff'], r['ci95'])} | {r['seeds']} | {r['p_holm']:.3g} | "
                     f"{verdict} |")
    return lines


def table_markdown(summary: dict, curves: list[dict] | None = None, earlier: tuple[str, list[dict]] | None = None
                   ) -> str:
    """table.md: thesis Table 4.1 beside the measured numbers, the study, the collapsing reading and the choices;
    with ``curves``, Fig. 4.3's shape tested on held-out seeds; with ``earlier`` (a folder and its curves), the
    refit probe of the same agents at the shorter run's end against this run's (:func:`continuation`)."""
    rows, cfg = summary["rows"], summary["config"]
    lines = _heading(summary) + _table_section(rows, cfg) + _refit_section(rows, cfg)
    lines += _other_reading_section(rows, cfg) + _study_section(summary)
    lines += _ablation_section(rows, cfg) + _prereg_section(rows) + _collapse_section(rows, summary)
    lines += _language_section(rows, cfg) + _shape_section(curves)
    if curves and earlier:
        lines += _continuation_section(continuation(curves, earlier[1]), earlier[0])
    lines += _holm_section(rows)
    lines += ["", "## Reading (generated from the numbers above)", "", *reading(summary)]
    lines += _choices_section(cfg)
    return "\n".join(lines)


def _heading(summary: dict) -> list[str]:
    """The title, the command, preset, wall time, device and commit, and the populations trained."""
    cfg = summary["config"]
    return ["# Chapter 4: two agents learn a 32-bit language by maximising mutual information (MNIST), Table 4.1",
            "", f"Command: `{summary['command']}` (base seed {cfg['seed']})  ",
            f"Preset `{summary['preset']}`, wall time {summary['wall_seconds']:.0f} s "
            f"({summary['wall_seconds'] / 60:.1f} min) on {summary['device']}; commit `{summary['git_commit']}`.  ",
            "Populations (each one jitted step over all its members): " + "; ".join(
                f"{k} ({'+'.join(g['groups'])}): {g['members']} members x {g['steps_done']} steps, "
                f"{g['seconds']:.0f} s" for k, g in summary["populations"].items()) + ".", ""]


def _level_line(name: str, row: dict, thesis: str) -> str:
    """A row of Table 4.1 (or of the other reading's table)."""
    return (f"| {name} | {thesis} | {row['test_accuracy']:.2f} ± {row['test_accuracy_std']:.2f} | {_ci(row)} | "
            f"{row['best_step']:.0f} | {row['collapsed_seeds']}/{row['seeds']} | "
            f"{row.get('final_disc_a', float('nan')):.3f} | {row.get('final_agreement', float('nan')):.3f} | "
            f"{row.get('final_distinct_a', float('nan')):.3f} | "
            f"{row.get('peak_mi_bits_a', float('nan')):.2f} / {row.get('final_mi_bits_a', float('nan')):.2f} |")


def _table_section(rows: dict, cfg: dict) -> list[str]:
    """Table 4.1: the thesis' accuracy of each level beside the measured one, and the probe on untrained agents."""
    lines = ["## Table 4.1 (adopted reading: cross-entropy averaged over the heads)", "",
             f"Test accuracy (%) of the student's linear probe at its best validation step (mean ± std over "
             f"{cfg['seeds']} seeds, {cfg['num_steps']} steps, validation every {cfg['eval_every']} steps). Paired "
             "difference = level minus baseline on the same seed (same initialisation, masks, minibatches and "
             "Gumbel noise), mean and Student-t 95 % interval, in points. Collapsed = final critic at chance "
             "(|acc - 0.5| <= 0.05) with A/B agreement >= 0.95. MI = InfoNCE lower bound of A's critic on "
             f"{cfg['diag_batch']} validation images with hard messages (capped at "
             f"{np.log2(cfg['diag_batch']):.1f} bits), peak over training / final. Distinct messages = fraction of "
             f"distinct hard messages of A among those {cfg['diag_batch']} images (1/{cfg['diag_batch']} = one "
             "constant message).", "",
             "| level | thesis | measured | paired diff vs baseline [95 % CI] | best step (median) | collapsed | "
             "critic acc. A (final) | A/B agreement (final) | distinct messages A (final) | MI A bits (peak / final) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for lv in LEVELS:
        if lv in rows:
            lines.append(_level_line(LABELS[lv], rows[lv], f"{THESIS_TABLE[lv]}"))
    if "random_init_probe" in rows:
        r = rows["random_init_probe"]
        lines.append(f"| probe on untrained agents (random init) | - | {r['test_accuracy']:.2f} ± "
                     f"{r['test_accuracy_std']:.2f} | - | {r['best_step']:.0f} | - | - | - | - | - |")
    return lines


def _other_reading_section(rows: dict, cfg: dict) -> list[str]:
    """Table 4.1 again under the other cross-entropy normalisation, where the run trained it."""
    other = "sum" if cfg["ce_normalisation"] == "mean" else "mean"
    if not any(k.startswith(f"ce_{other}/") for k in rows):
        return []
    steps = rows[f"ce_{other}/baseline"]["steps"]
    word = "summed" if other == "sum" else "averaged"
    lines = ["", f"## The other reading: cross-entropy {word} over the {cfg['message_length']} heads "
             f"({cfg['collapse_seeds']} seeds, {steps} steps, same weights 0.01 / 0.005)", "",
             "| level | thesis | measured | paired diff vs baseline [95 % CI] | best step (median) | collapsed | "
             "critic acc. A (final) | A/B agreement (final) | distinct messages A (final) | "
             "MI A bits (peak / final) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for lv in LEVELS:
        if f"ce_{other}/{lv}" in rows:
            lines.append(_level_line(LABELS[lv], rows[f"ce_{other}/{lv}"], f"{THESIS_TABLE[lv]}"))
    return lines


def _study_section(summary: dict) -> list[str]:
    """The study beyond the thesis (noise, views, message length): each level's gain over its setting's baseline,
    and its answer."""
    rows, cfg = summary["rows"], summary["config"]
    study = sorted({k.split("/")[1] for k in rows if k.startswith("study/")})
    if not study:
        return []
    lines = ["", "## Study beyond the thesis: how partial the views, how long the message", "",
             f"{cfg['study_seeds']} paired seeds per level, {cfg['study_steps']} steps (fewer than the table, "
             "to fit the CPU budget); the 10 % / 32-bit cell is the table above. Each cell: test accuracy of "
             "the level, then its paired gain over the same setting's baseline [95 % CI], points. "
             "halves = A sees the top half, B the bottom half (plus each one's 10 % inverted pixels); "
             "halves_sum = the same views with the summed cross-entropy (weights x L).", "",
             "| setting | noise | view | L | CE over heads | baseline | receiving only | feedback to teacher | "
             "both feedback | collapsed (all levels) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in study:
        r = {lv: rows.get(f"study/{s}/{lv}") for lv in LEVELS}
        cells = [f"{r['baseline']['test_accuracy']:.2f} ± {r['baseline']['test_accuracy_std']:.2f}"]
        cells += [f"{r[lv]['test_accuracy']:.2f}; {_ci(r[lv])}" if r[lv] else "-" for lv in LEVELS[1:]]
        coll = sum(x["collapsed_seeds"] for x in r.values() if x)
        b = r["baseline"]
        lines.append(f"| {s} | {b['noise']} | {b['view']} | {b['length']} | {b['normalisation']} | "
                     + " | ".join(cells) + f" | {coll} |")
    return lines + ["", "**Answer:** " + study_answer(summary)]


def _choices_section(cfg: dict) -> list[str]:
    """The choices where the thesis is silent, with the run's values."""
    norm = cfg["ce_normalisation"]
    return ["", "## Choices where the thesis is silent", "",
           "- Data: MNIST official training set split 50,000 / 10,000 (last 10,000 = validation), official 10,000 "
           "test (§4.2.1.2); pixels in [0, 1]; an inverted pixel is 1 - x.",
           f"- Message generators: ReLU MLP 784-{'-'.join(map(str, cfg['hidden']))} -> "
           f"{cfg['message_length']} heads x 2 logits, Flax default init; the probe reads the "
           f"{cfg['hidden'][-1]}-unit last hidden layer. Kept small on purpose: wide layers make the probe on "
           "untrained agents beat every trained level (issue 4, hazard (b)); the random-init row measures it.",
           f"- Critic (discriminator), one per agent: MLP on the concatenation [x (784), flattened message "
           f"({2 * cfg['message_length']})] -> {cfg['critic_hidden']} ReLU -> 1 logit; objective "
           f"`{cfg['critic']}` (vanilla GAN: one negative (x_b, s_(b+1)) per positive, the message of the next "
           "sample in the minibatch); generator and critic both minimise the same loss (max-max).",
           f"- Messages in training: relaxed Gumbel-softmax samples (no straight-through), estimator "
           f"`{cfg['estimator']}`; temperature {cfg['tau_init']} x{cfg['tau_decay']} every {cfg['tau_every']} "
           f"steps, floor {cfg['tau_floor']}; hard argmax messages at evaluation (diagnostics).",
           f"- Likelihood terms: the cross-entropy between the received relaxed sample (target) and the log of the "
           f"receiver's own relaxed sample (eq. 4.2.6 with s = Gumbel-softmax sample values), "
           f"**{norm}** over the heads (adopted), weights {cfg['one_way_weight']} (receiving only) and "
           f"{cfg['two_way_weight']} (each term of the feedback levels). Summed over heads the same weights are "
           f"x{cfg['message_length']} larger; that reading is shown above.",
           "- Gradient paths: receiving only: the target s_A is a constant (no gradient into A); feedback to "
           "teacher: the same term, gradient also into A through s_A; both feedback: both terms, gradients into "
           "both senders and both predictors (tested: a forbidden gradient is exactly zero).",
           f"- Optimisers: Adam {cfg['learning_rate']} for generators and critics (one optimiser over both agents), "
           f"batch {cfg['batch_size']}, minibatches drawn uniformly with replacement; the probe: Adam "
           f"{cfg['probe_learning_rate']} on the same minibatch, stopped features of B, trained from step 0 "
           "(the thesis found delaying it no better; the delayed-probe ablation measures it)" + (
               f"; the refit probe: Adam {cfg['refit_learning_rate']}, batch 256, {cfg['refit_epochs']} epochs on "
               "standardised frozen features, best validation epoch." if cfg.get("refit_epochs") else "."),
           "- Test accuracy: the probe and B's generator at the best validation evaluation (per seed).",
           "- Masks: Bernoulli(noise) per pixel, drawn once per agent and seed (`uniform < noise`, so the 10 % "
           "mask of a seed is inside its 30 % and 50 % masks); identical across levels for a seed.",
           ""]


def _interval(mean: float | None, ci: Sequence | None) -> str:
    if mean is None or not ci or ci[0] is None or not np.isfinite(ci[0]):
        return "-"
    return f"{mean:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]"


RANDOM_CI = "refit_paired_diff_vs_random_init_ci95"


def _refit_section(rows: dict, cfg: dict) -> list[str]:
    """The probe refit to convergence on the final (and the untrained) agents' frozen features."""
    names = [lv for lv in LEVELS if "refit_test_accuracy" in rows.get(lv, {})]
    if not names:
        return []
    out = ["", "### The probe refit to convergence on frozen features", "",
           f"After the {cfg['num_steps']} steps, a fresh linear probe per member on B's final features (frozen), "
           f"trained {cfg['refit_epochs']} epochs (Adam {cfg['refit_learning_rate']}, batch 256, standardised "
           "features) and early-stopped on validation, as the thesis trains chapter 2's probes; the untrained "
           "agents are each seed's initialisation, so trained minus untrained is paired by seed. Converged = the "
           "last quarter of the epochs raised the best validation accuracy by < 0.2 points.", "",
           "| level | online probe (above) | refit probe | paired diff vs baseline [95 % CI] | paired diff vs "
           "untrained agents [95 % CI] | converged | best epoch (median) |", "|---|---|---|---|---|---|---|"]
    for lv in [*names, "random_init_probe"]:
        r = rows.get(lv)
        if not r or "refit_test_accuracy" not in r:
            continue
        label = LABELS.get(lv, "probe on untrained agents (random init)")
        out.append(f"| {label} | {r['test_accuracy']:.2f} ± {r['test_accuracy_std']:.2f} | "
                   f"{r['refit_test_accuracy']:.2f} ± {r['refit_test_accuracy_std']:.2f} | "
                   f"{_interval(r.get('refit_paired_diff_vs_baseline'), r.get('refit_paired_diff_ci95'))} | "
                   f"{_interval(r.get('refit_paired_diff_vs_random_init'), r.get(RANDOM_CI))} | "
                   f"{r['refit_converged']}/{r['seeds']} | {r['refit_best_epoch']:.0f} |")
    return out


def _ablation_section(rows: dict, cfg: dict) -> list[str]:
    """The thesis' ablations (§4.3), each paired by seed with the table's member of the same level."""
    found = [(g, lv) for g in ABLATIONS for lv in LEVELS if f"{g}/{lv}" in rows]
    if not found:
        return []
    what = {"fixed_temperature": f"Gumbel temperature fixed at {cfg['fixed_temperature']} (the table anneals "
                                 f"{cfg['tau_init']} x{cfg['tau_decay']} every {cfg['tau_every']} steps, floor "
                                 f"{cfg['tau_floor']})",
            "delayed_probe": f"the probe starts at step {cfg['probe_delay']}, so it trains "
                             f"{cfg['num_steps'] - cfg['probe_delay']} steps, not {cfg['num_steps']} (the agents are "
                             "the table's, bit for bit: the probe reads stopped features)",
            "reinforce": "score-function (REINFORCE) gradients through hard sampled messages, batch-mean baseline, "
                         "instead of relaxed Gumbel-softmax samples"}
    thesis = {"fixed_temperature": "no benefit; slightly more stable; below the annealed peak",
              "delayed_probe": "no gain; slightly more stable; below the no-delay peak",
              "reinforce": "suggested as future work (not run)"}
    out = ["", "## Ablations of §4.3 (paired by seed with the table)", "",
           f"{cfg['seeds']} seeds, {cfg['num_steps']} steps, the table's settings except the one named. vs table = "
           "the ablation minus the table's member of the same level and seed; vs baseline = both feedback minus "
           "baseline under the same ablation; refit = the probe refit to convergence on the final agents (as "
           "above).", "",
           "| ablation | level | measured | vs table [95 % CI] | vs baseline [95 % CI] | best step (median) | "
           "refit probe | refit vs table [95 % CI] | collapsed runs (whole run) | thesis |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for g, lv in found:
        r = rows[f"{g}/{lv}"]
        vs_base = _ci(r) if lv != "baseline" else "-"
        refit = (f"{r['refit_test_accuracy']:.2f} ± {r['refit_test_accuracy_std']:.2f}" if "refit_test_accuracy" in r
                 else "-")
        out.append(f"| {what[g]} | {LABELS[lv]} | {r['test_accuracy']:.2f} ± {r['test_accuracy_std']:.2f} | "
                   f"{_interval(r['paired_diff_vs_table'], r['paired_diff_vs_table_ci95'])} | {vs_base} | "
                   f"{r['best_step']:.0f} | {refit} | "
                   f"{_interval(r.get('refit_paired_diff_vs_table'), r.get('refit_paired_diff_vs_table_ci95'))} | "
                   f"{r.get('collapsed_runs', '-')}/{r['seeds']} | {thesis[g]} |")
    return out


def prereg_verdict(row: dict) -> str:
    """The pre-registered rule (results/language/preregistration.md) applied to the both-feedback row."""
    lo, hi = row["paired_diff_ci95"]
    if lo is None or not np.isfinite(lo):
        return "no interval"
    return "confirmed" if lo > 0 else "refuted" if hi < 0 else "not confirmed"


def _prereg_section(rows: dict) -> list[str]:
    if "prereg/both_feedback" not in rows:
        return []
    b, r = rows["prereg/baseline"], rows["prereg/both_feedback"]
    seeds = b["seed_list"]
    return ["", "## Pre-registered replication: halves_sum, both feedback vs baseline", "",
            f"Registered before the run in `preregistration.md`: seeds {seeds[0]}-{seeds[-1]} (new), "
            f"{b['steps']} steps, complementary halves, {b['length']} bits, cross-entropy summed over the heads; one "
            "two-sided "
            "paired 95 % interval, confirmed if it lies above 0.", "",
            "| baseline | both feedback | paired diff [95 % CI] | seeds | verdict |", "|---|---|---|---|---|",
            f"| {b['test_accuracy']:.2f} ± {b['test_accuracy_std']:.2f} | {r['test_accuracy']:.2f} ± "
            f"{r['test_accuracy_std']:.2f} | {_ci(r)} | {r['paired_seeds']} | **{prereg_verdict(r)}** |"]


def _collapse_section(rows: dict, summary: dict) -> list[str]:
    names = [k for k, r in rows.items() if "collapsed_runs" in r]
    if not names:
        return []
    out = ["", "## Collapse over the whole run", "",
           f"Rule: {summary['protocol']['collapse_over_run_rule']}, at every evaluation; the tables above count the "
           "final-evaluation rule. Thresholds set against the previous run's curves (commit 60564fe), where "
           "non-communicating agents on 50 % noise sit near chance at step 100 and emit few distinct messages "
           "independently (agreement <= 0.66), which is not a collapse.", "",
           "| row | runs collapsed at some evaluation | collapsed evaluations | final rule |", "|---|---|---|---|"]
    for k in names:
        r = rows[k]
        if r["collapsed_runs"] or r["collapsed_seeds"]:
            out.append(f"| {k} | {r['collapsed_runs']}/{r['seeds']} | {r['collapsed_evaluations']} | "
                       f"{r['collapsed_seeds']}/{r['seeds']} |")
    total = sum(rows[k]["seeds"] for k in names)
    hit = sum(rows[k]["collapsed_runs"] for k in names)
    out.append(f"| all {len(names)} rows | {hit}/{total} | {sum(rows[k]['collapsed_evaluations'] for k in names)} | "
               f"{sum(rows[k]['collapsed_seeds'] for k in names)}/{total} |")
    return out


LANGUAGE_COLUMNS = (("message_entropy", "entropy (bits)"), ("distinct_messages", "distinct"),
                    ("topsim", "topsim"), ("posdis", "posdis"), ("mi_message_label", "I(message; digit) bits"))


def _language_section(rows: dict, cfg: dict) -> list[str]:
    names = [k for k, r in rows.items() if "lang_a_topsim" in r]
    if not names:
        return []
    head = " | ".join(f"A {label} | B {label}" for _, label in LANGUAGE_COLUMNS)
    out = ["", "## Language metrics (final messages)", "",
           f"Each agent's hard message (argmax of every head) of its own view of the first {cfg['metric_images']} "
           "test images, at the end of training; mean over seeds. entropy = entropy of the whole-message "
           f"distribution (max log2({cfg['metric_images']}) = {np.log2(max(cfg['metric_images'], 1)):.2f} bits); "
           "distinct = distinct messages / images; topsim = Spearman correlation of pairwise image (cosine) and "
           "message (Hamming) distances over all pairs; posdis = positional disentanglement (Chaabouni et al. 2020) "
           "over the 10 one-vs-rest digit attributes; I(message; digit) = plug-in mutual information of the whole "
           "message and the label (biased up when most messages are unique). As EGG's `language_analysis.py`.", "",
           f"| row | {head} |", "|---|" + "---|" * (2 * len(LANGUAGE_COLUMNS))]
    fmt = lambda v: "-" if v is None else f"{v:.3f}"
    for k in names:
        r = rows[k]
        cells = " | ".join(f"{fmt(r.get(f'lang_a_{key}'))} | {fmt(r.get(f'lang_b_{key}'))}"
                           for key, _ in LANGUAGE_COLUMNS)
        out.append(f"| {k} | {cells} |")
    return out


CONFIRM_FAMILIES = (
    ("Primary (pre-registered): both feedback minus baseline, online probe", "both_feedback",
     "paired_diff_vs_baseline", "paired_diff_ci95"),
    ("Secondary: both feedback minus baseline, refit probe", "both_feedback", "refit_paired_diff_vs_baseline",
     "refit_paired_diff_ci95"),
    ("Secondary: trained minus untrained agents of the same seed and view, online probe", None,
     "paired_diff_vs_untrained", "paired_diff_vs_untrained_ci95"),
    ("Secondary: trained minus untrained agents of the same seed and view, refit probe", None,
     "refit_paired_diff_vs_untrained", "refit_paired_diff_vs_untrained_ci95"))
"""The families of ``confirm_10000/preregistration.md``: (title, level or None for both levels, mean key, CI key);
Holm within each family."""


def _confirm_keys(rows: dict) -> list[str]:
    """The confirmation's ``confirm/<cell>/<level>`` rows, in the summary's order."""
    return [k for k in rows if k.startswith("confirm/") and k.split("/")[-1] in ("baseline", "both_feedback")]


def confirm_families(rows: dict) -> dict[str, list[dict]]:
    """Each family's comparisons with raw and Holm-adjusted two-sided p-values and the registered verdict."""
    cells = sorted({k.split("/")[1] for k in _confirm_keys(rows)})
    out = {}
    for title, level, mean_key, ci_key in CONFIRM_FAMILIES:
        family = [{"cell": c, "level": lv, "mean": r.get(mean_key), "ci": r.get(ci_key), "n": r.get("paired_seeds", 0)}
                  for c in cells for lv in ((level,) if level else ("baseline", "both_feedback"))
                  if (r := rows.get(f"confirm/{c}/{lv}")) is not None and r.get(mean_key) is not None]
        raw = [stats.p_value_from_ci95(f["mean"], f["ci"], f["n"]) for f in family]
        for f, p, q in zip(family, raw, stats.holm(raw), strict=True):
            f.update(p=p, p_holm=q, verdict="-" if q is None else "confirmed (above zero)" if q < 0.05 and f["mean"] > 0
                     else "refuted (below zero)" if q < 0.05 else "not confirmed (adjusted p >= 0.05)")
        if family:
            out[title] = family
    return out


def confirm_markdown(summary: dict) -> str:
    """table.md of the pre-registered confirmation (``--preset confirm``): the cells' rows, then each registered
    family of comparisons, Holm-adjusted."""
    rows, cfg = summary["rows"], summary["config"]
    cells = _confirm_keys(rows)
    first = rows[cells[0]]
    lines = ["# Chapter 4: the pre-registered confirmation at 10,000 steps (issue 58, item 3)", "",
             f"Command: `{summary['command']}` (base seed {cfg['seed']})  ",
             f"Preset `{summary['preset']}`, wall time {summary['wall_seconds']:.0f} s on {summary['device']}; commit "
             f"`{summary['git_commit']}`. Registered before the run in `preregistration.md`: seeds "
             f"{first['seed_list'][0]}-{first['seed_list'][-1]}, {first['steps']} steps, baseline and both feedback in "
             "each cell, online probe (test accuracy at the best validation step, the thesis' Table 4.1) and the probe "
             "refit to convergence on the final agents' frozen features; untrained agents of each view beside them.",
             "", "| cell | view | CE over heads | temperature | level | online probe | refit probe | "
             "vs baseline, online [95 % CI] | vs untrained, online | vs untrained, refit | collapsed runs |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for k in cells:
        r = rows[k]
        refit = (f"{r['refit_test_accuracy']:.2f} ± {r['refit_test_accuracy_std']:.2f}" if "refit_test_accuracy" in r
                 else "-")
        vs_untrained = [_interval(r.get(f"{p}paired_diff_vs_untrained"), r.get(f"{p}paired_diff_vs_untrained_ci95"))
                        for p in ("", "refit_")]
        lines.append(f"| {r['cell']} | {r['view']} | {r['normalisation']} | {r['temperature'] or 'annealed'} | "
                     f"{LABELS[k.split('/')[2]]} | {r['test_accuracy']:.2f} ± {r['test_accuracy_std']:.2f} | {refit} | "
                     f"{_ci(r) if k.endswith('both_feedback') else '-'} | {' | '.join(vs_untrained)} | "
                     f"{r.get('collapsed_runs', '-')}/{r['seeds']} |")
    for k in (k for k in rows if k.startswith("confirm/untrained/")):
        r = rows[k]
        refit = f"{r['refit_test_accuracy']:.2f}" if "refit_test_accuracy" in r else "-"
        lines.append(f"| untrained agents | {r['view']} | - | - | - | {r['test_accuracy']:.2f} ± "
                     f"{r['test_accuracy_std']:.2f} | {refit} | - | - | - | - |")
    for title, family in confirm_families(rows).items():
        lines += ["", f"**{title}** ({len(family)} comparisons, Holm-adjusted):", "",
                  "| cell | level | paired diff [95 % CI] | p | p (Holm) | verdict |", "|---|---|---|---|---|---|"]
        lines += [f"| {f['cell']} | {LABELS[f['level']]} | {_interval(f['mean'], f['ci'])} | "
                  f"{'-' if f['p'] is None else format(f['p'], '.3g')} | "
                  f"{'-' if f['p_holm'] is None else format(f['p_holm'], '.3g')} | {f['verdict']} |" for f in family]
    return "\n".join(lines + [""])


def write_report(out_dir: pathlib.Path, *, plots: bool = True) -> None:
    """Writes table.md, then (with ``plots``) fig4_3.png and messages.png, from the run in ``out_dir``; a
    confirmation run (``--preset confirm``) gets :func:`confirm_markdown` and no figures."""
    out_dir = pathlib.Path(out_dir)
    summary, curves = results.read_run(out_dir)
    if "baseline" not in summary["rows"]:
        report.write_table(out_dir, confirm_markdown(summary))
        return
    parent = out_dir.parent
    earlier = None  # a longer run in a subfolder continues the parent's members (results/language/horizon_10000)
    if (parent / "summary.json").is_file() and json.loads((parent / "summary.json").read_text()).get(
            "experiment") == EXPERIMENT:
        earlier = (str(parent), results.read_run(parent)[1])
    report.write_table(out_dir, table_markdown(summary, curves, earlier))
    if plots:
        report.draw(fig4_3=lambda: plot_fig4_3(summary, curves, out_dir / "fig4_3.png"),
                    messages=lambda: plot_messages(summary, out_dir / "messages.png"))
