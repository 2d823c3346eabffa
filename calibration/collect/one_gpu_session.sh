#!/usr/bin/env bash
# One GPU, a few minutes: every single-GPU measurement of this kit into one folder.
#
#   GPU=h200-sxm-141gb bash calibration/collect/one_gpu_session.sh OUT_DIR   # GPU: perfmodel's name of it
#
# Writes (each with its own '# source:' provenance line):
#   gemm_llama3-8b_tp1.csv      layer GEMMs of Llama-3 8B on one GPU + the square grid, bf16 and fp8
#   gemm_llama3-70b_tp8.csv     layer GEMMs of one Llama-3 70B tensor-parallel rank (TP 8), bf16 and fp8
#   gemm_llama3-405b_tp8.csv    the same for Llama-3 405B
#   attention_flash.csv         causal SDPA, FlashAttention backend, head dims 64 and 128, 512..32K tokens
#   attention_cudnn.csv         the same through cuDNN's fused attention
#   layer_llama3-8b_s8192.json  torch.profiler trace of one Llama-3 8B layer, fwd+bwd, 8K tokens
#   layer_llama3-70b_tp8_s8192.json  the same for one TP-8 rank of a Llama-3 70B layer
#   memory.csv                  copy, residual add, SwiGLU and fused AdamW bandwidth, 64 MiB..4 GiB
#   sustained_gemm.csv          an 8192^3 bf16 GEMM back to back for 30 s: TFLOP/s and SM clock over time
#   train_steps.csv             whole training steps of an 8-layer Llama-3 8B-shaped model, 13 configurations (runs schema)
#   log.txt                     nvidia-smi and torch versions before and after, every script's stderr
# Each stage has its own time limit, so a slow one leaves the others' files in place.
set -u
out=${1:?usage: one_gpu_session.sh OUT_DIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
log="$out/log.txt"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}

gpu_state() {
    echo "== $1 $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu \
        --format=csv 2>&1
}

stage() {  # stage SECONDS NAME command...
    local limit=$1 name=$2
    shift 2
    echo "== stage $name (limit ${limit}s) $(date -u +%FT%TZ)"
    local t0=$SECONDS
    timeout "$limit" "$@" 2>&1
    echo "== stage $name rc=$? wall=$((SECONDS - t0))s"
}

{
    gpu_state before
    $py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version()); p = torch.cuda.get_device_properties(0); print(p.name, 'sms', p.multi_processor_count, 'mem_gib', round(p.total_memory / 2**30, 2))" 2>&1
    stage 120 gemm-8b $py "$here/gemm_sweep.py" --model llama3-8b --tokens 8192 --tp 1 \
        --dtypes bf16 fp8 --warmup 10 --iters 30 --out "$out/gemm_llama3-8b_tp1.csv"
    stage 60 gemm-70b $py "$here/gemm_sweep.py" --model llama3-70b --tokens 8192 --tp 8 --grid \
        --dtypes bf16 fp8 --warmup 10 --iters 30 --out "$out/gemm_llama3-70b_tp8.csv"
    stage 60 gemm-405b $py "$here/gemm_sweep.py" --model llama3-405b --tokens 8192 --tp 8 --grid \
        --dtypes bf16 fp8 --warmup 10 --iters 30 --out "$out/gemm_llama3-405b_tp8.csv"
    for backend in flash cudnn; do
        stage 60 "attention-$backend" $py "$here/attention_sweep.py" --backend "$backend" \
            --seq-lens 512 1024 2048 4096 8192 16384 32768 --head-dims 64 128 \
            --tokens 16384 --hidden 2048 --out "$out/attention_$backend.csv"
    done
    stage 60 layer-8b $py "$here/profile_layer.py" --model llama3-8b --batch 1 --seq-len 8192 \
        --steps 3 --out "$out/layer_llama3-8b_s8192.json"
    stage 60 layer-70b $py "$here/profile_layer.py" --model llama3-70b --tp 8 --batch 1 --seq-len 8192 \
        --steps 3 --out "$out/layer_llama3-70b_tp8_s8192.json"
    stage 60 memory $py "$here/memory_sweep.py" --out "$out/memory.csv"
    stage 60 sustained $py "$here/sustained_gemm.py" --size 8192 --seconds 30 --out "$out/sustained_gemm.csv"
    stage 180 train-steps $py "$here/train_step_sweep.py" --gpu "${GPU:-h200-sxm-141gb}" --out "$out/train_steps.csv"
    gpu_state after
} 2>&1 | tee "$log"
