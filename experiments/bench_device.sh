#!/usr/bin/env bash
# One device run for BENCHMARKS.md, in one go, under 8 minutes on one GPU:
#   1. environment (nvidia-smi, versions, load);
#   2. training-step throughput with MFU (XLA cost-analysis FLOPs x steps/s over the device's
#      peak; H200 peaks in experiments/bench_train.py PEAK_TFLOPS) at batch 256 and 512, and the
#      throughput-vs-batch points (128, 256, 512) in the same process;
#   3. the Lanczos benchmark at paper size (experiments/bench_hessian.py, both problems: float32 Lanczos
#      through curvature.hessian_extremes vs the paper's 20-step power iteration in PyTorch on the same GPU);
#   4. the paper dry run (python -m experiments.reproduce --variant paper --dry-run), when
#      experiments/reproduce.py has --dry-run;
#   5. the scaling points that fit (experiments/bench_scaling.py --preset gpu, tables lanczos, dense, flow).
# Everything goes into one markdown file (default: $OUT/bench_device.md if $OUT is set, else
# bench_device.md), each step with its command, wall time, exit status and output tail.
#
#   experiments/bench_device.sh                # on the GPU machine (refused, exit 2, on a CPU backend)
#   experiments/bench_device.sh --cpu-smoke    # the same steps at shrunk sizes on CPU (~1-2 min quiet;
#                                              # its per-step limits are generous for a loaded machine)
#   experiments/bench_device.sh --out FILE.md [--budget SECONDS]
#
# Each step has its own timeout (a step that overruns is recorded as such and the next one runs);
# the script's exit status is 0 only if every step succeeded.
set -uo pipefail
cd "$(dirname "$0")/.."

MODE=gpu
MD="${OUT:-.}/bench_device.md"
BUDGET=470
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-smoke) MODE=smoke ;;
    --out) MD="$2"; shift ;;
    --budget) BUDGET="$2"; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (expected --cpu-smoke, --out FILE, --budget SECONDS)" >&2; exit 2 ;;
  esac
  shift
done
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL=3
if [ "$MODE" = smoke ]; then
  export JAX_PLATFORMS=cpu
fi

# The backend decides what the run can report: MFU is achieved FLOP/s over an accelerator's peak, so a
# CPU backend (a jax without the CUDA or TPU runtime, or JAX_PLATFORMS=cpu) reports none. The device
# mode refuses to run on one; --cpu-smoke runs on it and says that it reports no MFU.
if ! BACKEND_LINE="$(python -c 'import jax; d = jax.devices()[0]; print(jax.default_backend(), len(jax.devices()), d.device_kind)' 2>&1 | tail -n 1)"; then
  echo "error: cannot start JAX: $BACKEND_LINE" >&2
  exit 2
fi
read -r BACKEND NDEV DEVICE_KIND <<< "$BACKEND_LINE"
echo "[bench_device] JAX backend: $BACKEND ($NDEV x $DEVICE_KIND)" >&2
if [ "$BACKEND" = cpu ]; then
  MFU_NOTE="MFU: not reported (CPU backend: MFU needs an accelerator's peak FLOP/s)."
  if [ "$MODE" != smoke ]; then
    echo "error: the JAX backend is cpu, so this device run would report no MFU and no device timings." \
         "On a GPU install the CUDA build (pip install -e \".[cuda]\"), on a TPU VM requirements-tpu.txt," \
         "and check that JAX_PLATFORMS does not force cpu; or pass --cpu-smoke for the CPU dry run." >&2
    exit 2
  fi
else
  MFU_NOTE="MFU: reported against the peak of $DEVICE_KIND (experiments/bench_train.py PEAK_TFLOPS)."
fi
WORK="$(mktemp -d)"
mkdir -p "$(dirname "$MD")"
T_START=$(date +%s)
FAILED=0

{
  echo "# Device benchmarks (experiments/bench_device.sh, mode: $MODE)"
  echo
  echo "Run $(date -u '+%Y-%m-%d %H:%M UTC'); 1-minute load average $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?') at the start."
  echo
  echo "JAX backend: $BACKEND ($NDEV x $DEVICE_KIND). $MFU_NOTE"
  echo
} > "$MD"

