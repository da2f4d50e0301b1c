#!/usr/bin/env bash
# The SFT -> RL pipeline on the device tool's GPU machine (torch + transformers, no vLLM/Ray/network).
# bench/gpu_pack.sh packs the missing wheels and the model into .gpu1/ .. .gpuN/; every call carries
# one piece, and the calls must follow each other while the machine is warm (state lives in /tmp):
#   bash bench/gpu_pipeline.sh recv 1         # ... recv N: store the piece carried in .gpuK/
#   bash bench/gpu_pipeline.sh setup          # unpack, install to /tmp/site, SmolLM2 -> /tmp/models/smollm2
#   bash bench/gpu_pipeline.sh checks         # GPU test of the verifier as the RL job runs it (CHECKS: more tests)
#   bash bench/gpu_pipeline.sh bench-gen      # HF engine decoding speed and memory: dynamic vs static cache (CUDA
#                                             # graphs); GEN_MODEL (smollm2, or sft), GEN_BATCHES, GEN_TOKENS, GEN_MODES
#   bash bench/gpu_pipeline.sh noise          # r_s timing noise, quiet GPU vs shared with a decoding engine
#                                             # (bench/speed_noise.py; NOISE_OPTS: more options)
#   bash bench/gpu_pipeline.sh data           # verified SFT pairs (level 1), unless carried (below)
#   bash bench/gpu_pipeline.sh eval-base      # held-out pass@1 of the base model (EVAL_OPTS: more eval-model options)
#   bash bench/gpu_pipeline.sh sft            # SFT on Ray Train (SFT_SET: more --set overrides)
#   bash bench/gpu_pipeline.sh eval-sft       # held-out pass@1 after SFT
#   bash bench/gpu_pipeline.sh rl MINUTES     # DRPO from the SFT model for MINUTES (RL_SET: more --set overrides);
#                                             # the job's log, metrics, actor logs and rollouts come back in $OUT
#   bash bench/gpu_pipeline.sh rl-start 9.5   # the same in the background (a 10-minute budget outlasts a call), then
#   bash bench/gpu_pipeline.sh rl-wait 570    # ... in the next calls: wait up to 570 s; once done, rl's files come back
#   bash bench/gpu_pipeline.sh sft-send K     # the SFT model back here in 15 MiB pieces, 4 a call (K = 1..6 for
#                                             # SmolLM2); then, here, `bash bench/gpu_pack.sh sft-model DIR...`
#   bash bench/gpu_pipeline.sh recv-sft K     # another machine later: carry .gpu-sftK/ (K = 1..N) before `setup`, which
#                                             # then makes /tmp/models/sft of it (no base model, no `sft` needed)
#   bash bench/gpu_pipeline.sh eval-rl        # held-out pass@1 after RL
#   bash bench/gpu_pipeline.sh replay "" "algo.lr=1e-6"   # bench/rl_replay.py from the SFT model: an RL run's first
#                                             # steps replayed under each setting: those in REPLAY_ROLLOUTS (a folder),
#                                             # else carried in .gpu-replay, else those of this machine's `rl`;
#                                             # REPLAY_STEPS (1,2), REPLAY_PROBE (201); REPLAY_SAVE=1 (one setting)
#                                             # keeps the replayed model for `eval-replay`
#   EVAL_TAG=t05 EVAL_OPTS="--samples 2 --temperature 0.5" bash bench/gpu_pipeline.sh eval-rl   # sampled pass@1,
#                                             # into eval-rl_t05.json beside the greedy eval-rl.json
#   bash bench/gpu_pipeline.sh placement colocated 3      # two GPUs, after setup: RL steps for 3 minutes with engine,
#   bash bench/gpu_pipeline.sh placement disaggregated 3  # verifier and trainer on GPU 0, or the trainer on GPU 1
#   bash bench/gpu_pipeline.sh serve-load 2 90            # the service under load for 90 s with 1 or 2 Verifier replicas
#   bash bench/gpu_pipeline.sh serve-kb 10 45 # after data and sft: the service (configs/serve-gpu.yaml) with the SFT
#                                             # model as a source beside the lowering converts 10 KernelBench level-2
#                                             # problems (carry .kernelbench) over HTTP, 45 s budget each, 2 at a time
#                                             # (bench/serve_convert.py); one GPU: the Verifier and the Policy share it;
#                                             # no submission after SK_DEADLINE (420) s, the rest cancelled 100 s later;
#                                             # SK_SOURCES (lowering,model), SK_CONCURRENCY (2), SK_OPTS: more options
#   bash bench/gpu_pipeline.sh serve-kb-start 10 45   # the same without a deadline, in the background; then
#   bash bench/gpu_pipeline.sh serve-kb-wait 570      # ... wait up to 570 s: the table once done, the rows so far
#   bash bench/gpu_pipeline.sh convert-start 30 45    # after data and sft: bench/convert.py (no service) over 30 level-2
#                                             # problems, sources lowering,model (the SFT model), 45 s each, in the
#                                             # background (~20-40 s a problem outlasts a call); CV_OPTS: more options
#                                             # (--samples, --max-tokens); CV_GPU=1 and SK_GPU=0 on two GPUs: both
#                                             # background runs at once, one GPU each; CV_SHARDS=S: S runs at once
#                                             # on the same GPU (each its own verifier pool and model), `--shard i/S`
#                                             # of the list each, into convert_kb_i.json
#   bash bench/gpu_pipeline.sh convert-wait 570       # ... wait up to 570 s (for all shards together); the rows so
#                                             # far come back each call (every shard's JSON, its count of problems
#                                             # done); once all are done the shards merged: convert_kb.json, the table
#   bash bench/gpu_pipeline.sh setup-lowering # instead of recv/setup, for `lowering` alone: carry .gpu-low
#                                             # (bench/gpu_pack.sh lowering) with this call
#   bash bench/gpu_pipeline.sh lowering 1 480 # the reference lowering, paper profile, levels 1 (or 2,5), 480 s budget
#   bash bench/gpu_pipeline.sh lowering 2 480 90  # ... from program 90 on (a run its budget cut); L2, L5: counts;
#                                                 # LOWER_OPTS: more bench/lowering.py options (--timing-trials 10)
# Every stage fits one 10-minute device call; `sft && eval-sft` together may not (~5 + ~4.6 min). SFT pairs made on CPU (`bash bench/gpu_pack.sh sft-data`: 800 pairs verified by the interpreter in ~3 min,
# into .gpu-data/) come along with `setup`'s call when .gpu-data is carried, and `data` can be skipped.
# Held-out evaluation: the first 201 level-1 programs of the held-out stream (three per operator; EVAL_COUNT=67 for
# one each), decoded with the static cache as the RL job's engine does (configs/gpu-1.yaml), correctness alone
# (--no-timing): greedily (eval-X.json), then 4 answers each at the RL job's temperature 0.3 (eval-X_sampled.json;
# EVAL_SAMPLED sets those options, empty skips it). One program is 0.005 of pass@1 at 201: at 67, one RL step can
# reshuffle a third of the greedy outcomes with no net change (docs/rl.md).
set -euo pipefail
T=${GPU_TMP:-/tmp}   # where the stages keep their state (a test points it elsewhere)
OUT=${OUT:-$T/gpu-out}
S=$T/stage
mkdir -p "$OUT" $S $T/models $T/runs $T/data
export PYTHONPATH=$T/site:$PWD HF_HUB_OFFLINE=1 RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 \
  PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
