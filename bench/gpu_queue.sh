#!/usr/bin/env bash
# A queue of bench commands run one after another in the background on the device tool's GPU machine, so that a
# session's experiments follow each other with no idle gap (the machine goes back 30 s after a call) and each call
# after the first only waits and collects. After `bash bench/gpu_pipeline.sh setup-lowering` (carrying .gpu-low):
#   bash bench/gpu_queue.sh start bench/queues/llm-h200.txt # one command a line; $Q is each step's output folder
#   bash bench/gpu_queue.sh wait 560                       # up to 560 s; every step's output so far comes back in
#                                                          # $OUT/queue.tgz (here: tar xzf .../queue.tgz -C DIR)
#   bash bench/gpu_queue.sh status                         # which steps ended (exit status), which one runs
# A step that fails does not stop the queue. Lines starting with # and blank lines are skipped. A step's output
# folder is /tmp/queue/NN (NN its line's place in the queue), its log /tmp/queue/NN.log.
set -u
WORK=/tmp/queue
case "$1" in
start)
  mkdir -p $WORK
  grep -v -e '^\s*#' -e '^\s*$' "$2" > $WORK/steps.txt
  # setsid: the queue outlives the call that started it
  setsid nohup bash -c '
    n=0
    while IFS= read -r step; do
      n=$((n + 1)); q=$(printf "%s/%02d" "$0" "$n"); mkdir -p "$q"
      echo "$step" > "$q.step"; date +%s > "$q.start"
      Q="$q" bash -c "$step" > "$q.log" 2>&1
      echo $? > "$q.rc"
    done < "$0/steps.txt"
    touch "$0/done"' $WORK > $WORK/queue.log 2>&1 &
  echo "queued $(wc -l < $WORK/steps.txt) steps";;
wait)
  deadline=$(( $(date +%s) + ${2:-560} ))
  while [ ! -e $WORK/done ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
  # one archive: the device tool brings back a limited count of files, and answers folders hold one per program
  tar czf "$OUT/queue.tgz" -C $WORK --exclude=__pycache__ . 2> /dev/null
  bash "$0" status;;
status)
  for s in $WORK/*.step; do
    [ -e "$s" ] || continue
    n=${s%.step}
    if [ -e "$n.rc" ]; then state="exit $(cat "$n.rc")"; else state="running $(( $(date +%s) - $(cat "$n.start") )) s"; fi
    echo "== $(basename "$n") [$state] $(cat "$s")"
    tail -n "${TAIL:-8}" "$n.log"
  done
  [ -e $WORK/done ] && echo "queue done" || echo "queue still running";;
esac
