#!/usr/bin/env bash
# The test suite: set up with the test extras, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
exec .venv/bin/python -m pytest -q "$@"
