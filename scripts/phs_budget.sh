# Sourced by scripts/phs_{table4,fig5,tight}.sh: sets `budget` (BUDGET: reduced | paper) and the
# `sets` array of recipe overrides it means (reduced: 30 rounds; paper: the recipes' 100 rounds).
budget="${BUDGET:-reduced}"
case "$budget" in
  reduced) sets=(--set train.rounds=30) ;;
  paper) sets=(--set train.rounds=100) ;;
  *) echo "BUDGET must be reduced or paper, got '$budget'" >&2; exit 2 ;;
esac
