"""Profile one Llama-style decoder layer (forward + backward) -> Chrome trace for
``perfmodel calibrate --trace``.

The layer is plain torch.nn: RMSNorm, grouped-query attention through
``scaled_dot_product_attention`` (causal), RMSNorm, SwiGLU MLP, residuals. ``torch.profiler``
runs with a schedule (wait 1, warm-up 1, active ``--steps``), so the trace holds
``ProfilerStep#N`` annotations (perfmodel reads their durations as step times) and, on a GPU,
the kernels it classifies into gemm / attention / nccl / memory / other.

    python calibration/collect/profile_layer.py --model llama3-8b --seq-len 4096 --out layer.json
    python calibration/collect/profile_layer.py --device cpu --quick --out layer_cpu.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect_common import provenance_line  # noqa: E402
from gemm_sweep import MODELS, LayerShape  # noqa: E402


def build_layer(torch, shape: LayerShape, *, tp: int = 1):
    """A decoder layer with ``shape``'s sizes (heads and ffn divided by ``tp``, as one
    tensor-parallel rank holds them; no communication is modelled here)."""
    nn, F = torch.nn, torch.nn.functional
    d_head = shape.hidden // shape.n_heads
    n_q, n_kv, ffn = shape.n_heads // tp, max(1, shape.n_kv_heads // tp), shape.ffn // tp

    class RMSNorm(nn.Module):
        def __init__(self, dim: int, eps: float = 1e-5):
            super().__init__()
            self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

        def forward(self, x):
            var = x.float().pow(2).mean(-1, keepdim=True)
            return (x.float() * torch.rsqrt(var + self.eps)).type_as(x) * self.weight

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm, self.mlp_norm = RMSNorm(shape.hidden), RMSNorm(shape.hidden)
            self.qkv = nn.Linear(shape.hidden, (n_q + 2 * n_kv) * d_head, bias=False)
            self.out = nn.Linear(n_q * d_head, shape.hidden, bias=False)
            self.gate_up = nn.Linear(shape.hidden, 2 * ffn, bias=False)
            self.down = nn.Linear(ffn, shape.hidden, bias=False)

        def forward(self, x):  # x: (batch, seq, hidden)
            b, s, _ = x.shape
            q, k, v = self.qkv(self.attn_norm(x)).split(
                [n_q * d_head, n_kv * d_head, n_kv * d_head], dim=-1)
            q = q.view(b, s, n_q, d_head).transpose(1, 2)
            k = k.view(b, s, n_kv, d_head).transpose(1, 2).repeat_interleave(n_q // n_kv, dim=1)
            v = v.view(b, s, n_kv, d_head).transpose(1, 2).repeat_interleave(n_q // n_kv, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(a.transpose(1, 2).reshape(b, s, n_q * d_head))
            gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    return Layer()


def run(args: argparse.Namespace) -> Path:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("profile_layer: --device cuda but torch sees no GPU (use --device cpu)")
    if args.quick:
        args.model, args.batch, args.seq_len, args.steps = "tiny", 1, 64, 2
    dev = torch.device(args.device)
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    layer = build_layer(torch, MODELS[args.model], tp=args.tp).to(dev, tdt)
    x = torch.randn(args.batch, args.seq_len, MODELS[args.model].hidden, device=dev, dtype=tdt,
                    requires_grad=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def export(prof) -> None:
        prof.export_chrome_trace(str(out))

    wait, warmup = 1, 1
    with profile(activities=activities, record_shapes=True,
                 schedule=schedule(wait=wait, warmup=warmup, active=args.steps, repeat=1),
                 on_trace_ready=export) as prof:
        for _ in range(wait + warmup + args.steps):
            with record_function("layer_fwd"):
                y = layer(x)
            with record_function("layer_bwd"):
                y.float().pow(2).mean().backward()
            layer.zero_grad(set_to_none=True)
            x.grad = None
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            prof.step()
    _annotate(out, provenance_line(
        "profile_layer.py", device=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        torch=torch.__version__, model=args.model, batch=args.batch, seq_len=args.seq_len,
        tp=args.tp, dtype=args.dtype, active_steps=args.steps))
    print(f"wrote {out}", file=sys.stderr)
    return out


def _annotate(path: Path, source: str) -> None:
    """Record provenance in the trace's top level (Chrome ignores unknown keys)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["perfmodelSource"] = source.removeprefix("# source: ")
    path.write_text(json.dumps(doc), encoding="utf-8")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("layer_trace.json"),
                   help="Chrome-trace JSON to write.")
    p.add_argument("--model", choices=list(MODELS), default="llama3-8b")
    p.add_argument("--batch", type=int, default=1, help="Micro-batch size (sequences).")
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--tp", type=int, default=1, help="Tensor-parallel degree of the shard.")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--steps", type=int, default=3, help="Profiled (active) steps.")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu.")
    p.add_argument("--quick", action="store_true",
                   help="Dry run in seconds (tests, CPU): the 'tiny' layer, 64 tokens, 2 steps.")
    return p.parse_args(argv)


if __name__ == "__main__":
    run(parse_args())
