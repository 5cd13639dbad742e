#!/usr/bin/env bash
# FedPCS in the paper's regime, step 1: calibrate the clip W of privacy.mode paper_params (FedPCS
# Prop. 1 / Eq. 46 read literally: the local model's parameters clipped to norm W and noised, as
# NbAFL) on Random alone, never on FedPCS: clients at their initial budgets rho_i^0 (outside the
# game), IID, tau = 0.2 (20 of 100 clients a round), the paper's budget (30 rounds x 5 local
# epochs), one seed per W. The W whose final accuracy is nearest the paper's Random (74.69 %) is
# the one every method then runs at (docs/fedpcs.md, 'The paper's regime').
#   CLIPS=10,30,100,300,1000,3000 (default) is the first grid; after it, rerun with CLIPS set to a
#   few values around the crossing (the refinement), into the same folders.
# Resumable: a second call skips finished cells and resumes the one it was in (checkpoint per
# round). After each W, the finished runs' summary.json, metrics.csv and config.yaml go to
# results/fedpcs_w_scan/runs/ and the report is regenerated from them.
# One run: about 8.5 min on the 2-core AMD AVX-512 host, about 2.6x that on the AVX2-only host.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
out=runs/fedpcs_w_scan
dest=results/fedpcs_w_scan
IFS=, read -r -a clips <<< "${CLIPS:-10,30,100,300,1000,3000}"
for w in "${clips[@]}"; do
  .venv/bin/fedgame compare recipes/fedpcs/random.yaml --seeds 1 --out "$out" \
    --set privacy.mode=paper_params --grid data.partition.kind=iid --grid train.clients_per_round=20 \
    --grid "privacy.clip=$w" --no-report
  .venv/bin/fedgame export "$out" "$dest/runs"
  .venv/bin/fedgame report "$dest/runs" --kind runs --budget paper --out "$dest" >/dev/null
done
