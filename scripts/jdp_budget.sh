# Sourced by scripts/jdp_fig{4,5}.sh: sets `budget` (BUDGET: reduced | paper) and the `sets` array
# of recipe overrides it means (reduced: 5 rounds, lr 0.01, 2,000 test examples, as jdp_fig3.sh).
budget="${BUDGET:-reduced}"
case "$budget" in
  reduced) sets=(--set train.rounds=5 --set train.local.lr=0.01 --set data.max_test=2000) ;;
  paper) sets=() ;;
  *) echo "BUDGET must be reduced or paper, got '$budget'" >&2; exit 2 ;;
esac
