#!/usr/bin/env bash
# Every GPU check of the course in one run on a lent CUDA machine (see tools/gpu/README.md):
#   tools/gpu/run_checks.sh STEP...      (default: all, in this order)
# Steps: info tests triton bench-bf16 bench-fp16 flex. Each step has a time limit and the whole
# run a deadline (GPU_DEADLINE_S, default 520 s), so the results are always packed at the end:
# $OUT/gpu-results.tgz (logs, JSON, markdown, junit XML of $GPU_WORK) and $OUT/steps.txt.
set -u
OUT=${OUT:-/tmp/gpu_out}
R=${GPU_WORK:-/tmp/gpu_results}
mkdir -p "$R" "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
unset TRITON_INTERPRET
PY=${PY:-python3}
DEADLINE=${GPU_DEADLINE_S:-520}
T0=$(date +%s)

step() {   # step NAME LIMIT_S COMMAND...: run with a limit cut to the time left; log to $R/NAME.log
  local name=$1 limit=$2 left start rc
  shift 2
  left=$(( DEADLINE - ($(date +%s) - T0) - 10 ))
  if [ "$left" -lt 20 ]; then echo "$name: skipped, no time left" | tee -a "$R/steps.txt"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s) at $(( $(date +%s) - T0 ))s"
  start=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$R/$name.log" 2>&1
  rc=$?
  echo "$name: rc=$rc in $(( $(date +%s) - start ))s" | tee -a "$R/steps.txt"
  tail -n 3 "$R/$name.log"
}

sweep() {  # sweep DTYPE E [--backward]
  local dtype=$1 e=$2 extra=${3:-}
  step "bench-$dtype-d$e${extra:+-backward}" "${BENCH_LIMIT_S:-60}" "$PY" -m course_lib.bench --device cuda \
    --dtype "$dtype" --n 512 1024 2048 4096 8192 16384 --d "$e" --heads 16 --batch 4 \
    --causal both --rounds "${BENCH_ROUNDS:-3}" --quiet $extra --out "$R" --name "cuda-$dtype-d$e${extra:+-backward}"
}

run_step() {
  case $1 in
    info)
      step info 30 bash -c "nvidia-smi; $PY -c 'import torch, triton, sys; print(sys.version); \
print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"cudnn\", \
torch.backends.cudnn.version(), \"triton\", triton.__version__); \
print(torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0))'" ;;
    tests)
      step tests 110 "$PY" -m pytest -q -m cuda -p no:cacheprovider -o addopts= \
        --junitxml="$R/cuda-tests.xml" tests/test_sdpa.py tests/test_differential.py \
        tests/test_multihead.py ;;
    triton)
      step triton 150 "$PY" -m course_lib.chapters.ch09_flash_triton.bench \
        --out "$R/triton-cuda.json" ;;
    bench-bf16)
      for e in 128 64; do sweep bfloat16 $e; sweep bfloat16 $e --backward; done ;;
    bench-fp16)
      for e in 128 64; do sweep float16 $e; sweep float16 $e --backward; done ;;
    bench-*-d*-backward)   # one backward sweep, e.g. bench-bfloat16-d128-backward
      local spec=${1#bench-}
      sweep "${spec%%-*}" "$(echo "$spec" | sed 's/.*-d\([0-9]*\)-backward/\1/')" --backward ;;
    flex)
      step flex 90 "$PY" -m course_lib.chapters.ch11_flex_attention.bench --device cuda \
        --lengths 4096 --out "$R/flex-cuda.json" ;;
    *) echo "unknown step $1" >&2 ;;
  esac
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(info tests triton bench-bf16 flex bench-fp16)
for s in "${steps[@]}"; do run_step "$s"; done
cp "$R/steps.txt" "$OUT/steps.txt" 2>/dev/null
tar czf "$OUT/gpu-results.tgz" -C "$R" .
echo "packed $(ls "$R" | wc -l) files in $(( $(date +%s) - T0 ))s"
