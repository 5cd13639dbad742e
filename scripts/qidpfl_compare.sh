#!/usr/bin/env bash
# QI-DPFL and its five comparison methods (docs/qidpfl.md) on Fashion-MNIST with the
# paper's MNIST settings, IID and Dirichlet(1.0), SEEDS seeds (default 3):
#   1. the accuracy-vs-rho sweep per partition (§3.7, Fig. 2): 11 fixed budgets, one seed each;
#   2. the curve fit I(rho) = I1 - B exp(-I3 rho) per partition -> results/qidpfl_fmnist/curve.json;
#   3. QI-DPFL, Max, Random, FedAvg-DP with that curve (reward range, kappa_acc calibrated), and
#      FedAvg, FedAvg-select;
#   4. the comparison table, claims C1-C4 and the four panels per partition -> results/qidpfl_fmnist/.
# MODE=paper_params runs the same pipeline in the paper's regime (docs/qidpfl.md, "The paper's
# regime"): every private upload is the local model clipped to norm C and noised (Corollary 1
# read literally), C from scripts/qidpfl_clip.py (results/qidpfl_fmnist_paper_params/clip.json),
# into results/qidpfl_fmnist_paper_params; the default (paper_update) into results/qidpfl_fmnist.
# Resumable: every step skips finished cells.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
seeds="${SEEDS:-3}"
dest="results/qidpfl_fmnist"
runs="runs"
noise=()
if [ "${MODE:-paper_update}" = paper_params ]; then
  dest="results/qidpfl_fmnist_paper_params"
  runs="runs/paper_params"
  [ -f "$dest/clip.json" ] || .venv/bin/python scripts/qidpfl_clip.py "$dest/clip.json"
  clip=$(.venv/bin/python -c "import json; print(json.load(open('$dest/clip.json'))['clip'])")
  noise=(--set privacy.mode=paper_params --set "privacy.clip=$clip")
fi
rhos=$(.venv/bin/python -c "print(','.join(f'{10 ** (k / 2):.4e}' for k in range(-12, -1)))")
partition() {
  case "$1" in
    iid) echo 'data.partition={kind: iid, n_clients: 20}' ;;
    dirichlet) echo 'data.partition={kind: dirichlet, n_clients: 20, alpha: 1.0}' ;;
  esac
}
for part in iid dirichlet; do
  .venv/bin/fedgame compare recipes/qidpfl/sweep.yaml --seeds 1 --out "$runs/qidpfl_sweep/$part" \
    --set "$(partition "$part")" "${noise[@]}" --grid "privacy.rho=$rhos" --no-report
done
# per-seed files flat under $dest/runs/<cell>/seed_<k>/, the cell named by its partition (the
# reports group runs by their configs, not by folder)
export_flat() {  # export_flat SRC PREFIX: runs/<prefix><partition>_<cell>/seed_<k>
  local part cell
  for part in iid dirichlet; do
    [ -d "$1/$part" ] || continue
    for cell in "$1/$part"/*/; do
      cell=$(basename "$cell")
      .venv/bin/fedgame export "$1/$part/$cell" "$dest/runs/$2${part}_$cell" >/dev/null
    done
  done
}
export_flat "$runs/qidpfl_sweep" sweep_
.venv/bin/fedgame report "$dest/runs" --kind qidpfl-curve --out "$dest"
for part in iid dirichlet; do
  curve=$(.venv/bin/python -c "import json; c = json.load(open('$dest/curve.json'))['$part']; print('{I1: %r, B: %r, I3: %r}' % (c['I1'], c['B'], c['I3']))")
  .venv/bin/fedgame compare recipes/qidpfl/fmnist.yaml recipes/qidpfl/max.yaml recipes/qidpfl/random.yaml \
    recipes/qidpfl/fedavg_dp.yaml --seeds "$seeds" --out "$runs/qidpfl/$part" --set "$(partition "$part")" \
    "${noise[@]}" --set "incentive.curve=$curve" --set incentive.acc_scale=calibrate --no-report
  .venv/bin/fedgame compare recipes/qidpfl/fedavg.yaml recipes/qidpfl/fedavg_select.yaml --seeds "$seeds" \
    --out "$runs/qidpfl/$part" --set "$(partition "$part")" --no-report
done
export_flat "$runs/qidpfl" ""
.venv/bin/fedgame report "$dest/runs" --kind qidpfl --budget paper --out "$dest"
