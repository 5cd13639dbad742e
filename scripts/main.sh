#!/usr/bin/env bash
# The main job: set up, then FedPCS against uniform sampling ("Random", clients at their initial
# budgets, same zCDP noise model), 3 seeds each, on the real
# Fashion-MNIST (100 clients, Dirichlet(0.5) non-IID): a results table and a report with plots
# (accuracy, privacy per client, the game figures) under runs/main.
# Finished runs are skipped when called again.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
.venv/bin/fedgame compare recipes/main/fedpcs.yaml recipes/main/random.yaml --seeds 3 --out runs/main "$@"
# Is FedPCS above Random? The difference of the seed means, its standard error, and the verdict.
.venv/bin/fedgame claim runs/main/fedpcs runs/main/random
