"""Thesis ch. 4: two agents learn a 32-bit language by maximising mutual information (MNIST), Table 4.1.

    JAXCOMM_DATA_DIR=/work/shared/data python -m experiments.language --preset cpu
    python -m experiments.language --preset smoke --out /tmp/lang    # seconds, shipped MNIST sample
    python -m experiments.language report results/language           # redraw plots and table

Agents A (teacher) and B (student) see the same MNIST digit through their own fixed noisy
mask (10 % of pixels inverted, drawn once per agent, Algorithm 4). Each has a message
generator (ReLU MLP, L heads of 2 logits, Gumbel-softmax samples, temperature 4.0 x0.9 every
100 steps, floor 0.5) and a critic; generator and critic both maximise the vanilla-GAN
separation of joint pairs (x_A, s_A) from shuffled pairs (x_A, s'_A) (max-max, §4.2.2.3). The
four communication levels add the likelihood terms of eqs. 4.2.6-4.2.8 with their gradient
paths (:func:`jaxcomm.language.level`). A linear probe on B's last hidden layer is trained
beside them on stopped features; its validation accuracy is tracked and its test accuracy
taken at the best validation step (§4.2.2.5, Table 4.1).

The engine is the library's (:func:`jaxcomm.language.train_agents`): all members of one
message length and number of steps are ONE population, one jitted step over every pair of
agents, per-member levels, masks and views as arrays. Seed s has the same initialisation,
masks, minibatches and Gumbel noise in every level (paired). The config and presets are in
``presets.py``, :func:`run` (which members, then rows from their results) and the command line in ``run.py``; the
report (tables, plots, the generated reading) in ``report.py``.
Beyond the thesis: the random-init probe, the collapsing "summed cross-entropy" reading, and a
study over pixel-inversion noise (10/30/50 %), complementary half-image views and message
length (32/64/128), each reporting the paired gain of every level over the baseline.

References:
  Lacaille (2018), §4.2-4.3, Algorithm 4, eqs. 4.2.6-4.2.8, Fig. 4.2-4.3, Table 4.1.
"""

from .presets import (
    CONFIRM_CELLS,
    CONFIRM_LEVELS,
    DATASETS,
    PRESETS,
    STUDY_SETTINGS,
    ConfirmCell,
    LanguageConfig,
    Setting,
    confirm_config,
    cpu_config,
    horizon_config,
    settings,
    smoke_config,
    thesis_config,
)
from .report import ABLATIONS, EXPERIMENT, LEVELS, THESIS_TABLE, write_report
from .run import Entry, all_members, load_dataset, main, populations, row_metrics, run

__all__ = ["ABLATIONS", "CONFIRM_CELLS", "CONFIRM_LEVELS", "DATASETS", "EXPERIMENT", "LEVELS", "PRESETS",
           "STUDY_SETTINGS", "THESIS_TABLE", "ConfirmCell", "Entry", "LanguageConfig", "Setting", "all_members",
           "confirm_config", "cpu_config", "horizon_config", "load_dataset", "main", "populations", "row_metrics",
           "run", "settings", "smoke_config", "thesis_config", "write_report"]
