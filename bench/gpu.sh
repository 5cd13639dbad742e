#!/usr/bin/env bash
# Issue 17's checks on a lent CUDA GPU machine (docs/speed.md, "Measured on a GPU"). That machine
# has PyTorch (python3) but no package registry and no Fashion-MNIST, and gets a copy of this
# working tree. Prepared here, before the call, by bench/gpu_prepare.sh:
#   .whl/      the wheels of our dependencies it lacks, for its Python (3.12): pydantic,
#              pydantic-core, annotated-types, typing-inspection, typing-extensions, opacus,
#              dp-accounting (pip download --no-deps --only-binary=:all: --python-version 3.12 ...;
#              not Numba, which its image has: a cached plan is keyed by its engine, and Numba's
#              wheels would take the call over its 64 MiB)
#   .fmnist/   Debian's four gzipped IDX files of Fashion-MNIST
#   .gamecache/games/  the cached plan of recipes/fedpcs/fmnist.yaml at seed 0 (a CPU solve)
# all three in .gitignore and carried with the call. Then, on the GPU machine, from the root:
#   FEDGAME_CODE_VERSION=<commit> bash bench/gpu.sh [seconds]
# runs the CUDA tests, then `bench/run.py --only speed_gpu` until the seconds run out (default
# 480). $OUT gets two files: gpu.log, and results.tgz (the JSON and the paper-budget runs' files,
# packed again every 10 s, so a call cut short still brings back what was finished).
set -uo pipefail
budget=${1:-480}
start=$(date +%s)
export FEDGAME_BENCH_DEADLINE=$((start + budget))
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
log="$OUT/gpu.log"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="/tmp/site:$PWD/src" FEDGAME_CACHE="$PWD/.gamecache"
export FEDGAME_BENCH_RESULTS=/tmp/gpu_results
mkdir -p "$FEDGAME_BENCH_RESULTS"
pack() { tar czf "$OUT/.results.tgz" -C "$FEDGAME_BENCH_RESULTS" . && mv "$OUT/.results.tgz" "$OUT/results.tgz"; }
(while sleep 10; do pack; done) &
packer=$!
{
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  mkdir -p /usr/share/datasets/fashion-mnist && cp .fmnist/*.gz /usr/share/datasets/fashion-mnist/ || exit 1
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-200
  python3 -c "import torch, numpy, scipy; import numba; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'numpy', numpy.__version__, 'scipy', scipy.__version__, 'numba', numba.__version__)"
  echo "== CUDA tests ($(($(date +%s) - start)) s)"
  FEDGAME_TEST_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider tests/sim/test_cuda.py tests/sim/test_precision.py -k "cuda or bf16 or channels_last" -rs
  echo "== bench --only speed_gpu ($(($(date +%s) - start)) s)"
  timeout $((budget - ($(date +%s) - start) - 5)) python3 bench/run.py --only speed_gpu
  echo "== done ($(($(date +%s) - start)) s)"
} 2>&1 | tee "$log"
kill $packer 2>/dev/null
pack
