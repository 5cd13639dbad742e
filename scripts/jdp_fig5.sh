#!/usr/bin/env bash
# JDP-FL Fig. 5 on Fashion-MNIST (docs/jdp.md): m = 60 participants, one dirty-label
# adversary, eps = 1; final test accuracy of the random-group strategy for group sizes
# s in {5, 10, 15, 20, 30} beside leave-one-out (s = 59), x SEEDS seeds; then fig5.csv/.md/.png in
# results/. Resumable: stop it any time; a second call skips finished cells.
#
#   bash scripts/jdp_fig5.sh                 # reduced: 5 rounds, lr 0.01, 2,000 test examples (as jdp_fig3.sh)
#   BUDGET=paper bash scripts/jdp_fig5.sh    # 30 rounds, lr 0.001
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
source scripts/jdp_budget.sh
sets+=(--set data.partition.n_clients=60 --set privacy.epsilon=1)
out="runs/jdp_fig5_${budget}"
.venv/bin/fedgame compare recipes/jdp/fig3.yaml --seeds "${SEEDS:-3}" --out "$out" "${sets[@]}" \
  --grid "jdp.aggregator=random_groups" --grid "jdp.group_size=${SIZES:-5,10,15,20,30}" --no-report
.venv/bin/fedgame compare recipes/jdp/fig3.yaml --seeds "${SEEDS:-3}" --out "$out" "${sets[@]}" \
  --grid "jdp.aggregator=leave_one_out" --no-report
dest="results/jdp_fig5_${budget}"
.venv/bin/fedgame export "$out" "$dest/runs"
.venv/bin/fedgame report "$dest/runs" --kind jdp-fig5 --budget "$budget" --out "$dest"
