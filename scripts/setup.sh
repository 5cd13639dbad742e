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

# Python: $PYTHON where given (a pyenv version that is not active here is found in pyenv's
# versions folder), else the newest supported one that runs from PATH (pyproject.toml's
# requires-python: 3.11, 3.12 and 3.13). An unsupported Python stops here with one line.
SUPPORTED="3.11 3.12 3.13"
py_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
find_python() {  # $1: a command name or path; $2: "pyenv" to look in pyenv's versions too
  local c="$1" v
  if py_version "$c" >/dev/null; then command -v "$c" || echo "$c"; return 0; fi
  [ "${2:-}" = pyenv ] || return 1
  for v in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/"$(basename "$c")"; do
    [ -x "$v" ] && py_version "$v" >/dev/null && { echo "$v"; return 0; }
  done
  return 1
}
if [ -n "${PYTHON:-}" ]; then
  PY="$(find_python "$PYTHON" pyenv)" || { echo "error: PYTHON=$PYTHON: no such Python here; fedgame supports Python ${SUPPORTED// /, } (e.g. PYTHON=python3.12)" >&2; exit 2; }
else
  PY=""
  for c in python3.13 python3.12 python3.11; do PY="$(find_python "$c")" && break; PY=""; done
  [ -n "$PY" ] || { echo "error: no supported Python found; fedgame supports Python ${SUPPORTED// /, } (install one, or set PYTHON=)" >&2; exit 2; }
fi
ver="$(py_version "$PY")"
case " $SUPPORTED " in
  *" $ver "*) ;;
  *) echo "error: Python $ver ($PY) is not supported; fedgame supports Python ${SUPPORTED// /, } (set PYTHON=python3.12, say)" >&2; exit 2 ;;
esac
if [ -x .venv/bin/python ] && [ "$(py_version .venv/bin/python)" != "$ver" ] && [ -n "${PYTHON:-}" ]; then
  echo "== .venv is Python $(py_version .venv/bin/python), PYTHON asks for $ver: creating it anew"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv with Python $ver ($PY)"
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi

stamp=".venv/.fedgame-installed-${extras:-base}"
want="$(cksum < pyproject.toml | cut -d' ' -f1)"  # POSIX cksum: on Linux and macOS alike
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "== installing fedgame${extras:+[$extras]} into .venv (torch==2.13.0 CPU)"
  # torch first and alone, so nothing else can pull a CUDA build.
  # PyTorch's CPU index where it is reachable (the CPU build, 200 MB); otherwise PyPI's wheel
  # (with CUDA's libraries, about 3 GB, which run on the CPU alike). On Python 3.11 a local copy
  # of the CPU wheel, where pip's configuration names one, is taken first.
  # Byte-compiled once everything is in, on every core: where PYTHONDONTWRITEBYTECODE is set (as
  # on the CI host) no process writes a .pyc, and every process would compile torch from source
  # again (docs/speed.md: the suite ran five times slower). pip compiles file by file on one core
  # (100 of the set-up's 140 s on the 2-core host); compileall -j 0 writes the same .pyc files in
  # 59 s. As pip does, a file that is not valid on this Python (torch ships one for 3.12's
  # syntax, for its own tests) stays source: compileall's status is not the set-up's.
  .venv/bin/python -m pip install -q --no-compile --timeout 15 --retries 1 "torch==2.13.0" --extra-index-url https://download.pytorch.org/whl/cpu 2>/dev/null \
    || .venv/bin/python -m pip install -q --no-compile "torch==2.13.0"
  .venv/bin/python -m pip install -q --no-compile -e ".${extras:+[$extras]}"
  .venv/bin/python -m compileall -qq -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true
  echo "$want" > "$stamp"
fi
