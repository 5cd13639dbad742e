#!/usr/bin/env bash
# FedPCS Table II, Fashion-MNIST rows: each method x tau in {0.2, 0.5, 0.8} x IID /
# Dirichlet(0.5) x 3 seeds for FedPCS and its baselines (Random, AOCS, Fed-CBS, DELTA; METHODS=
# "fmnist random" for a subset), then the Table-II-shaped CSV/Markdown beside the paper's numbers.
# The baselines' clients are outside the game (docs/fedpcs.md, "Baseline budgets"; baseline_rho: initial). Extra rows
# (EXTRAS, same grid; EXTRAS= for none): the R4 ablations (FedPCS's incentive with uniform draws;
# x ∝ rho with FedAvg weights) and Random with baseline_rho: game (A15).
# Resumable: stop it any time; a second call skips finished cells and resumes the rest. Runs made
# before R3 (runs/fedpcs_table2_<budget>, baselines in the game) are not reused.
#
#   bash scripts/fedpcs_table2.sh            # reduced budget (what the 2-core machine affords):
#                                            #   10 rounds, 3 local steps per round
#   BUDGET=paper bash scripts/fedpcs_table2.sh   # the paper's 30 rounds x 5 local epochs
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
budget="${BUDGET:-reduced}"
out="runs/fedpcs_table2_${budget}_r3"
sets=()
if [ "$budget" = reduced ]; then
  sets=(--set train.rounds=10 --set train.local.epochs=null --set train.local.steps=3 --set train.eval_every=5)
fi
grid=(--grid train.clients_per_round=20,50,80 --grid data.partition.kind=iid,dirichlet)
methods="${METHODS:-fmnist random aocs fedcbs delta}"
extras="${EXTRAS-ablation_uniform ablation_fedavg_weights random_game}"
recipes=(); for m in $methods; do recipes+=("recipes/fedpcs/$m.yaml"); done
.venv/bin/fedgame compare "${recipes[@]}" --seeds 3 --out "$out" "${sets[@]}" "${grid[@]}" --no-report
for e in $extras; do
  if [ "$e" = random_game ]; then
    extra=(recipes/fedpcs/random.yaml --set name=random_game --set incentive.baseline_rho=game)
  else
    extra=("recipes/fedpcs/$e.yaml")
  fi
  .venv/bin/fedgame compare "${extra[@]}" --seeds 3 --out "$out/extras/$e" "${sets[@]}" "${grid[@]}" --no-report
done
.venv/bin/fedgame report "$out" --kind table2 --budget "$budget" --out "results/fedpcs_table2_${budget}"
