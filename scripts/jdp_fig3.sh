#!/usr/bin/env bash
# JDP-FL Fig. 3 on Fashion-MNIST (docs/jdp.md; the paper's is MNIST): final test accuracy
# vs eps (= eps_L = eps_E) for every server rule -- leave-one-out M4 + M5 ("ours"), FedAvg on
# the perturbed parameters ("traditional"), Krum, coordinate median, trimmed mean -- each under
# the dirty-label attack and without it, x SEEDS seeds; then fig3.csv/.md/.png and the attack's
# cost per method beside the paper's 4-5 % (traditional) and 1-2 % (ours) in results/.
# Resumable: stop it any time; a second call skips finished cells. SEEDS=1 first for a pass
# over every cell.
#
#   bash scripts/jdp_fig3.sh                 # reduced: 5 rounds, lr 0.01 (10x the paper's 0.001, so the
#                                            # model learns in 5 rounds), test accuracy on 2,000 test
#                                            # examples, eps in {0.5, 1, 5}
#   BUDGET=paper bash scripts/jdp_fig3.sh    # the recipe: 30 rounds, lr 0.001, eps in {0.1, 0.2, 0.5, 1, 2, 5, 10}
#
# Under attack every rule runs (AGGREGATORS); without attack only ours and FedAvg, the paper's
# reference curve (NOATTACK, e.g. NOATTACK=leave_one_out,fedavg,krum,median,trimmed_mean for all).
# FIRST_SEED=3 SEEDS=2 adds seeds 3 and 4 beside the committed 0-2 (each run folder is seed_<k>).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
budget="${BUDGET:-reduced}"
case "$budget" in
  reduced) sets=(--set train.rounds=5 --set train.local.lr=0.01 --set data.max_test=2000); eps="${EPS:-0.5,1,5}" ;;
  paper) sets=(); eps="${EPS:-0.1,0.2,0.5,1,2,5,10}" ;;
  *) echo "BUDGET must be reduced or paper, got '$budget'" >&2; exit 2 ;;
esac
recipe="${RECIPE:-recipes/jdp/fig3.yaml}"
[ -n "${DATA_ROOT:-}" ] && sets+=(--set "data.root=$DATA_ROOT")
tag="$(basename "$recipe" .yaml)"; [ "$tag" = fig3 ] && tag="" || tag="_$tag"
out="runs/jdp_fig3${tag}_${budget}"
for attack in dirty_label none; do
  if [ "$attack" = none ]; then aggs="${NOATTACK:-leave_one_out,fedavg}"; else aggs="${AGGREGATORS:-leave_one_out,fedavg,krum,median,trimmed_mean}"; fi
  .venv/bin/fedgame compare "$recipe" --seeds "${SEEDS:-3}" --set "seed=${FIRST_SEED:-0}" --out "$out" "${sets[@]}" \
    --grid "jdp.attack.kind=$attack" --grid "privacy.epsilon=$eps" --grid "jdp.aggregator=$aggs" --no-report
done
dest="results/jdp_fig3${tag}_${budget}"
.venv/bin/fedgame export "$out" "$dest/runs"
.venv/bin/fedgame report "$dest/runs" --kind jdp-fig3 --budget "$budget" --out "$dest"
