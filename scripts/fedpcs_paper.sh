#!/usr/bin/env bash
# FedPCS Table II at the paper's budget (tau = 0.2: 20 of 100 clients per round, 30 rounds x 5
# local epochs, batch 32, lr 0.1, Fashion-MNIST, McMahan CNN, fp32), IID and Dirichlet(0.5),
# 3 seeds, in the order of priority of the reproduction:
#   a  FedPCS and Random (clients outside the game: baseline_rho initial)
#   b  the two sampling ablations (FedPCS's incentive with uniform draws; x ~ rho with FedAvg weights)
#   c  AOCS, Fed-CBS, DELTA, and Random with its clients in the game (baseline_rho game; last, as each
#      of its seeds first solves its own T = 29 game)
#   d  the clip W (not given by the paper) at W in {0.1, 0.3} for FedPCS and Random, IID, one seed
#      (W = 1 is Table II's): results/fedpcs_w_sweep/
#   e  central DP-FedAvg (recipes/fedpcs/central_dp.yaml: the field's standard baseline, not in the
#      paper), one more row at the Random row's mean ε
# STAGES="a b" (default) picks stages; METHODS="aocs delta" picks methods within them; SPLITS="dirichlet"
# picks splits (default: iid dirichlet).
# Each (method, split) finishes its 3 seeds before the next
# starts; after each, the finished runs' summary.json, metrics.csv and config.yaml are copied to
# results/fedpcs_table2_paper/runs/<cell>/seed_<k>/ and table2.csv/.md regenerated from them.
# Resumable: stop it any time; a second call skips finished runs and resumes the one it was in.
# One run takes about 8.5 minutes on 2 CPU cores (two single-threaded workers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
out=runs/fedpcs_table2_paper
dest=results/fedpcs_table2_paper
stages="${STAGES:-a b}"
declare -A recipes=(
  [a]="fmnist random"
  [b]="ablation_uniform ablation_fedavg_weights"
  [c]="aocs fedcbs delta random_game"
  [e]="central_dp"
)
for stage in $stages; do
  if [ "$stage" = d ]; then
    # the clip W (not given by the paper) at W in CLIPS (default 0.1,0.3; W = 1 is Table II's), IID,
    # FedPCS and Random, one seed: its own folder, so Table II's cells keep W = 1 only
    .venv/bin/fedgame compare recipes/fedpcs/fmnist.yaml recipes/fedpcs/random.yaml --seeds 1 --out runs/fedpcs_w_sweep \
      --grid train.clients_per_round=20 --grid data.partition.kind=iid --grid "privacy.clip=${CLIPS:-0.1,0.3}" --no-report
    .venv/bin/fedgame export runs/fedpcs_w_sweep results/fedpcs_w_sweep/runs
    .venv/bin/fedgame report results/fedpcs_w_sweep/runs --kind runs --budget paper --out results/fedpcs_w_sweep >/dev/null
    continue
  fi
  for split in ${SPLITS:-iid dirichlet}; do
    for m in ${METHODS:-${recipes[$stage]}}; do
      if [ "$m" = random_game ]; then
        r=(recipes/fedpcs/random.yaml --set name=random_game --set incentive.baseline_rho=game)
      else
        r=("recipes/fedpcs/$m.yaml")
      fi
      .venv/bin/fedgame compare "${r[@]}" --seeds 3 --out "$out" --grid train.clients_per_round=20 \
        --grid "data.partition.kind=$split" --no-report
      .venv/bin/fedgame export "$out" "$dest/runs"
      .venv/bin/fedgame report "$dest/runs" --kind table2 --budget paper --out "$dest" >/dev/null
    done
  done
done
