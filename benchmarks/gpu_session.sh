#!/usr/bin/env bash
# One GPU session's device checks, run on a lent GPU machine (the device tool's nvidia-h200, a
# bare image with torch; nothing can be downloaded there) as one prepared command:
#
#   1. pytest -m gpu: every training path on CUDA computes what it computes on the CPU;
#   2. issue 45: the deployment-scale DP curve's ε 8 rows and their no-DP baselines for seeds
#      1 and 2 (seed 0 is in docs/figures/privacy-deployment.json), benchmarks/deployment_dp.py;
#   3. issue 44: CAM++ fine-tuned on synth-voices (1,000 training users of the 1,250-speaker set,
#      50 a round): the pretrained start (0 rounds), FedHide and FedUV on the residual adapter and
#      FedHide on the whole network (--train-pretrained, batch-norm statistics frozen), 3 seeds.
#
# What it needs beside the working tree (each an ignored folder named in the tool's carry):
#   .whl/  the trainer's dependencies the image lacks, as cp312 wheels (galois, dp-accounting,
#          dm-tree, espeakng-loader, typer, platformdirs, soundfile, soxr, cffi, pycparser);
#   .gpu/  campplus-92f29b94e694.pt.xz (xz of what uvtrain pretrained fetch campplus), checked by SHA-256 on use.
# Results: $OUT/results.tgz (run folders without checkpoints, logs), $OUT/pytest-gpu.log.
#
#   bash benchmarks/gpu_session.sh 520     # seconds the whole script may take
set -u
budget=${1:-520}
start=$SECONDS
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/sdk:$PWD/trainer:$PWD/export:$PWD/deploy
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 UVTRAIN_DATA=/tmp/uvdata
mkdir -p "$UVTRAIN_DATA/pretrained" results
xz -dc .gpu/campplus-92f29b94e694.pt.xz > "$UVTRAIN_DATA/pretrained/campplus-92f29b94e694.pt"
nvidia-smi -L
python3 -c "import torch, numpy; print('torch', torch.__version__, 'numpy', numpy.__version__)"

# 1. pytest -m gpu, beside everything else (SKIP_TESTS=1: not again)
tests=
if [ -z "${SKIP_TESTS:-}" ]; then
    timeout -s KILL $((budget - 60)) python3 -m pytest -m gpu -n 0 -p no:cacheprovider -q \
        tests/trainer/test_gpu.py > "$OUT/pytest-gpu.log" 2>&1 &
    tests=$!
fi

# the 1,250-speaker synth-voices both experiments train on (built on the 16 cores)
data=$(python3 -c "
from uvtrain.data.registry import build_dataset
print(build_dataset('synth-voices', seed=0, speakers=1250))" 2> results/build.log | tail -1)
echo "data $data after $((SECONDS - start)) s"
left=$((budget - (SECONDS - start) - 40))

# 2. issue 45: seeds 1 and 2 of the ε 8 (M = 1,000) rows and their baselines
python3 benchmarks/deployment_dp.py --train --device cuda --parallel 8 --deadline $left \
    --runs results/deployment-dp \
    --only uv-off-m100-s1,uv-off-m100-s2,uv-e8-sim1000-s1,uv-e8-sim1000-s2,hide-off-m100-s1,hide-off-m100-s2,hide-e8-sim1000-s1,hide-e8-sim1000-s2 \
    > results/deployment-dp.log 2>&1 &
dp=$!

# 3. issue 44: CAM++ fine-tuning
campplus() {  # NAME, then uvtrain run's options
    local name=$1; shift
    timeout -s KILL $left python3 -c "import sys; from uvtrain.entry import main; sys.exit(main())" \
        run --dataset "$data" --pretrained campplus --clients 1000 --fraction 0.05 \
        --crop-seconds 1.6 --eval-every 20 --device cuda --out "results/campplus/$name" "$@" \
        > "results/campplus-$name.log" 2>&1
}
mkdir -p results/campplus
# CAMPPLUS="NAME ...": these runs alone (a rerun of those a first session lost)
want() { [ -z "${CAMPPLUS:-}" ] || [[ " $CAMPPLUS " == *" $1 "* ]]; }
want start && campplus start --method fedhide --rounds 0 --seed 0 &
for seed in 0 1 2; do
    want hide-adapter-s$seed && campplus hide-adapter-s$seed --method fedhide --rounds 60 --seed $seed &
    want uv-adapter-s$seed && campplus uv-adapter-s$seed --method feduv --rounds 60 --seed $seed &
    want hide-full-s$seed && campplus hide-full-s$seed --method fedhide --rounds 60 --train-pretrained --seed $seed &
done
if [ -n "$tests" ]; then
    wait $tests
    echo "pytest -m gpu: exit $? after $((SECONDS - start)) s"
    tail -3 "$OUT/pytest-gpu.log"
fi
wait
echo "all done after $((SECONDS - start)) s"
cat results/deployment-dp.log
for f in results/campplus-*.log; do echo "== $f"; tr '\r' '\n' < "$f" | grep -E "EER|Error|error" | tail -4; done
tar czf "$OUT/results.tgz" --exclude='*.pt' --exclude='*.npz' results
