#!/usr/bin/env bash
# The figures that need a GPU or 16 cores (issues 41 and 45), in one bounded run, most
# wanted first: a step that runs out of its time is stopped and the next one starts.
#
#   bash benchmarks/gpu_machine/run.sh gpu|curve|all|tiny OUT [WHEELS]
#
# tiny:  the lab workload's CI size on the CPU, in both runtimes: whether the install works.
# gpu:   ResNet-18 training against a bare PyTorch loop, the lab workload (DPFL, 4 clients,
#        Bc = 2, images on disk) in both runtimes, GGC's batched rewards, tests/test_gpu.py.
# curve: a steady DPFL round and the coordinator's CPU per client-round at 4 to 64 clients.
# WHEELS, where given, is a folder from wheels.py, installed first (the lent machine cannot
# reach an index). Each step's output goes to OUT/<step>.log; OUT/results.tgz holds the
# results files the steps wrote. Step limits are in seconds; STEP_SCALE (default 1) scales them.
set -u
part=${1:?gpu, curve, all or tiny}
out=${2:?an output folder}
wheels=${3:-}
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo" || exit 1
mkdir -p "$out"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg

if [ -n "$wheels" ]; then
    site=/tmp/collabfl-site
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "$wheels"/*.whl || exit 1
    export PYTHONPATH="$repo:$site" PATH="$site/bin:$PATH"
fi

started=$(date +%s)
stamp=$(mktemp)
step() {  # step NAME LIMIT_S COMMAND...
    local name=$1 limit=$2
    shift 2
    limit=$(python3 -c "print(round($limit * ${STEP_SCALE:-1}))")
    echo "== $name (at $(($(date +%s) - started)) s, limit $limit s): $*"
    timeout -k 10 "$limit" "$@" > "$out/$name.log" 2>&1
    local code=$?
    tail -n 25 "$out/$name.log"
    echo "== $name: exit $code after $(($(date +%s) - started)) s"
}

python3 -c "import torch, flwr, collabfl; print('torch', torch.__version__, 'cuda',
torch.cuda.is_available(), 'flwr', flwr.__version__)" || exit 1
nvidia-smi -L 2>/dev/null
echo "cores: $(nproc)"

if [ "$part" = tiny ]; then
    step gpu_workload_tiny 300 python3 benchmarks/gpu_workload.py --tiny --name gpu_workload-tiny
fi
if [ "$part" = gpu ] || [ "$part" = all ]; then
    step train_throughput 90 python3 benchmarks/train_throughput.py --device cuda --amp bf16 \
        --channels-last --name train_throughput-cuda-bf16
    step gpu_workload 200 python3 benchmarks/gpu_workload.py --device cuda --amp bf16 \
        --channels-last --name gpu_workload-cuda-resnet18
    step ggc_batching 60 python3 benchmarks/ggc_batching.py --devices cuda --repeats 20 \
        --search-repeats 5 --name ggc_batching-cuda
    step test_gpu 200 python3 -m pytest -o addopts="" -p no:cacheprovider -rs -q \
        -n 4 tests/test_gpu.py
fi
if [ "$part" = curve ] || [ "$part" = all ]; then
    step federation_round 300 python3 benchmarks/federation_round.py --clients 4,16,32,64 \
        --rounds 4 --no-floor --name federation_round-curve
    step coordinator_cpu 240 python3 benchmarks/coordinator_cpu.py --clients 16,64 --rounds 4 \
        --name coordinator_cpu-curve
fi

find benchmarks/results -newer "$stamp" -type f -print0 | tar -czf "$out/results.tgz" --null -T -
echo "results: $(tar -tzf "$out/results.tgz" | tr '\n' ' ')"
