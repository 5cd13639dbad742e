#!/usr/bin/env bash
# FedPCS Table II cells on a lent GPU, after bench/gpu.sh in the same call (which installs the
# carried wheels into /tmp/site and Fashion-MNIST's IDX files). Each cell is one `fedgame run` with
# exactly the overrides its CPU grid's `fedgame compare --grid` gives it (same name, seed and
# config.yaml; summary.json's ran_on says the GPU): first the paper_params grid's IID seeds the CPU
# grid has not finished (scripts/fedpcs_table2_paper_params.sh, stage a), then the central DP-FedAvg
# row of the paper_update Table II (scripts/fedpcs_paper.sh, stage e), then the paper_params grid's
# Dirichlet(0.5) seed by seed and its sampling ablations. The games of seeds 0-4 come solved in
# .gamecache/ (CPU solves; a plan does not depend on the device); GAMES (default "0 1 2 3 4")
# names the seeds whose game is there, and a cell of another seed that needs its game is skipped.
# Runs until the deadline (seconds, default 250) and packs the finished runs' per-seed files (no
# checkpoints) into $OUT/table2_gpu.tgz after each one: params/<cell>/seed_<k> (the paper_params
# grid) and update/<cell>/seed_<k> (the paper_update one). A cell whose per-seed files are
# committed under results/ is skipped.
set -uo pipefail
deadline=$(($(date +%s) + ${1:-250}))
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="/tmp/site:$PWD/src" FEDGAME_CACHE="$PWD/.gamecache"
OUT=${OUT:-/tmp/gpu_out}
runs=/tmp/table2_gpu
mkdir -p "$OUT" "$runs"
params=(--set privacy.mode=paper_params --set privacy.clip=100)
cells=("params random iid 3" "params random iid 4" "params fedpcs iid 4")
for split in iid dirichlet; do for s in 0 1 2; do cells+=("update central_dp $split $s"); done; done
for s in 0 1 2 3 4; do cells+=("params fedpcs dirichlet $s" "params random dirichlet $s"); done
for s in 0 1 2; do cells+=("params ablation_uniform iid $s" "params ablation_fedavg_weights iid $s"); done
for cell in "${cells[@]}"; do
  read -r grid m split seed <<<"$cell"
  left=$((deadline - $(date +%s)))
  [ "$left" -gt 30 ] || break
  run="${m}_clients_per_round=20_kind=$split/seed_$seed"  # the folder `fedgame compare --grid` names
  case "$grid" in params) table=paper_params extra=("${params[@]}") ;; *) table=paper extra=() ;; esac
  [ -f "results/fedpcs_table2_$table/runs/$run/summary.json" ] && continue  # committed already
  dir="$runs/$grid/$run"
  case " ${GAMES:-0 1 2 3 4} " in *" $seed "*) ;; *) [ "$m" = random ] || [ "$m" = central_dp ] || continue ;; esac
  echo "== $grid $m $split seed $seed (${left} s left)"
  timeout "$left" python3 -m fedgame run "recipes/fedpcs/${m/#fedpcs/fmnist}.yaml" --set "name=$m[clients_per_round=20,kind=$split]" \
    --set "seed=$seed" --set train.clients_per_round=20 --set "data.partition.kind=$split" "${extra[@]}" \
    --out "$dir" 2>&1 | grep -vE "^\s*(│|┃|┏|┡|└|╇)" | tail -4
  if [ ! -f "$dir/summary.json" ]; then rm -rf "$dir"; echo "== stopped: $grid $m $split seed $seed did not finish"; break; fi
  tar czf "$OUT/.t2.tgz" --exclude='checkpoint*' --exclude='.lock' -C "$runs" . && mv "$OUT/.t2.tgz" "$OUT/table2_gpu.tgz"
done
echo "== table2 cells done: $(find "$runs" -name summary.json | wc -l)"
