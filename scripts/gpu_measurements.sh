#!/usr/bin/env bash
# The attacks and step timings on a CUDA GPU that docs/measured-results.md ("On a GPU") reports.
#
#   scripts/gpu_measurements.sh OUTDIR [SCALE]
#
# Runs, one at a time, each under its own `timeout` so that one slow run leaves the others
# their time: the default LeNet attack (srht) in float64 and float32, APRIL on vit_small (unsketched, and
# through srht b/d = 0.5, which it refuses), the deep victims' `ig`
# recipe on resnet18 (photos 0-2, unsketched and srht b/d = 0.01), SAFL's sizes (resnet101 224
# px through srht b = 4e5, also with a tenth of the TV and with --bn train, and unsketched;
# vit_b_16 224 px through srht b = 8e4), benchmarks/deep_step.py --device cuda and batched
# restarts (lenet, srht, Adam, 200 steps, R = 1 and 8, float32 and float64).  Every run folder
# lands in OUTDIR/runs, packed after each run into OUTDIR/runs.tgz; the log is OUTDIR/log.txt.
# On an H200 its steps took about 10.5 minutes in all (their times in log.txt, over two calls)
# without the two resnet101 variants, which are limited to 100 s each; ONLY=REGEX runs the
# steps whose names match (e.g. ONLY='resnet18|lenet'; ONLY='srht4e5$' the first resnet101
# step alone).
# SCALE (default 1) multiplies every time limit: SCALE=0.05 checks the script on a CPU in
# a few minutes (DEVICE=cpu).  Needs only the repository on PYTHONPATH (python3 -m
# leakattack) and torch.
case "${1:-}" in -h|--help) sed -n "2,/^[^#]/p" "$0" | sed "/^[^#]/d; s/^# \{0,1\}//"; exit 0;; esac
set -u
out=${1:?usage: scripts/gpu_measurements.sh OUTDIR [SCALE]}
scale=${2:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
dev=${DEVICE:-cuda}
runs=$out/runs
mkdir -p "$runs"
log=$out/log.txt

secs() { $py -c "import sys; print(max(5, round(float(sys.argv[1]) * float(sys.argv[2]))))" "$1" "$scale"; }

step() {  # step NAME LIMIT_S COMMAND...: run COMMAND under timeout LIMIT_S * SCALE + 60 s, log it, pack the runs
    local name=$1 limit; limit=$(secs "$2"); shift 2
    [[ $name =~ ${ONLY:-.} ]] || return 0
    echo "=== $name ($(date -u +%T), limit ${limit}s + 60s): $*" | tee -a "$log"
    local t0=$SECONDS
    timeout $((limit + 60)) "$@" 2>&1 | tail -n 25 | tee -a "$log"
    echo "=== $name: rc ${PIPESTATUS[0]}, $((SECONDS - t0)) s" | tee -a "$log"
    tar czf "$out/runs.tgz" -C "$out" runs
}

attack() {  # attack NAME LIMIT_S ARGS...: leakattack run ARGS with the time limit, into runs/NAME
    local name=$1 raw=$2 limit; limit=$(secs "$2"); shift 2
    step "$name" "$raw" $py -m leakattack run --device "$dev" --no-lpips --quiet --out "$runs/$name" \
        --time-limit "${limit}s" "$@"
}

{
    date -u
    nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
    $py -c "import torch, platform; print('torch', torch.__version__, 'python', platform.python_version(),
cuda := torch.cuda.is_available(), torch.cuda.get_device_name(0) if cuda else '')"
} 2>&1 | tee -a "$log"

attack lenet-srht-float64 60 --model lenet --sketch srht --dtype float64
attack lenet-srht-float32 60 --model lenet --sketch srht --dtype float32
attack april-vit_small 30 --model vit_small --attack april --sketch none
attack april-vit_small-srht05 30 --model vit_small --attack april --sketch srht --sketch-ratio 0.5  # exits 2
for i in 0 1 2; do
    attack "resnet18-none-photo$i" 45 --model resnet18 --sketch none --image-index "$i"
    attack "resnet18-srht001-photo$i" 45 --model resnet18 --sketch srht --sketch-ratio 0.01 --image-index "$i"
done
attack resnet101-224-srht4e5 100 --model resnet101 --image-size 224 --sketch srht --sketch-dim 400000
attack resnet101-224-srht4e5-tv0.002 100 --model resnet101 --image-size 224 --sketch srht --sketch-dim 400000 \
    --tv 0.002
attack resnet101-224-srht4e5-bntrain 100 --model resnet101 --image-size 224 --sketch srht --sketch-dim 400000 \
    --bn train
attack resnet101-224-none 60 --model resnet101 --image-size 224 --sketch none
step deep_step 30 $py "$root/benchmarks/deep_step.py" --device "$dev" --models resnet18 vit_small resnet50 \
    --threads all --rounds 2 --steps 5
for dtype in float32 float64; do
    for r in 1 8; do
        step "restarts-$r-$dtype" 30 $py -m leakattack run --device "$dev" --no-lpips --quiet \
            --out "$runs/restarts-$r-$dtype" --model lenet --sketch srht --optimizer adam --iterations 200 \
            --restarts "$r" --dtype "$dtype"
    done
done
attack vit_b_16-224-srht8e4 45 --model vit_b_16 --image-size 224 --weight-init xavier --sketch srht \
    --sketch-dim 80000
date -u | tee -a "$log"
