"""The finished seeds of one row of an unfinished run as a run of their own: their trained checkpoints copied into a
new folder whose config selects that row and those seeds (``seed=FIRST num_seeds=COUNT``), then resumed there (each
run restores at its last step, no training), so the seeds get their summary. The report merges such runs into the
row (:func:`experiments.outputs_exchange.report.merge_runs`): a row too long for one session is trained seed by
seed. From the root of the checkout that trained them (its commit is the run's):

    python -m experiments.outputs_exchange.tools.seeds SOURCE OUT ROW FIRST COUNT

SOURCE: the unfinished run's folder (``--out`` of its command, holding ``checkpoints/``); OUT: the new run's folder.
"""
import json
import pathlib
import shlex
import shutil
import subprocess
import sys

from experiments import outputs_exchange as ox
from jaxcomm.harness import cli

source, out, row = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
first, count = int(sys.argv[4]), int(sys.argv[5])
src_state = json.loads((source / "checkpoints" / "config.json").read_text())
tokens = shlex.split(src_state["command"])
tokens = tokens[tokens.index("experiments.outputs_exchange") + 1:]
flags, overrides, i = [], [], 0
while i < len(tokens):  # the source's flags and settings, less its folder and its selection of rows and seeds
    if tokens[i] in ("--out", "--resume"):
        i += 2 if tokens[i] == "--out" else 1
        continue
    if tokens[i].startswith("--"):
        flags += tokens[i:i + 2]
        i += 2
        continue
    if tokens[i].split("=")[0] not in ("rows", "seed", "num_seeds"):
        overrides.append(tokens[i])
    i += 1
overrides += [f"rows={row}", f"seed={first}", f"num_seeds={count}"]
config = cli.apply_overrides(ox.cpu_config(), overrides)
source_seed = src_state["config"]["seed"]
runs = [source / "checkpoints" / row / f"run_{first + i - source_seed}" for i in range(count)]
for run in runs:  # before anything is written: no half-copied part
    assert (run / str(config.num_steps) / "commit_success.txt").is_file(), f"{run} has not finished"
(out / "checkpoints" / row).mkdir(parents=True, exist_ok=False)
seconds = 0.0
for i, run in enumerate(runs):
    shutil.copytree(run, out / "checkpoints" / row / f"run_{i}")
    seconds += json.loads((run / str(config.num_steps) / "meta" / "metadata").read_text())["seconds"]
if (source / "checkpoints" / row / "lift.json").is_file():  # the lift the seeds trained under
    shutil.copy(source / "checkpoints" / row / "lift.json", out / "checkpoints" / row / "lift.json")
args = [*flags, *overrides]
state = {"preset": src_state["preset"], "config": cli._plain(config), "git_commit": src_state["git_commit"],
         "command": "python -m experiments.outputs_exchange " + " ".join(args) + f" --out {out}",
         # the training seconds of the copied runs (their checkpoints' own), not the source's wall clock
         "wall_seconds": seconds, "copied_from": str(source), "copied_from_command": src_state["command"]}
(out / "checkpoints" / "config.json").write_text(json.dumps(state, indent=1) + "\n")
sys.exit(subprocess.call([sys.executable, "-m", "experiments.outputs_exchange", *args, "--out", str(out), "--resume"]))
