#!/usr/bin/env bash
# bench/optimize.py on the device tool's GPU machine, in the background (optimizing, then timing five variants at three
# workloads in two dtypes, outlasts one 10-minute call). After
# `bash bench/gpu_pipeline.sh setup-lowering` (carrying .gpu-low, which `bash bench/gpu_pack.sh lowering` fills with
# OR-Tools, pydantic and Liger-Kernel) in that call:
#   bash bench/gpu_optimize.sh start "fp32 bf16" 240   # dtypes, optimize's budget in seconds; EXAMPLE: the BxS
#                                                      # optimize records (4x512); OPT_OPTS: more options
#   bash bench/gpu_optimize.sh wait 560                # up to 560 s; the rows so far come back in $OUT
# GPUS="2 3": the GPUs to optimize on (default 0 1 ...), the table on the first; AFTER=bench/realworld.py: the table
# waits until no such process runs (its verifier workers would slow the launch-bound rows).
set -u
WORK=/tmp/optimize
case "$1" in
start)
  read -r -a dtypes <<< "$2"
  mkdir -p $WORK
  # Optimizing first, one dtype per GPU at once (it fills the conversion cache); then the table in one process on one
  # GPU, the dtypes one after another: a step of this model is bound by the CPU launching kernels, so rows timed
  # while another process runs its verifier's workers come out slower than they are.
  opts="--random smollm2 --device cuda --example ${EXAMPLE:-4x512} --budget-s ${3:-240} ${OPT_OPTS:-}"
  read -r -a gpus <<< "${GPUS:-$(seq -s ' ' 0 $(( ${#dtypes[@]} - 1 )))}"
  warm=""
  g=0
  for dt in "${dtypes[@]}"; do
    warm+="CUDA_VISIBLE_DEVICES=${gpus[$g]} python3 bench/optimize.py $opts --dtypes $dt --variants optimize --shapes 1x16 \
      > $WORK/warm_$dt.log 2>&1 & "
    g=$((g + 1))
  done
  all=$(IFS=,; echo "${dtypes[*]}")
  # setsid: the runs outlive the call that started them
  after=":"
  # [b]ench/...: the pattern matches that run's command line, never this shell's own
  [ -n "${AFTER:-}" ] && after="while pgrep -f '[${AFTER:0:1}]${AFTER:1}' > /dev/null; do sleep 5; done"
  setsid nohup bash -c "$warm wait; $after; CUDA_VISIBLE_DEVICES=${gpus[0]} python3 bench/optimize.py $opts --dtypes $all \
    --shapes 8x512,1x2048,decode:512 --out $WORK/optimize.json > $WORK/optimize.log 2>&1" > /dev/null 2>&1 &
  echo "started: optimize ${dtypes[*]} on $g GPUs, then the table";;
wait)
  bash bench/gpu_wait.sh bench/optimize.py $WORK "${2:-560}"
  for f in $WORK/*.log; do echo "== $f"; grep -v -e Warning -e "^ *warnings" "$f" | tail -n 30; done;;
esac
