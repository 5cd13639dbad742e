#!/usr/bin/env bash
# FedAvg against DP-FedAvg (DP-SGD at a target epsilon of 8, RDP accountant) on the Dirichlet(0.5)
# Fashion-MNIST partition of 100 clients, 15 rounds x 10 clients (recipes/main/fedavg.yaml,
# recipes/main/dp_fedavg.yaml), x SEEDS seeds (default 3): what differential privacy costs in
# accuracy and time. Exports the per-seed files to results/fedavg_vs_dp_fedavg/runs/ and writes the
# run report (comparison.csv/.md, accuracy and per-client figures) from them. Resumable.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
out="runs/fedavg_vs_dp_fedavg"
dest="results/fedavg_vs_dp_fedavg"
.venv/bin/fedgame compare recipes/main/fedavg.yaml recipes/main/dp_fedavg.yaml --seeds "${SEEDS:-3}" --out "$out" --no-report
.venv/bin/fedgame export "$out" "$dest/runs"
.venv/bin/fedgame report "$dest/runs" --kind runs --out "$dest"
