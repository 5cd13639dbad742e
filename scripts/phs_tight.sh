#!/usr/bin/env bash
# PHS privacy-aware mechanism at similarity s = 30 under the paper's noise calibration (Eqs. 6-7,
# recipes/phs/fmnist.yaml) and the tight one (the smallest noise whose PLD epsilon meets eps_k,
# recipes/phs/tight.yaml), x SEEDS seeds (default 3): same partition, budgets, schedule and
# initialisation per seed. Exports the per-seed files to results/phs_tight_<budget>/runs/ and
# writes tight_vs_paper.csv/.md from them (accuracy, the epsilon each spends, the verdict).
# Resumable: stop it any time; a second call skips finished cells.
#
#   bash scripts/phs_tight.sh                  # reduced budget: 30 rounds, everything else as the recipes
#   BUDGET=paper bash scripts/phs_tight.sh     # the recipes' 100 rounds x 5 local steps
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
source scripts/phs_budget.sh
out="runs/phs_tight_${budget}"
dest="results/phs_tight_${budget}"
.venv/bin/fedgame compare recipes/phs/fmnist.yaml recipes/phs/tight.yaml --seeds "${SEEDS:-3}" --out "$out" \
  "${sets[@]}" --set data.partition.s=30 --no-report
.venv/bin/fedgame export "$out" "$dest/runs"
.venv/bin/fedgame report "$dest/runs" --kind phs-tight --budget "$budget" --out "$dest"
