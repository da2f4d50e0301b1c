#!/usr/bin/env bash
# bench/optimize.py on the device tool's GPU machine: one process per dtype, each on a GPU of its own, in the
# background (optimizing, then timing five variants at three workloads, outlasts one 10-minute call). After
# `bash bench/gpu_pipeline.sh setup-lowering` (carrying .gpu-low, which `bash bench/gpu_pack.sh lowering` fills with
# OR-Tools, pydantic and Liger-Kernel) in that call:
#   bash bench/gpu_optimize.sh start "fp32 bf16" 240   # dtypes, optimize's budget in seconds; OPT_OPTS: more options
#   bash bench/gpu_optimize.sh wait 560                # up to 560 s; the rows so far come back in $OUT
set -u
WORK=/tmp/optimize
case "$1" in
start)
  read -r -a dtypes <<< "$2"
  mkdir -p $WORK
  g=0
  for dt in "${dtypes[@]}"; do
    # setsid: the run outlives the call that started it
    CUDA_VISIBLE_DEVICES=$g setsid nohup python3 bench/optimize.py --random smollm2 --device cuda --dtypes "$dt" \
      --shapes 8x512,1x2048,decode:512 --budget-s "${3:-240}" --out "$WORK/optimize_$dt.json" ${OPT_OPTS:-} \
      > "$WORK/optimize_$dt.log" 2>&1 &
    g=$((g + 1))
  done
  echo "started ${dtypes[*]} on $g GPUs";;
wait)
  deadline=$(( $(date +%s) + ${2:-560} ))
  while pgrep -f bench/optimize.py > /dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 10; done
  cp $WORK/*.json $WORK/*.log "$OUT"/ 2> /dev/null
  if pgrep -f bench/optimize.py > /dev/null; then echo "still running"; else echo "done"; fi
  for f in $WORK/*.log; do echo "== $f"; grep -v -e Warning -e "^ *warnings" "$f" | tail -n 30; done;;
esac
