#!/usr/bin/env bash
# Idempotent set-up: Debian's Fashion-MNIST, a virtual environment in .venv, the package.
# Usage: scripts/setup.sh [extras]   (e.g. "test"). A second call skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"

# Fashion-MNIST (the default data): found in $FEDGAME_DATA_FASHION_MNIST, $FEDGAME_DATA_ROOT/fashion_mnist
# or Debian's folder, nothing is installed; otherwise apt installs Debian's package where it can
# (root, or sudo), and where it cannot, one line says how to get the files. Neither needs root
# when the files are there.
have_fmnist() {
  local d
  for d in "${FEDGAME_DATA_FASHION_MNIST:-}" "${FEDGAME_DATA_ROOT:+$FEDGAME_DATA_ROOT/fashion_mnist}" /usr/share/datasets/fashion-mnist; do
    [ -n "$d" ] && { [ -f "$d/train-images-idx3-ubyte.gz" ] || [ -f "$d/train-images-idx3-ubyte" ]; } && return 0
  done
  return 1
}
if ! have_fmnist; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if command -v apt-get >/dev/null 2>&1 && { [ -z "$SUDO" ] || sudo -n true 2>/dev/null; }; then
    echo "== installing Debian's dataset-fashion-mnist"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    echo "note: Fashion-MNIST not found: install Debian's dataset-fashion-mnist, or download the four IDX files (github.com/zalandoresearch/fashion-mnist) and set FEDGAME_DATA_FASHION_MNIST=<folder>" >&2
  fi
fi

PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv with $PY"
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi

stamp=".venv/.fedgame-installed-${extras:-base}"
want="$(cksum < pyproject.toml | cut -d' ' -f1)"  # POSIX cksum: on Linux and macOS alike
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "== installing fedgame${extras:+[$extras]} into .venv (torch==2.13.0 CPU)"
  # torch first and alone, so nothing else can pull a CUDA build.
  .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
  echo "$want" > "$stamp"
fi
