"""Whole training steps of a Llama-style model on one GPU -> a runs CSV (the runs schema of
``perfmodel validate``): measured step times to hold the model's end-to-end prediction to.

Plain PyTorch, eager: token embedding, ``--layers`` decoder layers (``profile_layer.build_layer``:
RMSNorm, grouped-query SDPA attention, SwiGLU), final RMSNorm, untied LM head, cross-entropy;
``torch.autocast`` bf16 over fp32 parameters; fused AdamW; ``torch.utils.checkpoint`` around every
layer for ``full`` recompute. Each configuration (sequence length, micro-batch, micro-batches per
step, recompute) runs ``--warmup`` steps, then ``--steps`` timed ones (wall clock between CUDA
synchronisations, so host overhead counts as it does in training); the median is written, with the
peak allocated memory in ``notes``. A configuration that runs out of memory is skipped and said so.

    python calibration/collect/train_step_sweep.py --gpu h200-sxm-141gb --out steps.csv
    python calibration/collect/train_step_sweep.py --gpu h200-sxm-141gb --device cpu --quick --out steps_cpu.csv
    perfmodel validate steps.csv --out pred.csv

``--gpu`` is perfmodel's catalog name of the GPU the sweep runs on (the CSV's ``gpu`` column).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect_common import provenance_line, write_rows_csv  # noqa: E402
from gemm_sweep import MODELS  # noqa: E402
from profile_layer import build_layer  # noqa: E402

RUNS_COLUMNS = [
    "run_id", "source", "model_name", "n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads",
    "vocab_size", "seq_len", "mlp", "tied_embeddings", "n_experts", "moe_top_k", "gpu", "n_gpus", "gpus_per_node",
    "scale_out_gbit_per_s_per_node", "network", "tp", "pp", "dp", "cp", "ep", "vpp", "sp", "zero_stage", "zeropp",
    "micro_batch", "global_batch", "recompute", "precision", "framework", "iteration_time_s",
    "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "hfu", "target", "derived_fields", "notes",
]
"""The runs schema's columns, in its order (shared/data/README.md, 'Schema')."""

# (seq_len, micro_batch, micro-batches per step, recompute)
DEFAULT_CONFIGS = (
    (2048, 1, 1, "none"), (2048, 4, 1, "none"), (2048, 8, 1, "none"), (2048, 8, 1, "full"),
    (4096, 1, 1, "none"), (4096, 4, 1, "none"), (4096, 2, 4, "none"),
    (8192, 1, 1, "none"), (8192, 2, 1, "none"), (8192, 2, 1, "full"), (8192, 4, 1, "full"),
    (16384, 1, 1, "none"), (16384, 1, 1, "full"),
)
QUICK_CONFIGS = ((64, 1, 1, "none"), (64, 2, 2, "full"))


def build_model(torch, shape, n_layers: int):
    nn = torch.nn
    layers = nn.ModuleList(build_layer(torch, shape) for _ in range(n_layers))
    norm = build_layer(torch, shape).attn_norm  # an RMSNorm of width h
    return nn.ModuleDict({"emb": nn.Embedding(shape.vocab, shape.hidden), "layers": layers, "norm": norm,
                          "head": nn.Linear(shape.hidden, shape.vocab, bias=False)})


def run_config(torch, model, opt, shape, dev, seq: int, mb: int, n_micro: int, recompute: str,
               warmup: int, steps: int) -> tuple[float, float]:
    """(median seconds per optimizer step, peak allocated GiB) of one configuration."""
    F = torch.nn.functional
    from torch.utils.checkpoint import checkpoint

    tokens = torch.randint(0, shape.vocab, (n_micro, mb, seq + 1), device=dev)
    cuda = dev.type == "cuda"

    def step():
        for i in range(n_micro):
            inp, tgt = tokens[i, :, :-1], tokens[i, :, 1:]
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                x = model["emb"](inp)
                for layer in model["layers"]:
                    x = checkpoint(layer, x, use_reentrant=False) if recompute == "full" else layer(x)
                logits = model["head"](model["norm"](x))
                loss = F.cross_entropy(logits.float().view(-1, shape.vocab), tgt.reshape(-1)) / n_micro
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    if cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize(dev)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated(dev) / 2**30 if cuda else float("nan")
    return statistics.median(times), peak


