"""Finished reruns of table22_time runs as one run: their checkpoints copied into a new folder whose config names
those rows and links, then resumed there (each rerun restores at its last step, no training), so the runs get one
summary, table and plots. From the repository root:

    python -m experiments.table22_time.part SRC[,SRC...] OUT OVERRIDES...   # e.g. rerun=10_nodes_true_labels

SRC: the runs' folders (their checkpoints/), OUT: the new folder (moved into results/ afterwards). Reruns are named
``{row}_{link}`` by the first link of their delay, the same name in any run whose links hold that link.
"""
import json
import pathlib
import shutil
import subprocess
import sys

from experiments import table22_time as t22  # noqa: E402
from jaxcomm.harness import cli  # noqa: E402

sources = [pathlib.Path(folder) / "checkpoints" for folder in sys.argv[1].split(",")]
out, overrides = pathlib.Path(sys.argv[2]), sys.argv[3:]
config = cli.apply_overrides(t22.Table22TimeConfig(), overrides)
states = [json.loads((src / "config.json").read_text()) for src in sources]
runs = sorted(p for src in sources for p in src.iterdir()
              if p.is_dir() and p.name.startswith(tuple(f"{r}_" for r in config.rerun)))
instant = json.loads((pathlib.Path(config.outputs_dir) / "summary.json").read_text())["config"]
horizon, seeds = instant["num_steps"], instant["num_seeds"]
for run in runs:  # before anything is written: no half-copied part
    assert len(list(run.glob(f"run_*/{horizon}"))) == seeds, f"{run.name} has not finished"
(out / "checkpoints").mkdir(parents=True, exist_ok=False)
seconds = 0.0
for run in runs:
    shutil.copytree(run, out / "checkpoints" / run.name)
    for meta in sorted(run.glob(f"run_*/{horizon}/meta/metadata")):
        seconds += json.loads(meta.read_text())["seconds"]
args = ["--preset", "cpu", *overrides]
commits = sorted({state["git_commit"] for state in states})
state = {"preset": "cpu", "config": cli._plain(config), "git_commit": "; ".join(commits),
         "command": "python -m experiments.table22_time " + " ".join(args) + f" --out {out}",
         # the training seconds of the copied runs (their checkpoints' own), not the runs' wall clocks
         "wall_seconds": seconds, "copied_from": [str(src.parent) for src in sources],
         "copied_from_command": [state["command"] for state in states]}
(out / "checkpoints" / "config.json").write_text(json.dumps(state, indent=1) + "\n")
sys.exit(subprocess.call([sys.executable, "-m", "experiments.table22_time", *args, "--out", str(out), "--resume"]))
