#!/usr/bin/env bash
# One GPU session (the device tool's machine: torch + triton, no Ray/pydantic/OR-Tools, no network).
# Carry .wheels/ (pure wheels for Python 3.12: ortools, pydantic, ...; bench/gpu_pack.sh makes such wheels); the verifier's
# own runs (tests -m gpu, verify, timing) need none of them.
#   bash bench/gpu_session.sh tests     # verify/exploit/fault suites on CUDA, GPU-only tests included
#   bash bench/gpu_session.sh gputests  # only the gpu-marked verifier tests (no wheels needed)
#   bash bench/gpu_session.sh verify    # verifier throughput (fresh vs pool of 1 vs pool of 4) + timing spreads
#   bash bench/gpu_session.sh timing    # timing methods compared in-process (spread of the median over repeats)
#   bash bench/gpu_session.sh bench     # verifier throughput + timing spread, lowering under the verifier
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
if ls .wheels/*.whl >/dev/null 2>&1; then
  python -m pip install -q --no-deps --no-index --target /tmp/deps .wheels/*.whl >/dev/null 2>&1
fi
export PYTHONPATH=/tmp/deps:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
case "${1:-tests}" in
  tests)
    python -m pytest -q -p no:cacheprovider tests/verify tests/exploits tests/faults 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -40 ;;
  gputests)
    python -m pytest -q -p no:cacheprovider -m gpu tests/verify/test_gpu_timing.py tests/exploits/test_gpu_exploits.py \
      tests/faults/test_faults.py 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -15 ;;
  verify)
    python bench/verify_throughput.py --device cuda -n "${N:-24}" --json "$OUT/verify_throughput.json" 2>&1 \
      | tee "$OUT/verify_throughput_gpu.txt" ;;
  timing)
    python bench/verify_throughput.py --device cuda --timing-study --json "$OUT/timing_study.json" 2>&1 \
      | tee "$OUT/timing_study.txt" ;;
  bench)
    python bench/verify_throughput.py --device cuda -n "${N:-32}" --json "$OUT/verify_throughput.json" 2>&1 \
      | tee "$OUT/verify_throughput_gpu.txt"
    python bench/lowering.py --device cuda --profile "${PROFILE:-small}" --level2 "${L2:-40}" --level5 "${L5:-20}" \
      2>&1 | tee "$OUT/lowering_gpu.txt" | tail -60 ;;
esac