unset TRITON_INTERPRET
CLI="python3 -m drtriton_ray.cli"
# --timeout: the RL job's verifier's (configs/gpu-1.yaml); at eval-model's default 300 s one answer that hangs can take
# a sampled evaluation past the call's 600 s limit
EVAL="$CLI eval-model --level 1 --count ${EVAL_COUNT:-201} --engine hf --device cuda --dtype bf16 --static-cache \
  --max-tokens 1792 --workers ${EVAL_WORKERS:-12} --timeout ${EVAL_TIMEOUT:-120} --no-timing ${EVAL_OPTS:-}"
EVAL_SAMPLED=${EVAL_SAMPLED---samples 4 --temperature 0.3}
# a run's latest checkpoint that Ray Train registered (a trainer that failed may leave a newer folder it never did)
latest() {
  python3 -c "import json, sys; r = json.load(open(sys.argv[1] + '/checkpoint_manager_snapshot.json'))['checkpoint_results']; \
print(sys.argv[1] + '/' + max(r, key=lambda c: c['metrics']['step'])['checkpoint_dir_name'])" "$1"
}
rl_job() {   # configs/gpu-1.yaml from the SFT model for MINUTES (run.max_minutes: the trainer's budget)
  python3 jobs/train.py --config configs/gpu-1.yaml --set model.path=$T/models/sft \
    --set run.storage_path=$T/runs --set run.max_minutes="$1" ${RL_SET:-}
}
rl_collect() {   # the RL model for eval-rl, the metrics, the actors' own logs (the driver runs with log_to_driver
                 # off) and every trained answer
  ln -sfn "$(latest $T/runs/gpu-1)" $T/models/rl
  cp $T/runs/gpu-1/metrics.jsonl "$OUT/rl_metrics.jsonl"
  logs=/tmp/ray/session_latest/logs
  tar -czf "$OUT/rl_actor_logs.tgz" -C $logs $(cd $logs && ls | grep -E '^worker-.*\.(out|err)$') || true
  tar -czf "$OUT/rl_rollouts.tgz" -C $T/runs/gpu-1 rollouts
  if [ -f $T/rl_gpu_memory.csv ]; then cp $T/rl_gpu_memory.csv "$OUT/"; fi
}
gpu_watch() {   # rl-start's job: every process's GPU memory every 5 s until the job is done, into rl_gpu_memory.csv
                # (engine, trainer and verifier share the GPU and can run it out of memory)
  while [ ! -f $T/rl.done ]; do
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader \
      | sed "s/^/$(date +%s), /" >> $T/rl_gpu_memory.csv
    sleep 5
  done
}
gpu_apps() {   # what holds the GPU before a stage starts, into $OUT/NAME.gpu.txt: a process left from an earlier stage
               # (an eval-replay after `replay`) can leave the verifier workers no memory for their CUDA context
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader | tee "$OUT/$1.gpu.txt" || true
}
bg_start() {   # NAME COMMAND: COMMAND in the background (its time is not bound by one call's 600 s) -> $T/NAME.log,
               # $T/NAME.done once it has ended
  rm -f $T/$1.done
  setsid nohup bash -c "{ $2; } > $T/$1.log 2>&1; touch $T/$1.done" > /dev/null 2>&1 &
  echo $! > $T/$1.pid
  sleep 5 && tail -3 $T/$1.log
}
bg_wait() {    # NAME SECONDS: until NAME's background command has ended (status 0) or SECONDS pass (status 1)
  local waited=0
  while [ ! -f $T/$1.done ] && [ $waited -lt "$2" ]; do
    if ! kill -0 "$(cat $T/$1.pid)" 2>/dev/null && [ ! -f $T/$1.done ]; then
      echo "error: the background job $1 (pid $(cat $T/$1.pid)) is gone without finishing; its log:" >&2
      tail -20 $T/$1.log >&2
      exit 1
    fi
    sleep 10 && waited=$((waited + 10))
  done
  [ -f $T/$1.done ]
}
serve_kb() {   # bench/serve_convert.py's command over N level-2 problems at BUDGET s each (the SFT model a source);
               # SK_GPU (ids): the GPUs it may use; with one, the Verifier and the Policy replica share it
  local n shares="" prefix=""
  if [ -n "${SK_GPU:-}" ]; then prefix="CUDA_VISIBLE_DEVICES=$SK_GPU " && n=$(echo "$SK_GPU" | tr ',' '\n' | wc -l)
  else n=$(nvidia-smi -L | wc -l); fi
  if [ "$n" -lt 2 ]; then shares="--gpu-shares 0.5,0.5"; fi
  echo "${prefix}python3 bench/serve_convert.py --kernelbench .kernelbench/KernelBench --level 2 --count $1 \
--config configs/serve-gpu.yaml --model $T/models/sft --verifiers 1 $shares --num-cpus 16 --root $T/serve-kb \
--sources ${SK_SOURCES:-lowering,model} --k 4 --budget-s $2 --concurrency ${SK_CONCURRENCY:-2} --max-tokens 1792 \
${SK_OPTS:-}"
}
convert_cmd() {   # N BUDGET SHARD_OPTION OUT: convert-start's bench/convert.py command over N level-2 problems
  echo "${CV_GPU:+CUDA_VISIBLE_DEVICES=$CV_GPU }python3 bench/convert.py --kernelbench .kernelbench/KernelBench \
--levels 2 --count $1 --device cuda --sources lowering,model --model $T/models/sft --k 4 --budget-s $2 \
--timeout-s 120 --max-tokens 1792 ${CV_OPTS:-} $3--out $4"
}
convert_wait_shards() {   # SHARDS SECONDS: convert-wait over convert-start's shards, SECONDS for all of them together;
                          # exits 1 if one is gone without finishing (after the others' files are copied)
  local i left start=$SECONDS ended=1 gone=""
  for i in $(seq 0 $(($1 - 1))); do
    left=$(($2 - (SECONDS - start))) && [ $left -gt 0 ] || left=0
    if ! (bg_wait convert_kb_$i $left); then
      ended=0
      if ! kill -0 "$(cat $T/convert_kb_$i.pid)" 2>/dev/null && [ ! -f $T/convert_kb_$i.done ]; then
        gone="$gone $i"
      fi
    fi
  done
  for i in $(seq 0 $(($1 - 1))); do
    cp $T/convert_kb_$i.cmd "$OUT/convert_kb_$i.cmd"
    if [ -f $T/convert_kb_$i.json ]; then cp $T/convert_kb_$i.json "$OUT/convert_kb_$i.json"; fi
    echo "shard $i/$1: $(grep -cE '^L2 ' $T/convert_kb_$i.log || true) problems done$( \
      [ -f $T/convert_kb_$i.done ] && echo ", finished")"
    (grep -E '^L2 ' $T/convert_kb_$i.log || true) | tail -2
  done
  if [ -n "$gone" ]; then echo "error: shards gone without finishing:$gone" >&2 && exit 1; fi
  if [ $ended = 0 ]; then echo "still running" && return 0; fi
  for i in $(seq 0 $(($1 - 1))); do
    grep -v -e Warning -e warn $T/convert_kb_$i.log | tail -16 > "$OUT/convert_kb_$i.txt"
  done
  python3 bench/convert.py --merge "$OUT/convert_kb.json" $(seq -f "$OUT/convert_kb_%g.json" 0 $(($1 - 1))) 2>&1 \
    | tee "$OUT/convert_kb.txt"
}
sft_unpack() {   # the pieces recv-sft stored -> $T/models/sft
  rm -rf $T/models/model
  cat $(ls $S/sft.* | sort -t. -k2 -n) | tar -xf - -C $T/models && ln -sfn $T/models/model $T/models/sft
  cat $T/models/sft/origin.txt
}

