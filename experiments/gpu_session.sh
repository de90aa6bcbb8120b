#!/usr/bin/env bash
# The project's accelerator work, one stage per call of under 10 minutes (a lent GPU's limit per command), each
# stage's results packed into OUT_DIR/STAGE.tgz (checkpoints left out) even when the stage is stopped at its limit.
#
#   bash experiments/gpu_session.sh STAGE OUT_DIR [field=value ...]   # overrides go to the experiment
#
# Stages, in the order to run them (issues 18 and 20):
#   bench    the benchmark's gpu suite: its rows, those auto must win first (--write-choices; backends.json
#            packed beside)
#   sweeps   its four sweeps, the CNN's 5 networks first (merge: python -m experiments.benchmark --merge-sweeps
#            SWEEPS_DIR BENCH_DIR)
#   scale    its scale suite in the device's memory (merge: python -m experiments.benchmark --merge-scale
#            SCALE_DIR BENCH_DIR)
#   table21a Tables 2.1/2.2 at the thesis preset, 5 seeds per row as sweeps: the single node and the 10-node rows
#            isolated, logits and true labels
#   table21b its 10-node features and 20-node rows (unpack into table21a's folder as more/: one table, see
#            experiments/outputs_exchange/report.py, merge_runs)
#   recipe   the thesis CNN's recipe chosen on validation (batch 32/128/256, flips and crops, Adam 1e-3/3e-3, cosine)
#   table23  Table 2.3 at its thesis preset
#   studies5000  issue 39's nodes study at 5,000 steps on the CPU runs' recipe (preset cpu, 3 seeds, beside 10
#            isolated nodes and 10 sharing true labels); split it over calls by N, e.g. study_node_counts=20,30
#            then study_node_counts=50 then study_node_counts=100; the 100-node ring of the neighbours study
#            (study_rings) alone: studies=neighbours study_neighbours= . With rows= the run trains its points
#            alone, to unpack as a subfolder of the CPU's run of the same settings (merged into its table, the
#            device named): how N = 100 and the ring were run on one H200 (results/outputs_exchange/studies_5000)
#
# Data: $JAXCOMM_DATA_DIR, else .data/ in the checkout (ignored by git; 45 MB, to carry to a machine that has no
# ../shared), made by
#   mkdir -p .data && cp -r ../shared/data/mnist ../shared/data/cifar10 ../shared/data/prepare_cifar10.py .data/
# CIFAR-10's binary batches are built in .data/cifar10/ on first use (about 20 s).
# STAGE_SECONDS (default 540) stops a stage with SIGTERM, which the experiments record as an interrupted run.
# SMOKE=1 runs every stage at its smoke size (a CPU check of this script); PYTHON names the interpreter (python3).
set -euo pipefail
stage=${1:?stage: bench, sweeps, scale, table21a, table21b, recipe, table23 or studies5000}
case $stage in bench|sweeps|scale|table21a|table21b|recipe|table23|studies5000) ;; *) echo "unknown stage $stage" >&2; exit 2 ;; esac
out=$(mkdir -p "${2:?OUT_DIR}" && cd "$2" && pwd)
shift 2  # what is left: the experiment's overrides, e.g. a recipe chosen on validation for table21a/b
cd "$(dirname "$0")/.."
# The checkout's jaxcomm, installed or not (a lent machine has JAX, flax, optax and orbax, not this package).
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
# Timing every (backend, step loop) pair per network would spend minutes compiling (50 unrolled CNNs): the
# experiments read the committed GPU ranking of backends.json, or the rule of thumb (vmap + scan) without one.
trains=; [[ $stage = table* || $stage = recipe || $stage = studies* ]] && trains=1  # an experiment, not the benchmark
[ -n "$trains" ] && export JAXCOMM_AUTOTUNE=${JAXCOMM_AUTOTUNE:-0}
export JAXCOMM_DATA_DIR=${JAXCOMM_DATA_DIR:-$PWD/.data}
runs=runs/gpu-session/$stage
rm -rf "$runs" && mkdir -p "$runs"
trap 'tar czf "$out/$stage.tgz" --exclude=checkpoints -C "$runs" . && echo "packed $out/$stage.tgz"' EXIT

batches=cifar-10-batches-bin/test_batch.bin  # the benchmark needs no dataset (the MNIST sample, random images)
if [[ -n $trains && -z ${SMOKE:-} && ! -f $JAXCOMM_DATA_DIR/cifar10/$batches
      && ! -f $JAXCOMM_DATA_DIR/$batches ]]; then
  "${PYTHON:-python3}" "$JAXCOMM_DATA_DIR/prepare_cifar10.py" "$JAXCOMM_DATA_DIR/cifar10"
fi
if [ -n "${SMOKE:-}" ]; then  # the checkout's backends.json is left as it is
  preset=smoke suite=quick seeds=2 choices=() bench_rows=(student_n8 cnn_n4) sweep_rows=(student_r4_n4)
  scale_rows=(student_scale) studies_preset=smoke studies_args=()
else
  preset=thesis suite=gpu seeds=5 choices=(--write-choices)
  bench_rows=(teacher_n32 cnn_n20 cnn_n10 student_n64 teacher_n8 student_n1024 cnn_n256)
  sweep_rows=(cnn_r5_n10 student_r16_n10 cnn_r20_n10 student_r64_n10) scale_rows=(student_scale cnn_scale)
  studies_preset=cpu studies_args=(num_seeds=3 study_steps=5000 study_eval_every=500)
fi
run() { timeout "${STAGE_SECONDS:-540}" "${PYTHON:-python3}" "$@"; }  # run -m experiments.NAME ...
case $stage in
  bench)
    run -m experiments.benchmark --suite "$suite" --only "${bench_rows[@]}" "${choices[@]}" --out "$runs" \
      || echo "benchmark exit status $?"
    cp jaxcomm/assets/backends.json "$runs/" ;;
  sweeps) run -m experiments.benchmark --suite "$suite" --only "${sweep_rows[@]}" --out "$runs" ;;
  scale) run -m experiments.benchmark --suite "$suite" --only "${scale_rows[@]}" --out "$runs" ;;
  table21a|table21b)
    if [ "$stage" = table21a ]; then
      rows=1_node_no_sharing,10_nodes_no_sharing,10_nodes_logits,10_nodes_true_labels
    else rows=10_nodes_features,20_nodes_true_labels; fi
    run -m experiments.outputs_exchange --preset "$preset" num_seeds=$seeds studies= rows=$rows "$@" --out "$runs" ;;
  recipe) run -m experiments.chapter2_recipe --preset "$preset" "$@" --out "$runs" ;;
  table23) run -m experiments.unsupervised_exchange --preset "$preset" "$@" --out "$runs" ;;
  studies5000)
    run -m experiments.outputs_exchange --preset "$studies_preset" rows=10_nodes_no_sharing,10_nodes_true_labels \
      studies=nodes time_budget_s=0 "${studies_args[@]}" "$@" --out "$runs" ;;
esac
