#!/usr/bin/env bash
# JDP-FL Fig. 4 on Fashion-MNIST (docs/jdp.md): "ours" (leave-one-out M4 + M5) under
# the dirty-label attack, final test accuracy
#   4a: against eps in EPS (default 0.5,1,5) for m in MS_A (default 10,20,40) participants;
#   4c: against m in MS_C (default 5,10,20,30,40,50,60) at eps = 1;
# x SEEDS seeds (default 3); then fig4.csv/.md/.png in results/. One grid folder: the cells the two
# panels share (eps = 1 at m = 10, 20, 40) run once. Resumable: stop it any time; a second call
# skips finished cells.
#
#   bash scripts/jdp_fig4.sh                 # reduced: 5 rounds, lr 0.01, 2,000 test examples (as jdp_fig3.sh)
#   BUDGET=paper bash scripts/jdp_fig4.sh    # 30 rounds, lr 0.001
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
source scripts/jdp_budget.sh
out="runs/jdp_fig4_${budget}"
.venv/bin/fedgame compare recipes/jdp/fig3.yaml --seeds "${SEEDS:-3}" --out "$out" "${sets[@]}" \
  --grid "data.partition.n_clients=${MS_C:-5,10,20,30,40,50,60}" --grid "privacy.epsilon=1" --no-report
.venv/bin/fedgame compare recipes/jdp/fig3.yaml --seeds "${SEEDS:-3}" --out "$out" "${sets[@]}" \
  --grid "data.partition.n_clients=${MS_A:-10,20,40}" --grid "privacy.epsilon=${EPS:-0.5,1,5}" --no-report
dest="results/jdp_fig4_${budget}"
.venv/bin/fedgame export "$out" "$dest/runs"
.venv/bin/fedgame report "$dest/runs" --kind jdp-fig4 --budget "$budget" --out "$dest"
