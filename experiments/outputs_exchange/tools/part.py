"""A finished part of the running 5,000-step studies as a run of its own: its trained checkpoints copied into a
new folder whose config selects only those points, then resumed there (each run restores at its last step, no
training), so the part gets its summary, table and plots. From the repository root:

    python -m experiments.outputs_exchange.tools.part NAME POINTS [SOURCE]

POINTS: comma-separated, e.g. tau=1,tau=4. SOURCE: the long run's folder (default
runs/outputs_exchange/studies_5000_10nodes; the frequency study's: runs/outputs_exchange/studies_5000_frequency).
"""
import json
import pathlib
import shutil
import subprocess
import sys

name, points = sys.argv[1], sys.argv[2]
# the long run's checkpoints, from the repository root
SRC = pathlib.Path(sys.argv[3] if len(sys.argv) > 3 else "runs/outputs_exchange/studies_5000_10nodes") / "checkpoints"
out = pathlib.Path(f"runs/outputs_exchange/{name}")  # moved into results/outputs_exchange/studies_5000/ afterwards
args = ["--preset", "cpu", "rows=10_nodes_no_sharing,10_nodes_true_labels", "time_budget_s=0", "study_steps=5000",
        "study_eval_every=500", f"study_points={points}"]
from experiments import outputs_exchange as ox  # noqa: E402
from jaxcomm.harness import cli  # noqa: E402

config = cli.apply_overrides(ox.cpu_config(), args[2:])
src_state = json.loads((SRC / "config.json").read_text())
full = cli.apply_overrides(ox.cpu_config(),
                           [*args[2:-1], "study_points=" + ",".join(src_state["config"]["study_points"])])
full_names, wanted = ox.run_names(full), ox.run_names(config)  # the selection names its runs afresh (study_0, ...)
sources = {run: SRC / full_names[key] for key, run in wanted.items()}  # the same network: the same training
for src in sources.values():  # before anything is written: no half-copied part
    assert len(list(src.glob("run_*/5000"))) == config.num_seeds, f"{src.name} has not finished"
(out / "checkpoints").mkdir(parents=True, exist_ok=False)
seconds = 0.0
for run, src in sources.items():
    shutil.copytree(src, out / "checkpoints" / run)
    for meta in sorted(src.glob("run_*/5000/meta/metadata")):
        seconds += json.loads(meta.read_text())["seconds"]
state = {"preset": "cpu", "config": cli._plain(config), "git_commit": src_state["git_commit"],
         "command": "python -m experiments.outputs_exchange " + " ".join(args) + f" --out {out}",
         # the training seconds of the copied runs (their checkpoints' own), not the full run's wall clock
         "wall_seconds": seconds, "copied_from": str(SRC.parent), "copied_from_command": src_state["command"]}
(out / "checkpoints" / "config.json").write_text(json.dumps(state, indent=1) + "\n")
sys.exit(subprocess.call([sys.executable, "-m", "experiments.outputs_exchange", *args, "--out", str(out), "--resume"]))
