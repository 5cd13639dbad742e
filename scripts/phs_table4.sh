#!/usr/bin/env bash
# PHS Table IV (Fashion-MNIST; DATASET=mnist for Table III): the privacy-aware ("P",
# recipes/phs/fmnist.yaml), unbiased ("U") and biased ("B") mechanisms x similarity
# s in {100, 70, 30, 0} x 3 seeds, then the Table-IV-shaped CSV/Markdown beside the paper's
# numbers, Fig. 3 (Problem 1's p*), Fig. 4-style accuracy curves and the ε really spent.
# METHODS="fmnist unbiased" for a subset, SEEDS=1 for a first pass over every cell. Resumable: stop it any time; a second call skips
# finished cells and resumes the rest.
#
#   bash scripts/phs_table4.sh                 # reduced budget (what the 2-core machine affords):
#                                              #   30 rounds, everything else as the recipes
#   BUDGET=paper bash scripts/phs_table4.sh    # the recipes' 100 rounds x 5 local steps
#   DATASET=mnist bash scripts/phs_table4.sh   # Table III (results/phs_table3_<budget>)
# FIRST_SEED=3 SEEDS=2 adds seeds 3 and 4 beside the committed 0-2 (each run folder is seed_<k>).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
source scripts/phs_budget.sh
dataset="${DATASET:-fashion_mnist}"
case "$dataset" in
  fashion_mnist) table=table4 ;;
  mnist) table=table3 ;;
  *) echo "DATASET must be fashion_mnist or mnist, got '$dataset'" >&2; exit 2 ;;
esac
sets+=(--set "data.dataset=$dataset")
out="runs/phs_${table}_${budget}"
methods="${METHODS:-fmnist unbiased biased}"
recipes=(); for m in $methods; do recipes+=("recipes/phs/$m.yaml"); done
.venv/bin/fedgame compare "${recipes[@]}" --seeds "${SEEDS:-3}" --set "seed=${FIRST_SEED:-0}" --out "$out" \
  "${sets[@]}" --grid data.partition.s=100,70,30,0 --no-report
dest="results/phs_${table}_${budget}"
.venv/bin/fedgame export "$out" "$dest/runs"
.venv/bin/fedgame report "$dest/runs" --kind table4 --budget "$budget" --out "$dest"