def run(args: argparse.Namespace) -> list[dict]:
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("train_step_sweep: --device cuda but torch sees no GPU (use --device cpu)")
    configs = QUICK_CONFIGS if args.quick else DEFAULT_CONFIGS
    if args.quick:
        args.model, args.layers, args.warmup, args.steps = "tiny", 2, 1, 2
    dev = torch.device(args.device)
    shape = MODELS[args.model]
    torch.manual_seed(0)
    with dev:  # parameters made (and initialised) on the GPU: billions of them initialise slowly on a CPU
        model = build_model(torch, shape, args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=dev.type == "cuda")
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    stamp = provenance_line("train_step_sweep.py", device=device_name, torch=torch.__version__, cuda=torch.version.cuda,
                            model=args.model, layers=args.layers, warmup=args.warmup, steps=args.steps)
    rows: list[dict] = []
    for i, (seq, mb, n_micro, recompute) in enumerate(configs, start=1):
        try:
            t, peak = run_config(torch, model, opt, shape, dev, seq, mb, n_micro, recompute, args.warmup, args.steps)
        except torch.cuda.OutOfMemoryError:
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            print(f"skip seq {seq} mb {mb} x{n_micro} {recompute}: out of memory", file=sys.stderr)
            continue
        gb = mb * n_micro
        tps = gb * seq / t
        rows.append({
            "run_id": f"{args.run_prefix}-{i:03d}",
            "source": f"calibration/collect/train_step_sweep.py on one {device_name} [{stamp.split('utc=')[1].split(';')[0]}]",
            "model_name": f"{args.model} shape, {args.layers} layers", "n_layers": args.layers,
            "hidden_size": shape.hidden, "ffn_hidden_size": shape.ffn, "n_heads": shape.n_heads,
            "n_kv_heads": shape.n_kv_heads, "vocab_size": shape.vocab, "seq_len": seq, "mlp": "swiglu",
            "tied_embeddings": 0, "gpu": args.gpu, "n_gpus": 1, "gpus_per_node": 1, "network": "single-node",
            "tp": 1, "pp": 1, "dp": 1, "cp": 1, "ep": 1, "vpp": 1, "sp": 0, "zero_stage": 0, "micro_batch": mb,
            "global_batch": gb, "recompute": recompute, "precision": "bf16", "framework": "pytorch",
            "iteration_time_s": f"{t:.6f}", "tokens_per_s_per_gpu": f"{tps:.2f}", "target": "tokens_per_s_per_gpu",
            "derived_fields": "src: tokens_per_s_per_gpu = global_batch*seq_len/iteration_time_s/n_gpus",
            "notes": (f"plain PyTorch eager: autocast bf16 over fp32 parameters, SDPA (backend chosen by PyTorch), "
                      f"fused AdamW{', torch.utils.checkpoint per layer' if recompute == 'full' else ''}; median of "
                      f"{args.steps} steps after {args.warmup}; peak_allocated_gib={peak:.2f}"),
        })
        print(f"seq {seq:6d} mb {mb:2d} x{n_micro} {recompute:>4}: {t * 1e3:9.1f} ms/step {tps:10.0f} tok/s "
              f"peak {peak:6.1f} GiB", file=sys.stderr)
    out = write_rows_csv(rows, RUNS_COLUMNS, args.out, stamp)
    print(f"wrote {out} ({len(rows)} rows)", file=sys.stderr)
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu", required=True, help="perfmodel's catalog name of this GPU (the runs CSV's gpu column).")
    p.add_argument("--out", type=Path, default=Path("train_steps.csv"), help="Runs CSV to write.")
    p.add_argument("--model", choices=list(MODELS), default="llama3-8b", help="Layer shape (gemm_sweep.MODELS).")
    p.add_argument("--layers", type=int, default=8, help="Decoder layers (the shape's full depth rarely fits one GPU).")
    p.add_argument("--run-prefix", default="local-steps", help="run_id prefix.")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu.")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="Seconds on a CPU: the tiny shape, 2 layers, 2 configurations.")
    return p.parse_args(argv)


if __name__ == "__main__":
    run(parse_args())