case "$1" in
  recv)
    cp ".gpu$2/piece" "$S/piece.$2" && ls -la $S ;;
  recv-sft)
    cp ".gpu-sft$2/piece" "$S/sft.$2" && ls -la $S ;;
  sft-unpack)   # what setup does with carried pieces (on its own: tests/train/test_sft_transfer.py)
    sft_unpack ;;
  setup)
    cat $(ls $S/piece.* | sort -t. -k2 -n) > $S/wheels.tar
    mkdir -p $S/wheels && tar -xf $S/wheels.tar -C $S/wheels
    python3 -m pip install -q --no-index --no-deps --no-compile --target $T/site $S/wheels/*.whl
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c "import torch, triton, transformers, ray, ortools, pydantic; print('torch', torch.__version__, \
'triton', triton.__version__, 'transformers', transformers.__version__, 'ray', ray.__version__)"
    python3 -c "import ray.serve, fastapi, uvicorn; print('serve: ok')" 2>&1 | tail -1
    if ls $S/sft.* >/dev/null 2>&1; then   # an SFT model carried (recv-sft): no base model, no SFT run needed
      sft_unpack
    else
      $CLI prepare-model smollm2 --out $T/models/smollm2 2>&1 | tail -3
    fi
    if [ -f .gpu-data/sft.parquet ]; then cp .gpu-data/sft.parquet $T/data/sft.parquet && tail -3 .gpu-data/log.txt; fi ;;
  sft-send)
    # the SFT model back to the CPU side, a call at a time (the device tool returns 64 MiB a call): bf16 weights,
    # config and tokenizer, in 15 MiB pieces, 4 a call (K = 1, 2, ...); `bash bench/gpu_pack.sh sft-model` joins
    # them into .gpu-sft1.. for `recv-sft`, so later sessions start RL from this very model
    pack=$T/sft-pack
    if [ "$(cat $pack/done 2>/dev/null)" != "$(readlink -f $T/models/sft)" ]; then   # packed once per model
      rm -rf $pack && mkdir -p $pack/model
      python3 -c "from drtriton_ray.models import load_model; m, t = load_model('$T/models/sft', 'bf16'); \
m.save_pretrained('$pack/model'); t.save_pretrained('$pack/model')"
      echo "$(readlink -f $T/models/sft), sent $(date -u +%FT%TZ)" > $pack/model/origin.txt
      tar -cf $pack/model.tar -C $pack model
      (cd $pack && split -b "${SFT_PIECE:-15M}" -d -a 2 model.tar piece- && sha256sum model.tar > model.sha256)
      readlink -f $T/models/sft > $pack/done
    fi
    ls $pack/piece-* | sed -n "$((4 * $2 - 3)),$((4 * $2))p" | xargs -r cp -t "$OUT"
    cp $pack/model.sha256 "$OUT"
    echo "pieces: $(ls $pack/piece-* | wc -l) in all, $(ls "$OUT" | grep -c piece-) in this call" ;;
  setup-lowering)
    python3 -m pip install -q --no-index --no-deps --no-compile --target $T/site .gpu-low/*.whl
    python3 -c "import torch, triton, ortools, pydantic; print('torch', torch.__version__, 'triton', triton.__version__, \
'ortools', ortools.__version__, torch.cuda.get_device_name())" ;;
  checks)
    python3 -m pytest -q -p no:cacheprovider -m gpu tests/verify/test_gpu_service.py ${CHECKS:-} 2>&1 | tail -15 \
      | tee "$OUT/checks.txt" ;;
  bench-gen)
    python3 bench/hf_generate.py --model $T/models/${GEN_MODEL:-smollm2} --device cuda --dtype bf16 \
      --batches "${GEN_BATCHES:-128}" --max-tokens "${GEN_TOKENS:-256}" --modes "${GEN_MODES:-dynamic,static}" 2>&1 \
      | tail -12 | tee "$OUT/bench_gen.txt" ;;
  noise)
    python3 bench/speed_noise.py --model $T/models/smollm2 --device cuda --out "$OUT/speed_noise.json" \
      ${NOISE_OPTS:-} 2>&1 | tail -20 \
      | tee "$OUT/speed_noise.txt" ;;
  data)
    $CLI sft-data --levels 1 --count "${SFT_COUNT:-800}" --out $T/data/sft.parquet --workers 12 --device cuda \
      2>&1 | tail -5 | tee "$OUT/sft_data.txt" ;;
  eval-base|eval-sft|eval-rl|eval-replay)
    model=${1#eval-}
    [ "$model" = base ] && model=smollm2
    name=$1${EVAL_TAG:+_$EVAL_TAG}   # EVAL_TAG: a second evaluation in the same call keeps its own files
    gpu_apps "$name"
    $EVAL --model "$T/models/$model" --out "$OUT/$name.json" 2>&1 | tail -25 | tee "$OUT/$name.txt"
    if [ -n "$EVAL_SAMPLED" ]; then   # pass@1 of the sampling policy RL trains, beside the greedy one
      $EVAL --model "$T/models/$model" $EVAL_SAMPLED --out "$OUT/${name}_sampled.json" 2>&1 | tail -25 \
        | tee "$OUT/${name}_sampled.txt"
    fi ;;
  sft)
    python3 jobs/sft.py --config configs/sft-gpu-1.yaml --set model=$T/models/smollm2 \
      --set "data=[$T/data/sft.parquet]" --set storage_path=$T/runs ${SFT_SET:-} 2>&1 | tail -3 | tee "$OUT/sft.txt"
    ln -sfn "$(latest $T/runs/sft-smollm2)" $T/models/sft
    cp $T/runs/sft-smollm2/metrics.jsonl "$OUT/sft_metrics.jsonl" ;;
  rl)
    rl_job "${2:-6}" 2>&1 | tee "$OUT/rl.log" | tail -30
    rl_collect ;;
  rl-start)   # the job in the background, so that its budget is not bound by one call's 600 s
    rm -f $T/rl.done $T/rl_gpu_memory.csv
    gpu_apps rl
    setsid nohup bash -c "$(declare -f rl_job); T=$T RL_SET='${RL_SET:-}' rl_job ${2:-9.5} > $T/rl.log 2>&1; \
      touch $T/rl.done" > /dev/null 2>&1 &
    echo $! > $T/rl.pid
    setsid nohup bash -c "$(declare -f gpu_watch); T=$T gpu_watch" > /dev/null 2>&1 &
    sleep 5 && tail -3 $T/rl.log ;;
  rl-wait)    # until the background job ends or SECONDS pass; once it has ended, its files come back as rl's do
    waited=0
    while [ ! -f $T/rl.done ] && [ $waited -lt "${2:-570}" ]; do
      if ! kill -0 "$(cat $T/rl.pid)" 2>/dev/null && [ ! -f $T/rl.done ]; then
        echo "error: the background job (pid $(cat $T/rl.pid)) is gone without finishing; its log:" >&2
        tail -20 $T/rl.log >&2
        exit 1
      fi
      sleep 10 && waited=$((waited + 10))
    done
    tr '\r' '\n' < $T/rl.log | grep -v '^$' | tail -4
    if [ -f $T/rl.done ]; then cp $T/rl.log "$OUT/rl.log" && tail -28 $T/rl.log && rl_collect; else echo "still running"; fi ;;
  replay)
    shift
    settings=()
    for s in "$@"; do settings+=(--setting "$s"); done
    rollouts=$T/runs/gpu-1/rollouts
    if [ -d .gpu-replay ]; then rollouts=.gpu-replay; fi
    rollouts=${REPLAY_ROLLOUTS:-$rollouts}   # e.g. a kept copy of a run's RUN/rollouts
    python3 bench/rl_replay.py --model $T/models/sft --rollouts $rollouts --steps "${REPLAY_STEPS:-1,2}" \
      --probe "${REPLAY_PROBE:-201}" --device cuda --out "$OUT/replay.json" ${REPLAY_SAVE:+--save $T/models/replay} \
      "${settings[@]}" 2>&1 \
      | grep -v -e "Loading weights" -e Warning | tee "$OUT/replay.txt" ;;
  placement)   # two GPUs: RL steps with engine, verifier and trainer sharing GPU 0 (colocated, configs/gpu-1.yaml's
               # shares) or the trainer on a GPU of its own (disaggregated); from the base model (SmolLM2), so the
               # compare is of time per step, not of learning
    mode=${2:-colocated}
    if [ "$mode" = colocated ]; then
      export CUDA_VISIBLE_DEVICES=0
      shares=""
    else
      shares="--set trainer.placement=disaggregated --set trainer.num_gpus=1 --set rollout.num_gpus=0.7"
    fi
    nvidia-smi --query-gpu=index,name --format=csv,noheader
    python3 jobs/train.py --config configs/gpu-1.yaml --set model.path=$T/models/smollm2 \
      --set run.storage_path=$T/runs --set run.name=placement-$mode --set run.max_minutes="${3:-3}" \
      --set run.checkpoint_every=1000 $shares ${RL_SET:-} 2>&1 | tee "$OUT/placement_$mode.log" | tail -8
    cp $T/runs/placement-$mode/metrics.jsonl "$OUT/placement_${mode}_metrics.jsonl"
    python3 bench/rl_placement.py "$mode=$OUT/placement_${mode}_metrics.jsonl" | tee "$OUT/placement_$mode.txt" ;;
  serve-load)  # the conversion service (configs/serve-gpu.yaml) under load with N Verifier replicas (one GPU each)
    python3 bench/serve_load.py --config configs/serve-gpu.yaml --verifiers "${2:-1}" --num-cpus 16 --clients 4 \
      --duration "${3:-90}" --hit-share 0.3 --budget-s 120 --timeout 300 --out "$OUT/serve_load_v${2:-1}.json" \
      2>&1 | grep -v -e Warning -e warn | tail -14 | tee "$OUT/serve_load_v${2:-1}.txt"
    python3 -c "import ray; ray.shutdown()" && (ray stop --force > /dev/null 2>&1 || true) ;;
  serve-kb)    # issue 27 in one call: stops submitting at SK_DEADLINE s, cancels what runs 100 s later, reports
    rm -rf $T/serve-kb && gpu_apps serve-kb
    cmd="$(serve_kb "${2:-10}" "${3:-45}") --deadline-s ${SK_DEADLINE:-420} --grace-s 100 --out $OUT/serve_kb.json"
    echo "$cmd" | tee "$OUT/serve_kb.txt"
    timeout 580 bash -c "$cmd" 2>&1 | grep -v -e Warning -e warn | tail -45 | tee -a "$OUT/serve_kb.txt" || true
    ray stop --force > /dev/null 2>&1 || true ;;
  serve-kb-start)
    rm -rf $T/serve-kb $T/serve_kb.json && gpu_apps serve-kb
    cmd="$(serve_kb "${2:-10}" "${3:-45}") --out $T/serve_kb.json"
    echo "$cmd" > $T/serve_kb.cmd && cat $T/serve_kb.cmd
    bg_start serve_kb "$cmd; ray stop --force > /dev/null 2>&1" ;;
  serve-kb-wait)
    ended=0 && bg_wait serve_kb "${2:-570}" && ended=1
    cp $T/serve_kb.cmd "$OUT/serve_kb.cmd"
    if [ -f $T/serve_kb.json ]; then cp $T/serve_kb.json "$OUT/serve_kb.json"; fi
    if [ $ended = 1 ]; then grep -v -e Warning -e warn $T/serve_kb.log | tail -45 | tee "$OUT/serve_kb.txt"
    else (grep -e "service up" -e "\.py: " $T/serve_kb.log || true) | tail -12 && echo "still running"; fi ;;
  convert-start)  # issue 26: bench/convert.py with the SFT model as a source (no service), in the background
    shards=${CV_SHARDS:-1}
    rm -f $T/convert_kb.json $T/convert_kb_[0-9]*.json $T/convert_kb_[0-9]*.done && gpu_apps convert
    echo "$shards" > $T/convert_kb.shards   # convert-wait's count, whatever CV_SHARDS is then
    if [ "$shards" = 1 ]; then
      convert_cmd "${2:-30}" "${3:-45}" "" $T/convert_kb.json > $T/convert_kb.cmd && cat $T/convert_kb.cmd
      bg_start convert_kb "$(cat $T/convert_kb.cmd)"
    else
      for i in $(seq 0 $((shards - 1))); do
        convert_cmd "${2:-30}" "${3:-45}" "--shard $i/$shards " $T/convert_kb_$i.json > $T/convert_kb_$i.cmd
        cat $T/convert_kb_$i.cmd
        bg_start convert_kb_$i "$(cat $T/convert_kb_$i.cmd)"
      done
    fi ;;
  convert-wait)   # the rows so far every call (convert_kb.json); the table and the log's tail once done
    shards=$(cat $T/convert_kb.shards 2>/dev/null || echo 1)
    if [ "$shards" != 1 ]; then convert_wait_shards "$shards" "${2:-570}"
    else
      ended=0 && bg_wait convert_kb "${2:-570}" && ended=1
      cp $T/convert_kb.cmd "$OUT/convert_kb.cmd"
      if [ -f $T/convert_kb.json ]; then cp $T/convert_kb.json "$OUT/convert_kb.json"; fi
      (grep -E '^L2 ' $T/convert_kb.log || true) | tail -8
      if [ $ended = 1 ]; then grep -v -e Warning -e warn $T/convert_kb.log | tail -16 | tee "$OUT/convert_kb.txt"
      else echo "still running: $(grep -cE '^L2 ' $T/convert_kb.log || true) problems done"; fi
    fi ;;
  lowering)
    levels=${2:-1}
    python3 bench/lowering.py --device cuda --profile paper --levels "$levels" --level2 "${L2:-200}" \
      --level5 "${L5:-100}" --budget-s "${3:-480}" --first "${4:-0}" ${LOWER_OPTS:-} --out "$OUT/lowering_l${levels//,/}${4:+_from$4}.json" \
      2>&1 | tail -60 | tee "$OUT/lowering_l${levels//,/}${4:+_from$4}.txt" ;;
  *)
    echo "usage: $0 recv K | recv-sft K | setup | sft-send K | setup-lowering | checks | bench-gen | noise | data | eval-base | sft | eval-sft | rl [MINUTES] | rl-start [MINUTES] | rl-wait [SECONDS] | eval-rl | replay [SETTING...] | eval-replay | lowering [LEVELS] [BUDGET_S] [FIRST] | placement colocated|disaggregated [MINUTES] | serve-load REPLICAS [SECONDS] | serve-kb [N] [BUDGET_S] | serve-kb-start [N] [BUDGET_S] | serve-kb-wait [SECONDS] | [CV_SHARDS=S] convert-start [N] [BUDGET_S] | convert-wait [SECONDS]" >&2
    exit 2 ;;
esac
