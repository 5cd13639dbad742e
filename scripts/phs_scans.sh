#!/usr/bin/env bash
# PHS's unstated hyperparameters (docs/phs.md, "Where we read the paper more precisely": T^g and
# the learning rate α are not given): one scan of each, one seed, for the privacy-aware mechanism
# ("P", recipes/phs/fmnist.yaml) at s = 30 — the number of global rounds T^g (ROUNDS, default
# 10,30,100, α = 0.05; Eqs. 6-7 calibrate each client's noise for the times it is drawn, so
# more rounds mean more noise per round) and α (LRS, default 0.01,0.02,0.1,0.2,0.5, at
# T^g = LR_ROUNDS, default 30, the committed Table IV's reduced budget; α = 0.05 there is the
# rounds scan's cell). Per-seed files in results/phs_scans/runs/, the table of every cell in
# results/phs_scans/comparison.md (the generic run report), beside the paper's P at s = 30
# (Table IV) on docs/phs.md. Resumable: finished cells are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
out=runs/phs_scans
dest=results/phs_scans
.venv/bin/fedgame compare recipes/phs/fmnist.yaml --seeds 1 --out "$out/rounds" --grid "train.rounds=${ROUNDS:-10,30,100}" --no-report
.venv/bin/fedgame compare recipes/phs/fmnist.yaml --seeds 1 --out "$out/lr" --set "train.rounds=${LR_ROUNDS:-30}" \
  --grid "train.local.lr=${LRS:-0.01,0.02,0.1,0.2,0.5}" --no-report
.venv/bin/fedgame export "$out/rounds" "$dest/runs"
.venv/bin/fedgame export "$out/lr" "$dest/runs"
.venv/bin/fedgame report "$dest/runs" --kind runs --budget "T^g scan and lr scan (one seed each)" --out "$dest" >/dev/null