# step [--brief] NAME TIMEOUT_S CMD...: run CMD with a timeout, record command, time, status and the
# output tail (with --brief only its last 3 lines on success: the step's own table is included after it).
step() {
  local tail_n=60
  if [ "$1" = --brief ]; then tail_n=3; shift; fi
  local name="$1" limit="$2"; shift 2
  local left=$(( BUDGET - ($(date +%s) - T_START) ))
  if [ "$left" -lt 20 ]; then
    printf '## %s\n\nskipped: the %ss budget is spent.\n\n' "$name" "$BUDGET" >> "$MD"
    FAILED=1; return
  fi
  [ "$limit" -gt "$left" ] && limit="$left"
  local t0=$(date +%s) rc
  timeout --kill-after=10 "$limit" "$@" > "$WORK/out.txt" 2>&1
  rc=$?
  local dt=$(( $(date +%s) - t0 ))
  [ "$rc" -ne 0 ] && FAILED=1
  {
    printf '## %s\n\n`%s`\n\n' "$name" "$*"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "status: TIMED OUT after ${limit}s"; else echo "status: exit $rc after ${dt}s"; fi
    echo
    echo '```'
    if [ "$rc" -ne 0 ]; then tail_n=60; fi
    tail -n "$tail_n" "$WORK/out.txt"
    echo '```'
    echo
  } >> "$MD"
  echo "[bench_device] $name: rc=$rc in ${dt}s" >&2
}

# include FILE: append a markdown file written by a step (tables with their own headers).
include() {
  if [ -f "$1" ]; then sed 's/^# /### /' "$1" >> "$MD"; echo >> "$MD"; fi
}

if [ "$MODE" = smoke ]; then
  TRAIN_ARGS=(--batches 2 --steps 1 --repeats 1 --warmup 1 --no-torch)
  HESS_ARGS=(--small --reference lanczos --repeats 1 --warmup 1)
  DRY_ARGS=(--variant tiny --dry-run --only "${SMOKE_DRY_ONLY:-whitening}")   # one experiment: plumbing only
  SCALE_ARGS=(--preset smoke --tables lanczos,dense,flow --repeats 1)
  LIMITS=(400 400 400 600)   # generous: the smoke checks the plumbing, and a shared CPU may be slow
  [ "$BUDGET" = 470 ] && BUDGET=1800
else
  TRAIN_ARGS=(--batches 128,256,512 --steps 20 --repeats 3 --warmup 1 --no-torch)
  HESS_ARGS=(--reference lanczos --repeats 5 --warmup 1 --threads 16)
  DRY_ARGS=(--variant paper --dry-run)
  SCALE_ARGS=(--preset gpu --tables lanczos,dense,flow --repeats 3)
  LIMITS=(150 120 150 110)
fi

step environment 30 python -c "
from experiments.benchmarks import harness
import subprocess, shutil
print(harness.environment_line())
if shutil.which('nvidia-smi'):
    print(subprocess.run(['nvidia-smi', '--query-gpu=name,memory.total,clocks.max.sm,power.limit', '--format=csv'],
                         capture_output=True, text=True).stdout)
"
step --brief train "${LIMITS[0]}" python -m experiments.bench_train "${TRAIN_ARGS[@]}" --force --out "$WORK/train.md"
include "$WORK/train.md"
# float32 matmuls at full precision: the accelerator default (TF32) would cost the 1e-4 accuracy criterion
step --brief lanczos "${LIMITS[1]}" env JAX_DEFAULT_MATMUL_PRECISION=highest python -m experiments.bench_hessian "${HESS_ARGS[@]}" --force --out "$WORK/hessian.md"
include "$WORK/hessian.md"
if python -m experiments.reproduce --help 2>/dev/null | grep -q -- "--dry-run"; then
  step dry_run "${LIMITS[2]}" python -m experiments.reproduce "${DRY_ARGS[@]}" --out "$WORK/dry_run"
else
  printf '## dry_run\n\nskipped: experiments/reproduce.py has no --dry-run.\n\n' >> "$MD"
fi
SCALE_MD="$(dirname "$MD")/bench_device_scaling.md"   # beside $MD, so its figure links resolve
step --brief scaling "${LIMITS[3]}" python -m experiments.bench_scaling "${SCALE_ARGS[@]}" --force --out "$SCALE_MD"
include "$SCALE_MD"

{
  echo "Total wall time $(( $(date +%s) - T_START ))s (budget ${BUDGET}s); 1-minute load average $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?') at the end."
  [ "$FAILED" -ne 0 ] && echo && echo "**At least one step failed or timed out; see its status above.**"
} >> "$MD"
rm -rf "$WORK"
echo "wrote $MD" >&2
exit "$FAILED"
