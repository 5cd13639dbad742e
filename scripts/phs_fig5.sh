#!/usr/bin/env bash
# PHS Fig. 5 on Fashion-MNIST (the paper's is CIFAR-10 by our reading, docs/phs.md): final test accuracy vs
# local batch size B in {32, 64, 128, 256} at similarity s = 30, for the privacy-aware ("P",
# recipes/phs/fmnist.yaml), unbiased ("U") and biased ("B") mechanisms x 3 seeds, then
# fig5_batch.png (log2 B axis, mean ± std error bars), fig5.csv and fig5.md (the table and whether
# P is above U and B at every B). METHODS="fmnist unbiased" for a subset, SEEDS=1 for a first
# pass over every cell. Resumable: stop it any time; a second call skips finished cells and
# resumes the rest.
#
#   bash scripts/phs_fig5.sh                   # reduced budget: 30 rounds, everything else as the recipes
#   BUDGET=paper bash scripts/phs_fig5.sh      # the recipes' 100 rounds x 5 local steps
#   EPS=mixture bash scripts/phs_fig5.sh       # budgets eps_k ~ 0.3 N(0.5, 0.04) + 0.7 N(10, 1), the
#                                              # paper's setting for Figs. 4-5 (§5.3); default: the
#                                              # recipes' U(0, 1) of Tables III-IV
# FIRST_SEED=3 SEEDS=2 adds seeds 3 and 4 beside the committed 0-2 (each run folder is seed_<k>).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
source scripts/phs_budget.sh
tag="$budget"
case "${EPS:-uniform}" in
  uniform) ;;
  mixture)
    sets+=(--set "privacy.budgets={kind: mixture, components: [{weight: 0.3, mean: 0.5, var: 0.04}, {weight: 0.7, mean: 10, var: 1}]}")
    tag="${budget}_mixture" ;;
  *) echo "EPS must be uniform or mixture, got '$EPS'" >&2; exit 2 ;;
esac
sets+=(--set data.partition.s=30)
out="runs/phs_fig5_${tag}"
methods="${METHODS:-fmnist unbiased biased}"
recipes=(); for m in $methods; do recipes+=("recipes/phs/$m.yaml"); done
.venv/bin/fedgame compare "${recipes[@]}" --seeds "${SEEDS:-3}" --set "seed=${FIRST_SEED:-0}" --out "$out" \
  "${sets[@]}" --grid train.local.batch_size=32,64,128,256 --no-report
dest="results/phs_fig5_${tag}"
.venv/bin/fedgame export "$out" "$dest/runs"
.venv/bin/fedgame report "$dest/runs" --kind phs-fig5 --budget "$budget" --out "$dest"
