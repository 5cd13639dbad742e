#!/usr/bin/env bash
# Issue 45 item 1 on a lent GPU machine's CPU, whose flags show AMX (amx_bf16) and AVX-512 BF16
# where this 2-core machine has neither: `bench/run.py --only speed_bf16` (one-thread fp32 and bf16
# steps timed in turns, the bf16 step's profile and the bound it puts on the host-relative bf16
# target), the JSON into $OUT. Prepared here as for bench/gpu.sh: .whl/ (by
# bench/gpu_prepare.sh); carry [".whl"] (with .fmnist/ too the call may pass its 64 MiB: then the
# pool part is skipped and the per-core figures stand); on that machine, from the root:
#   FEDGAME_CODE_VERSION=<commit> bash bench/device_cpu_bf16.sh [bench parts] [cores]
# Other parts of bench/run.py run the same way, e.g. `speed_paper 0,1`: the paper-budget FedPCS run
# on two of its cores (taskset: the bench's workers follow the CPU affinity), as on the 2-core
# machines, which needs .fmnist/ carried: then move results/ out of the tree for the call (the
# call's 64 MiB), and back after it.
set -uo pipefail
parts=${1:-speed_bf16}
pin=()
[ -n "${2:-}" ] && pin=(taskset -c "$2")
OUT=${OUT:-/tmp/cpu_bf16_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="/tmp/site:$PWD/src" FEDGAME_BENCH_RESULTS="$OUT"
{
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  [ -d .fmnist ] && mkdir -p /usr/share/datasets/fashion-mnist && cp .fmnist/*.gz /usr/share/datasets/fashion-mnist/
  lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket"
  echo "bf16 units: $(grep -m1 -o -w -E 'amx_bf16|amx_tile|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  python3 -c "import torch; print('torch', torch.__version__, 'cpu', torch.backends.cpu.get_cpu_capability(), 'mkldnn bf16', torch.ops.mkldnn._is_mkldnn_bf16_supported())"
  t0=$(date +%s)  # the solve's kernels compiled first, untimed by the bench (a fresh machine has no Numba cache)
  "${pin[@]}" python3 -c "from fedgame.incentives.fedpcs import solve_plan; from fedgame.incentives.fedpcs.plugin import FedPCSGame; solve_plan(FedPCSGame(n_clients=20, clients_per_round=4, rounds=4), cache=False)"
  echo "Numba's compile and a small solve: $(($(date +%s) - t0)) s"
  "${pin[@]}" python3 bench/run.py --only "$parts"
} 2>&1 | tee "$OUT/cpu_$parts.log"
