#!/usr/bin/env bash
# FedPCS Table II in the paper's regime (scripts/fedpcs_table2_paper_params.sh's cells) on a lent
# GPU, after bench/gpu.sh in the same call (which installs the carried wheels into /tmp/site and
# Fashion-MNIST's IDX files). Each cell is one `fedgame run` with exactly the overrides the CPU grid's
# `fedgame compare --grid` gives it (same name, seed and config.yaml; summary.json's ran_on says the
# GPU), in the grid's order of priority: IID seeds the CPU grid has not finished, then Dirichlet(0.5)
# seed by seed, then the sampling ablations. The games of seeds 0-4 come solved from .gamecache/
# (a CPU solve here; the plan does not depend on the device). Runs until the deadline (seconds,
# default 250) and packs the finished runs' per-seed files (no checkpoints) into
# $OUT/table2_gpu.tgz after each one.
set -uo pipefail
deadline=$(($(date +%s) + ${1:-250}))
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="/tmp/site:$PWD/src" FEDGAME_CACHE="$PWD/.gamecache"
OUT=${OUT:-/tmp/gpu_out}
runs=/tmp/table2_gpu
mkdir -p "$OUT" "$runs"
cells=("random iid 3" "random iid 4" "fedpcs iid 4")
for s in 0 1 2 3 4; do cells+=("fedpcs dirichlet $s" "random dirichlet $s"); done
for s in 0 1 2; do cells+=("ablation_uniform iid $s" "ablation_fedavg_weights iid $s"); done
for cell in "${cells[@]}"; do
  read -r m split seed <<<"$cell"
  left=$((deadline - $(date +%s)))
  [ "$left" -gt 30 ] || break
  dir="$runs/${m}_clients_per_round=20_kind=$split/seed_$seed"
  echo "== $m $split seed $seed (${left} s left)"
  timeout "$left" python3 -m fedgame run "recipes/fedpcs/$m.yaml" --set "name=$m[clients_per_round=20,kind=$split]" \
    --set "seed=$seed" --set train.clients_per_round=20 --set "data.partition.kind=$split" \
    --set privacy.mode=paper_params --set privacy.clip=100 --out "$dir" 2>&1 | grep -vE "^\s*(│|┃|┏|┡|└|╇)" | tail -4
  if [ ! -f "$dir/summary.json" ]; then rm -rf "$dir"; echo "== stopped: $m $split seed $seed did not finish"; break; fi
  tar czf "$OUT/.t2.tgz" --exclude='checkpoint*' --exclude='.lock' -C "$runs" . && mv "$OUT/.t2.tgz" "$OUT/table2_gpu.tgz"
done
echo "== table2 cells done: $(find "$runs" -name summary.json | wc -l)"
