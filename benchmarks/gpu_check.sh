#!/usr/bin/env bash
# A GPU check in one command (README, "Performance"): the tests marked `cuda`, then
# benchmarks/throughput.py (MiniLM, then SmolLM2) and benchmarks/memory.py with --device cuda, then a BERT-base-sized
# model over 20,000 windows of 128 tokens (benchmarks/bert_base_scale.py), then one table.
#
#   bash benchmarks/gpu_check.sh               # GPU 0, about 5-8 minutes on a data-centre GPU
#   bash benchmarks/gpu_check.sh --gpu 1       # another GPU (sets CUDA_VISIBLE_DEVICES)
#   bash benchmarks/gpu_check.sh --quick       # fewer windows, for a first look
#   make gpu-check ARGS=--quick                # the same through the Makefile's .venv
#
# Each step has a time limit, so that the whole check ends within 10 minutes; a step over its
# limit is reported as TIMEOUT. Logs of every step are kept in --logs DIR (default: a new
# temporary folder, printed). Exits 2 before anything runs when torch sees no CUDA GPU,
# 1 when a step failed, 0 when every step passed (read the table for the targets' PASS/FAIL).
set -uo pipefail

PYTHON="${PYTHON:-python}"
GPU=""
QUICK=0
LOGS=""
usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || { echo "error: --gpu takes a GPU index (0, 1, ...), got '${2:-}'" >&2; exit 2; }; GPU="$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --logs) [ $# -ge 2 ] || { echo "error: --logs takes a folder" >&2; exit 2; }; LOGS="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown option '$1'; options: --gpu N, --quick, --logs DIR, --help" >&2; exit 2 ;;
  esac
done
[ -n "$GPU" ] && export CUDA_VISIBLE_DEVICES="$GPU"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"

if ! GPU_NAME="$("$PYTHON" -c 'import torch, sys
build = torch.version.cuda or "none, a CPU-only build"
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} (CUDA build: {build}) sees no CUDA GPU")
print(torch.cuda.get_device_name(0) + ", torch " + torch.__version__ + ", CUDA " + torch.version.cuda)' 2>&1)"; then
  echo "error: no CUDA GPU for this check: ${GPU_NAME##*$'\n'}. Run it on a machine with an NVIDIA GPU and its driver, with a CUDA build of torch (pip install torch --index-url https://download.pytorch.org/whl/cu124); CUDA_VISIBLE_DEVICES='${CUDA_VISIBLE_DEVICES:-}'." >&2
  exit 2
fi
LOGS="${LOGS:-$(mktemp -d -t attnsim-gpu-check.XXXXXX)}"
mkdir -p "$LOGS" || { echo "error: cannot create the log folder $LOGS" >&2; exit 2; }
if [ "$QUICK" = 1 ]; then WINDOWS=512; SMALL=128; LARGE=512; BERT=2000; SMOL=128; else WINDOWS=2048; SMALL=256; LARGE=2048; BERT=20000; SMOL=512; fi
echo "GPU check on $GPU_NAME; logs in $LOGS"

STATUS=0
declare -a ROWS
step() {  # step NAME LIMIT_S COMMAND...: run COMMAND with a time limit, its output to $LOGS/NAME.log
  local name="$1" limit="$2"; shift 2
  local start=$SECONDS
  echo "== $name (at most ${limit} s): $*"
  (cd "$ROOT" && timeout "$limit" "$@") >"$LOGS/$name.log" 2>&1
  local code=$?
  local spent=$((SECONDS - start))
  local result=ok
  if [ $code = 124 ]; then result=TIMEOUT; STATUS=1; elif [ $code != 0 ]; then result="FAILED (exit $code)"; STATUS=1; fi
  echo "   $result in ${spent} s"
  ROWS+=("$name|$result|${spent} s")
}

step tests 120 "$PYTHON" -m pytest -q -m cuda -p no:cacheprovider tests/capture/test_cuda.py
step throughput 150 "$PYTHON" benchmarks/throughput.py --device cuda --windows "$WINDOWS" --rounds 3 --no-full-run
step smollm2 120 "$PYTHON" benchmarks/throughput.py --device cuda --model smollm2 --windows "$SMOL" --batch-size 32 --rounds 2 --no-full-run --no-profile
step memory 90 "$PYTHON" benchmarks/memory.py --device cuda --small "$SMALL" --large "$LARGE"
step bert_base 150 "$PYTHON" benchmarks/bert_base_scale.py --device cuda --windows "$BERT" --experiments csm

line() { grep -h -m1 -E "$1" "$LOGS/$2.log" 2>/dev/null | sed 's/|/\\|/g' || true; }
tests_summary="$(tail -n 1 "$LOGS/tests.log" 2>/dev/null | sed 's/=//g; s/^ *//; s/ *$//')"
paper="$(grep -h -E '^\| all-MiniLM-L6-v2 \| paper \|' "$LOGS/throughput.log" 2>/dev/null | awk -F' *[|] *' '{printf "paper %s -> %s samples/s, ratio %s", $6, $7, $8}')"
csm="$(grep -h -E '^\| all-MiniLM-L6-v2 \| csm \|' "$LOGS/throughput.log" 2>/dev/null | awk -F' *[|] *' '{printf "csm %s -> %s samples/s, ratio %s", $6, $7, $8}')"
smol="$(grep -h -E '^\| SmolLM2[^|]* \| (paper|csm) \|' "$LOGS/smollm2.log" 2>/dev/null | awk -F' *[|] *' '{printf "%s%s %s -> %s samples/s, ratio %s", sep, $3, $6, $7, $8; sep="; "}')"
memory="$(line '^target peak-memory ratio' memory)"
gpu_memory="$(line '^peak GPU memory ratio' memory)"
bert="$(grep -h -E '^\| csm \| cuda' "$LOGS/bert_base.log" 2>/dev/null | awk -F' *[|] *' '{printf "csm over %s windows: predict %s s, run %s s, peak GPU %s MiB, %s", $4, $5, $6, $9, $10}')"

echo
echo "| step | result | time | figures |"
echo "| --- | --- | --- | --- |"
for row in "${ROWS[@]}"; do
  IFS='|' read -r name result spent <<<"$row"
  case "$name" in
    tests) figures="$tests_summary" ;;
    throughput) figures="$paper; $csm (plain -> attnsim, $WINDOWS windows)" ;;
    smollm2) figures="$smol (SmolLM2-135M, $SMOL windows of 128 tokens)" ;;
    memory) figures="$memory; $gpu_memory" ;;
    bert_base) figures="$bert" ;;
  esac
  echo "| $name | $result | $spent | $figures |"
done
echo
echo "logs: $LOGS"
exit $STATUS
