#!/usr/bin/env bash
# Waits for the background runs of a bench script on the GPU machine, then sends back what they wrote so far:
#   bash bench/gpu_wait.sh SCRIPT WORK SECONDS   # e.g. bench/realworld.py /tmp/realworld 560
# waits until no process runs SCRIPT or SECONDS have passed, copies WORK's JSON and logs to $OUT, says which.
set -u
deadline=$(( $(date +%s) + $3 ))
run="[${1:0:1}]${1:1}"  # matches the runs' command lines, not this script's own (which names SCRIPT too)
while pgrep -f "$run" > /dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 10; done
cp "$2"/*.json "$2"/*.log "$OUT"/ 2> /dev/null
if pgrep -f "$run" > /dev/null; then echo "still running"; else echo "done"; fi
