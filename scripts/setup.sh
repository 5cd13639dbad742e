#!/usr/bin/env bash
# Idempotent set-up: Debian's Fashion-MNIST, a virtual environment in .venv, the package.
# Usage: scripts/setup.sh [extras]   (e.g. "test"). A second call skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"

if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "== installing Debian's dataset-fashion-mnist"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dataset-fashion-mnist >/dev/null
fi

PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv with $PY"
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi

stamp=".venv/.fedgame-installed-${extras:-base}"
want="$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "== installing fedgame${extras:+[$extras]} into .venv (torch==2.13.0 CPU)"
  # torch first and alone, so nothing else can pull a CUDA build.
  .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
  echo "$want" > "$stamp"
fi
