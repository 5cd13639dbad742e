#!/usr/bin/env bash
# The test suite: set up with the test, Flower, tracking and Hugging Face extras, then ruff, mypy
# and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Flower must not install packages at run time, send telemetry or check for updates (the Flower
# tests start simulations and SuperLinks); Ray must not report usage.
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 RAY_USAGE_STATS_ENABLED=0
bash scripts/setup.sh test,flower,tracking,hf
# One style (pyproject.toml [tool.ruff]: line length 140, pycodestyle and pyflakes): under a
# second for the whole repository, so it runs first and a style error stops the command at once.
.venv/bin/ruff format --check --quiet . || { echo "ruff format: the files above are not formatted (run .venv/bin/ruff format .)" >&2; exit 1; }
.venv/bin/ruff check --quiet .
# Strict typing of the package (pyproject.toml [tool.mypy]: strict, pydantic plugin), on one core
# while pytest starts on the others: mypy is single-threaded (63 s from a cold cache here) and the
# suite is CPU-bound, so running it first left a core idle for that long (docs/speed.md). Its
# report is printed after pytest's, and either failing fails the command. Its incremental cache
# lives beside fedgame's other caches ($FEDGAME_CACHE, default ~/.cache/fedgame: solved games,
# decoded datasets), not in the clone, so a fresh clone on a machine that has run the suite before
# checks in 3 s instead of 63 s; mypy re-checks every module whose source or dependencies differ
# from what the cache recorded (it compares the files' hashes), so the result is a cold run's.
mypy_log="$(mktemp)"
.venv/bin/mypy --cache-dir "${FEDGAME_CACHE:-$HOME/.cache/fedgame}/mypy" src/fedgame > "$mypy_log" 2>&1 &
mypy_pid=$!
# One test process per core plus two (pytest-xdist; tests/conftest.py gives each one torch thread),
# a module's tests in one process so module fixtures are computed once, the slowest modules handed
# out first (tests/conftest.py's SLOWEST_FIRST; --no-loadscope-reorder keeps that order): the Flower
# deployment module waits much of its minutes in its own process while the others keep the cores
# busy (docs/speed.md). "-n 0" runs them serially.
set +e
.venv/bin/python -m pytest -q -n "$(( $(nproc) + 2 ))" --dist loadscope --no-loadscope-reorder "$@"
tests=$?
wait "$mypy_pid"
typing=$?
set -e
echo "== mypy --strict src/fedgame"
cat "$mypy_log"
rm -f "$mypy_log"
[ "$typing" -eq 0 ] || { echo "mypy found type errors (above)" >&2; exit "$typing"; }
exit "$tests"
