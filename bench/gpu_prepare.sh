#!/usr/bin/env bash
# Prepares, on this machine, what bench/gpu.sh needs on a lent GPU machine (which has PyTorch but
# reaches no package registry and has no Fashion-MNIST): .whl/ (our other dependencies as wheels
# for its CPython 3.12, the versions this .venv has; not Numba and llvmlite, which its image has and
# whose wheels, 64 MB, would take the call over its 64 MiB; a cached plan is keyed by the engine
# that solved it, the compiled one here and there), .fmnist/ (Debian's IDX files) and
# .gamecache/games/ (the plan of recipes/fedpcs/fmnist.yaml at seed 0, solved here if it is not
# in this machine's cache yet: a CPU solve of minutes). All three are in .gitignore; the device
# call carries them: carry [".whl", ".fmnist", ".gamecache"], command
#   FEDGAME_CODE_VERSION=$(git rev-parse HEAD) bash bench/gpu.sh 400
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
pins=$($py -m pip list --format=freeze 2>/dev/null | grep -iE '^(pydantic|pydantic[-_]core|annotated[-_]types|typing[-_]inspection|typing[-_]extensions|opacus|dp[-_]accounting)==' | tr '\n' ' ')
rm -rf .whl && mkdir -p .whl
# shellcheck disable=SC2086
$py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl $pins
mkdir -p .fmnist && cp /usr/share/datasets/fashion-mnist/*-ubyte.gz .fmnist/
FEDGAME_CACHE="$PWD/.gamecache" $py - <<'PY'
from pathlib import Path
from fedgame.incentives.fedpcs import solve_plan
from fedgame.pipeline.build import fedpcs_game
from fedgame.pipeline.config import load_recipe
import shutil, os
game = fedpcs_game(load_recipe(Path("recipes/fedpcs/fmnist.yaml"), ["train.device=cpu"]))
name = f"fedpcs-{game.key()}.npz"
mine = Path(os.path.expanduser("~/.cache/fedgame/games")) / name
target = Path(".gamecache/games") / name
target.parent.mkdir(parents=True, exist_ok=True)
if mine.exists() and not target.exists():
    shutil.copy(mine, target)
solve_plan(game)  # reads .gamecache, or solves and writes it there
print("game plan:", target, target.exists())
PY
ls .whl; du -sh .whl .fmnist .gamecache
