#!/usr/bin/env bash
# FedPCS Table II in the paper's regime (docs/fedpcs.md, "The paper's regime"): privacy.mode
# paper_params (the local model's parameters clipped to norm W and noised, FedPCS Prop. 1 / Eq. 46
# read literally) at the W the scan chose on Random alone (results/fedpcs_w_scan: W = 100 ends
# nearest the paper's Random 74.69 %), tau = 0.2 (20 of 100 clients a round), the paper's budget
# (30 rounds x 5 local epochs), in the order of priority:
#   a  FedPCS and Random (baseline_rho: initial), 5 seeds, seed by seed so every seed adds a pair
#   b  the two sampling ablations, 3 seeds
#   c  AOCS, Fed-CBS, DELTA and Random with its clients in the game (baseline_rho: game), 3 seeds
# STAGES="a b c" (default) picks stages; SPLITS="iid dirichlet" (default) the splits; CLIP=100 the W.
# Resumable: a second call skips finished runs and resumes the one it was in. Every cell plays the
# game plan its seed's committed cells played (--plans: the solve can end at another local optimum
# on another kind of CPU, and cells compared pairwise must share their seed's plan). After each cell the
# finished runs' per-seed files go to results/fedpcs_table2_paper_params/runs/<cell>/seed_<k>/ and
# table2.csv/.md (with the verdicts of docs/reproduction.md's rule) are regenerated from them.
# One run: about 25-30 min on the 2-core AVX2 host.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
out=runs/fedpcs_table2_paper_params
dest=results/fedpcs_table2_paper_params
declare -A recipes=([a]="fmnist random" [b]="ablation_uniform ablation_fedavg_weights"
                    [c]="aocs fedcbs delta random_game")
declare -A seeds=([a]=5 [b]=3 [c]=3)
for stage in ${STAGES:-a b c}; do
  for split in ${SPLITS:-iid dirichlet}; do
    for ((s = 1; s <= ${seeds[$stage]}; s++)); do
      for m in ${recipes[$stage]}; do
        if [ "$m" = random_game ]; then
          r=(recipes/fedpcs/random.yaml --set name=random_game --set incentive.baseline_rho=game)
        else
          r=("recipes/fedpcs/$m.yaml")
        fi
        .venv/bin/fedgame compare "${r[@]}" --seeds "$s" --out "$out" --set privacy.mode=paper_params \
          --set "privacy.clip=${CLIP:-100}" --grid train.clients_per_round=20 \
          --grid "data.partition.kind=$split" --no-report --plans "$dest/runs"
        .venv/bin/fedgame export "$out" "$dest/runs"
        .venv/bin/fedgame report "$dest/runs" --kind table2 --budget paper --out "$dest" >/dev/null
      done
    done
  done
done
