#!/usr/bin/env bash
# Issue 44 item 6 on a lent CUDA GPU: does `train.precision: bf16` agree with fp32 in the FedPCS
# paper_params regime? Each pair is one Table II cell (results/fedpcs_table2_paper_params: IID,
# tau = 0.2, the grid's own overrides, the plan its committed cell played) run twice on the same
# GPU, fp32 and bf16, so the pair differs in precision alone. FedPCS seeds 0-4 first, then Random
# (`initial`) seeds 0-4, while the deadline allows; the CUDA tests of bench/gpu.sh beside them.
# Prepared here as for bench/gpu.sh (bench/gpu_prepare.sh's .whl/ and .fmnist/), and
# .gamecache/games/ holding the plans the committed cells played (fedgame.incentives.fedpcs
# .reuse_plans; the page results/bf16_paper_params/README.md says how). Carry [".whl", ".fmnist",
# ".gamecache"]; on the GPU machine, from the root:  bash bench/gpu_bf16_check.sh [seconds]
# Four runs at a time, each on four of its 16 cores (taskset; cuDNN is deterministic, so runs side
# by side compute what one alone would). $OUT gets bf16_check.log and runs.tgz (per-seed files,
# packed again after each run, so a call cut short still brings back what finished).
set -uo pipefail
budget=${1:-500}
start=$(date +%s)
deadline=$((start + budget))
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="/tmp/site:$PWD/src" FEDGAME_CACHE="$PWD/.gamecache"
runs=/tmp/bf16_check
mkdir -p "$runs"
command -v taskset >/dev/null || taskset() { shift 2; "$@"; }  # no util-linux: run unpinned
pack() {  # one temporary name per lane: two lanes finishing together each write a whole archive
  tar czf "$OUT/.runs.$BASHPID.tgz" --exclude='checkpoint*' --exclude='.lock' -C "$runs" . 2>/dev/null && mv "$OUT/.runs.$BASHPID.tgz" "$OUT/runs.tgz"
}
one() {  # one <method> <precision> <seed> <cores>
  local m=$1 p=$2 s=$3 cores=$4 left=$((deadline - $(date +%s)))
  [ "$left" -gt 100 ] || { echo "== skipped $m $p seed $s (${left} s left)"; return; }
  local dir="$runs/$p/${m}_$p/seed_$s" t0
  t0=$(date +%s)
  timeout "$left" taskset -c "$cores" python3 -m fedgame run "recipes/fedpcs/${m/#fedpcs/fmnist}.yaml" --set "name=${m}_$p" \
    --set "seed=$s" --set train.clients_per_round=20 --set data.partition.kind=iid --set privacy.mode=paper_params \
    --set privacy.clip=100 --set "train.precision=$p" --out "$dir" >"$dir.log" 2>&1
  if [ -f "$dir/summary.json" ]; then
    echo "== $m $p seed $s: $(($(date +%s) - t0)) s, $(python3 -c "import json;print(json.load(open('$dir/summary.json'))['final_accuracy'])")"
    pack
  else
    echo "== $m $p seed $s did not finish:"; tail -5 "$dir.log"; rm -rf "$dir"
  fi
}
lane() {  # lane <cores> <method:precision:seed>...
  local cores=$1; shift
  for item in "$@"; do IFS=: read -r m p s <<<"$item"; mkdir -p "$runs/$p/${m}_$p"; one "$m" "$p" "$s" "$cores"; done
}
{
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  mkdir -p /usr/share/datasets/fashion-mnist && cp .fmnist/*.gz /usr/share/datasets/fashion-mnist/ || exit 1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  lscpu | grep -E "Model name|^CPU\(s\)"
  echo "bf16 units of the CPU: $(grep -m1 -o -w -E 'amx_bf16|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  python3 -c "import torch, numpy, numba; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'cpu', torch.backends.cpu.get_cpu_capability(), 'numpy', numpy.__version__, 'numba', numba.__version__)"
  items=()
  for m in fedpcs random; do for s in 0 1 2 3 4; do items+=("$m:fp32:$s" "$m:bf16:$s"); done; done
  lanes=("0-3" "4-7" "8-11" "12-15")
  for w in 0 1 2 3; do
    mine=(); for ((i = w; i < ${#items[@]}; i += 4)); do mine+=("${items[i]}"); done
    if [ "$w" = 3 ]; then
      (taskset -c 12-15 env FEDGAME_TEST_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider tests/sim/test_cuda.py \
        tests/sim/test_precision.py -k "cuda or bf16 or channels_last" -rs 2>&1 | tail -4 | sed 's/^/== CUDA tests: /'
       lane "${lanes[w]}" "${mine[@]}") &
    else
      lane "${lanes[w]}" "${mine[@]}" &
    fi
  done
  wait
  echo "== done ($(($(date +%s) - start)) s): $(find "$runs" -name summary.json | wc -l) runs"
} 2>&1 | tee "$OUT/bf16_check.log"
pack
