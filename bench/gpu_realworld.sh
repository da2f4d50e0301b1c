#!/usr/bin/env bash
# The real-world suite (tests/realworld) at LLM sizes on the device tool's GPU machine, sharded over its GPUs: one
# bench/realworld.py process per (dtype, shard), each on a GPU of its own, in the background, since the whole suite
# outlasts one 10-minute call. After `bash bench/gpu_pipeline.sh setup-lowering` (carrying .gpu-low) in that call:
#   bash bench/gpu_realworld.sh start "float32 bfloat16" 20   # dtypes, search seconds per program; shards: GPUs/dtypes
#   bash bench/gpu_realworld.sh wait 560                      # up to 560 s; the rows so far come back in $OUT
#   bash bench/gpu_realworld.sh kernels                       # then: each answer's kernel vs wall time (kernel_time.py)
# A file's variants (suite.toml's variant_of) are left out: --dtype sets every program's dtype. A second `start` on the
# same machine runs only the programs no earlier shard finished; SKIP_float32=a,b leaves out those done elsewhere.
# GPUS="0 1" uses only those GPUs (default: all); SOURCES=lowering,inductor names the search's candidate sources.
set -u
WORK=/tmp/realworld
case "$1" in
start)
  read -r -a dtypes <<< "$2"
  budget=${3:-20}
  read -r -a gpus <<< "${GPUS:-$(seq -s ' ' 0 $(( $(nvidia-smi -L | wc -l) - 1 )))}"
  per=$(( ${#gpus[@]} / ${#dtypes[@]} ))
  mkdir -p $WORK
  run=$(date +%s)
  g=0
  for dt in "${dtypes[@]}"; do
    # the programs no earlier shard of this dtype finished (on this machine, or listed in SKIP_<dtype>)
    skip=$(eval echo "\${SKIP_$dt:-}")
    names=$(DT=$dt WORK=$WORK SKIP="$skip" python3 -c "import glob, json, os; from pathlib import Path
from drtriton_ray.eval.realworld import suite
files = glob.glob(os.environ['WORK'] + '/rw_' + os.environ['DT'] + '_*.json')
done = {r['program'] for f in files for r in json.load(open(f))['rows']} | set(os.environ['SKIP'].split(','))
print(' '.join(n for n, p in suite(Path('tests/realworld/suite.toml')).items() if not p.variant_of and n not in done))")
    for ((s = 0; s < per; s++)); do
      only=$(tr ' ' '\n' <<< "$names" | awk -v s=$s -v n=$per '(NR - 1) % n == s' | paste -sd,)
      # setsid: the shard outlives the call that started it
      CUDA_VISIBLE_DEVICES=${gpus[$g]} setsid nohup python3 bench/realworld.py --device cuda --sizes llm --dtype "$dt" \
        --budget-s "$budget" --sources "${SOURCES:-lowering}" --only "$only" --answers "$WORK/answers_$dt" --out "$WORK/rw_${dt}_${run}_$s.json" > "$WORK/rw_${dt}_${run}_$s.log" 2>&1 &
      g=$((g + 1))
    done
  done
  echo "started $g shards: ${dtypes[*]} x $per";;
wait)
  bash bench/gpu_wait.sh bench/realworld.py $WORK "${2:-560}"
  for f in $WORK/*.log; do echo "== $f"; grep -E "^[a-z0-9_]+: " "$f" | tail -n 40; done;;
kernels)
  for d in $WORK/answers_*; do
    dt=${d##*answers_}
    python3 bench/kernel_time.py --answers "$d" --sizes llm --dtype "$dt" --out "$OUT/kernel_time_$dt.json" 2>&1 | tail -n 60
  done;;
esac
