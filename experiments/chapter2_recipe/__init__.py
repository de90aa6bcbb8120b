"""Chapter 2's recipe chosen on validation: a grid of recipe changes, each trained on one node, the one-standard-error
rule picks.

    JAXCOMM_DATA_DIR=/work/shared-cifar python -m experiments.chapter2_recipe --preset cpu \\
        --out results/outputs_exchange/recipe
    python -m experiments.chapter2_recipe --preset smoke --out /tmp/recipe     # seconds, shipped MNIST sample
    python -m experiments.chapter2_recipe report results/outputs_exchange/recipe  # redraw table.md and the plot

The chapter-2 ``cpu`` recipe (:func:`jaxcomm.recipes.cpu`) was first chosen by single-node probes scored on TEST
accuracy. This experiment chooses it again on the validation split (:attr:`jaxcomm.recipes.Chapter2Recipe.
validation_size`: CIFAR-10's last 5,000 training images, held out of every shard), so the test accuracies the
chapter reports are not those the recipe was fitted to.

Candidates: the recipe preset ``chapter2_preset`` (:data:`jaxcomm.recipes.PRESETS`) with every combination of the
``grid``'s values (a cartesian product, in grid order: the last entry varies fastest). A grid entry is
``field=v1,v2,...`` over a field of :class:`jaxcomm.recipes.Chapter2Recipe`, each value parsed as a command-line
override of that field (:func:`jaxcomm.harness.cli.apply_overrides`: ``augment=false,true`` gives bools,
``learning_rate=1e-3`` a float); a tuple field's items are joined by ``-`` (``widths=16-32-64,32-64-128``). The data,
its validation size, the seed and the sharing settings are not searched (:data:`NOT_SEARCHED`). From the command
line the grid is one override whose commas the harness splits: ``grid=learning_rate=1e-3,3e-3,num_steps=10,20`` (a
value without ``=`` continues the field before it).

Every candidate trains ``num_nodes`` nodes sharing nothing (default ONE node: the recipe is then chosen for no row
of Table 2.1 in particular, the least biased choice for a table whose rows compare communication against
isolation) with seeds ``seed .. seed + num_seeds - 1`` as one sweep (:func:`jaxcomm.network_sweep.train_networks`), each
evaluated every ``eval_every`` steps on the validation and the test split. A candidate's accuracy at a seed is the
node average at the final step (one node: that node's accuracy).

The rule (:func:`choose`), the one-standard-error rule on validation: ``best`` is the candidate of highest mean
final validation accuracy; ``chosen`` is the cheapest candidate (fewest ``num_steps``, then smallest
``batch_size``, ties in grid order) whose mean validation accuracy is at least the best's mean minus the best's
standard error (sd / sqrt(seeds)). Test accuracy is reported beside, never used. The summary holds ``best``,
``chosen``, ``rule``, ``changes_from_preset`` (``{field: [preset value, chosen value]}``) and ``chosen_overrides``.

What to do with the result: train chapter 2 by the chosen recipe by passing its overrides to the experiments that
inherit the recipe, e.g. ``python -m experiments.outputs_exchange --preset cpu learning_rate=0.001 augment=true``
(the table's "Changes from the preset" line prints the command), or change :func:`jaxcomm.recipes.cpu` to it and
say so where the recipe is described (README, ``outputs_exchange.CPU_SCALE_DOWNS``).

References:
  Lacaille (2018), §2.3, Table 2.1; Hastie, Tibshirani and Friedman (2009), §7.10 (the one-standard-error rule).
"""

from .presets import (
    CPU_GRID,
    EXPERIMENT,
    NOT_SEARCHED,
    PRESETS,
    RULE,
    THESIS_GRID,
    Candidate,
    Chapter2RecipeSearchConfig,
    candidates,
    cpu_config,
    parse_grid,
    smoke_config,
    thesis_config,
)
from .report import format_value, table_markdown, write_report
from .run import candidate_record, changes_from_preset, choose, main, run, train_candidate

__all__ = ["CPU_GRID", "EXPERIMENT", "NOT_SEARCHED", "PRESETS", "RULE", "THESIS_GRID", "Candidate",
           "Chapter2RecipeSearchConfig", "candidate_record", "candidates", "changes_from_preset", "choose",
           "cpu_config", "format_value", "main", "parse_grid", "run", "smoke_config", "table_markdown",
           "thesis_config", "train_candidate", "write_report"]
