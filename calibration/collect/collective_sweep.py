"""torch.distributed collective sweep printed in nccl-tests' format (``perfmodel calibrate
--nccl-tests``).

Launch one process per GPU with torchrun; rank 0 prints (and with ``--out`` writes) one
nccl-tests block per collective: the ``#  Rank`` lines of every rank (host names give the node
count), the size table with out-of-place and in-place columns, and the ``# Avg bus bandwidth``
trailer. Sizes, bandwidths and busbw factors follow nccl-tests (doc/PERFORMANCE.md):
algbw = S / t (GB = 1e9 B), busbw = algbw x 2(n-1)/n (all_reduce), (n-1)/n (all_gather,
reduce_scatter, all_to_all), 1 (send_recv); S is the total buffer for the gather/scatter kinds.

    # one node, 8 GPUs
    torchrun --nproc-per-node 8 calibration/collect/collective_sweep.py --out nccl_1node.txt
    # 2 nodes (run on each node; same rendezvous endpoint)
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        calibration/collect/collective_sweep.py --out nccl_2node.txt
    # no GPU: gloo on the CPU, 2 local processes
    python calibration/collect/collective_sweep.py --spawn 2 --max-bytes 64K --out nccl_cpu.txt

Time per call is the mean over ``--iters`` calls after ``--warmup`` calls (as nccl-tests),
then the maximum over ranks. ``--check`` (default) fills known values, runs each variant once
and counts wrong elements (``#wrong``); reductions are checked only where the sum is exact in
the dtype. torch has no out-of-place all_reduce and no in-place all_to_all / send_recv: for
those both column groups time the same call.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect_common import (  # noqa: E402
    COLLECTIVES,
    NCCL_TYPE_BYTES,
    NcclRow,
    RankInfo,
    format_nccl_tests,
    host_name,
    nccl_tests_counts,
    provenance_line,
)

# Largest n for which a sum of n ones is exact in the dtype (bf16: 8-bit significand).
_EXACT_SUM = {"bfloat16": 256, "half": 2048, "float": 2**24, "double": 2**53, "int32": 2**31,
              "int64": 2**63, "int8": 127, "uint8": 255}


def parse_size(text: str) -> int:
    """``8``, ``64K``, ``128M``, ``16G`` -> bytes (powers of 1024, as nccl-tests -b/-e)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)B?\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"size {text!r}: expected e.g. 8, 64K, 128M, 16G")
    return int(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " ")


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    out, s = [], max(min_bytes, 1)
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out


def _value(r: int) -> int:
    """Fill value of rank r (small integers: exact in every dtype)."""
    return (r % 64) + 1


def _cases(torch, dist, op: str, total: int, count: int, rank: int, n: int, tdt, device):
    """{variant: (prepare, call, result, expected-per-chunk or None)} for one size.

    ``expected`` is a 1-D tensor with one value per chunk of ``result`` (or a scalar tensor)."""
    T = lambda x: torch.tensor(x, dtype=tdt, device=device)  # noqa: E731
    chunks = T([_value(j) for j in range(n)])
    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if op == "all_reduce":
        buf = torch.empty(total, dtype=tdt, device=device)
        case = (lambda: buf.fill_(1), lambda: dist.all_reduce(buf), buf, T([n]))
        return {"oop": case, "ip": case}
    if op == "all_gather":
        inp = torch.empty(count, dtype=tdt, device=device)
        out = torch.empty(total, dtype=tdt, device=device)
        view = out.narrow(0, rank * count, count)
        mine = _value(rank)
        return {"oop": (lambda: (inp.fill_(mine), out.zero_()), lambda: ag(out, inp), out, chunks),
                "ip": (lambda: (out.zero_(), view.fill_(mine)), lambda: ag(out, view), out, chunks)}
    if op == "reduce_scatter":
        inp = torch.empty(total, dtype=tdt, device=device)
        out = torch.empty(count, dtype=tdt, device=device)
        view = inp.narrow(0, rank * count, count)
        return {"oop": (lambda: inp.fill_(1), lambda: rs(out, inp), out, T([n])),
                "ip": (lambda: inp.fill_(1), lambda: rs(view, inp), view, T([n]))}
    if op == "all_to_all":
        inp = torch.empty(total, dtype=tdt, device=device)
        out = torch.empty(total, dtype=tdt, device=device)
        mine = _value(rank)
        case = (lambda: inp.fill_(mine), lambda: dist.all_to_all_single(out, inp), out, chunks)
        return {"oop": case, "ip": case}
    if op == "send_recv":  # nccl-tests sendrecv: send to rank+1, receive from rank-1
        send = torch.empty(total, dtype=tdt, device=device)
        recv = torch.empty(total, dtype=tdt, device=device)
        nxt, prv = (rank + 1) % n, (rank - 1) % n

        def call():
            ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
        case = (lambda: send.fill_(_value(rank)), call, recv,
                T([_value(prv)]))
        return {"oop": case, "ip": case}
    raise ValueError(f"unknown collective {op!r}")


def _wrong(torch, result, expected) -> int:
    """Elements of ``result`` differing from ``expected`` (one value per equal chunk)."""
    got = result.view(expected.numel(), -1) if expected.numel() > 1 else result.view(1, -1)
    return int((got != expected.view(-1, 1)).sum().item())


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


ONE_RANK = ("collective_sweep: one rank moves nothing over a link (and perfmodel's parser refuses a one-rank "
            "all_gather table); run 2 or more: torchrun --nproc-per-node N, or --spawn N")


def run_sweep(args: argparse.Namespace) -> str | None:
    """Run every op over every size in an initialised process group; rank 0 returns the text."""
    import torch
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    if n < 2:
        raise SystemExit(ONE_RANK)
    backend = dist.get_backend()
    device = (torch.device("cuda", torch.cuda.current_device()) if backend == "nccl"
              else torch.device("cpu"))
    tdt = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16,
           "double": torch.float64, "int32": torch.int32, "int64": torch.int64,
           "int8": torch.int8, "uint8": torch.uint8}[args.dtype]
    typesize = NCCL_TYPE_BYTES[args.dtype]
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        me = RankInfo(rank, host_name(), os.getpid(), device.index,
                      f"0x{getattr(props, 'pci_bus_id', 0):02x}", props.name)
    else:
        me = RankInfo(rank, host_name(), os.getpid(), 0, "0x00", f"cpu ({backend})")
    infos: list = [None] * n
    dist.all_gather_object(infos, me)
    nccl_version = None
    if backend == "nccl":
        v = torch.cuda.nccl.version()
        nccl_version = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    source = provenance_line("collective_sweep.py", torch=torch.__version__, backend=backend,
                             world_size=n, dtype=args.dtype,
                             timing="mean over iters, max over ranks")
    text: list[str] = []
    for op in args.ops:
        if op == "send_recv" and n < 2:
            if rank == 0:
                print("skip send_recv: needs 2 or more ranks", file=sys.stderr)
            continue
        rows = []
        for size in sizes(args.min_bytes, args.max_bytes, args.step_factor):
            total, count = nccl_tests_counts(op, size, typesize, n)
            if total == 0:
                continue
            cases = _cases(torch, dist, op, total, count, rank, n, tdt, device)
            exact = op not in ("all_reduce", "reduce_scatter") or n <= _EXACT_SUM[args.dtype]
            times, wrong = {}, {}
            for variant, (prepare, call, result, expected) in cases.items():
                if args.check and exact:
                    prepare()
                    call()
                    _sync(torch, device)
                    wrong[variant] = _wrong(torch, result, expected)
                for _ in range(args.warmup):
                    call()
                _sync(torch, device)
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(args.iters):
                    call()
                _sync(torch, device)
                times[variant] = (time.perf_counter() - t0) / args.iters * 1e6
            agg = torch.tensor([times["oop"], times["ip"]], dtype=torch.float64, device=device)
            dist.all_reduce(agg, op=dist.ReduceOp.MAX)
            bad = torch.tensor([wrong.get("oop", 0), wrong.get("ip", 0)], dtype=torch.int64,
                               device=device)
            dist.all_reduce(bad)
            checked = args.check and exact
            rows.append(NcclRow(total * typesize, count, float(agg[0]), float(agg[1]),
                                int(bad[0]) if checked else None,
                                int(bad[1]) if checked else None))
            del cases
        if rank == 0:
            block = format_nccl_tests(op, rows, ranks=infos, dtype=args.dtype,
                                      warmup_iters=args.warmup, iters=args.iters,
                                      nccl_version=nccl_version, source=source)
            print(block, flush=True)
            text.append(block)
    if rank != 0:
        return None
    out = "\n".join(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(out, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    return out


def _init_from_env(backend: str) -> None:
    """Process group from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*)."""
    import torch
    import torch.distributed as dist

    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise SystemExit("collective_sweep.py: --backend nccl needs CUDA GPUs (none visible); use --backend gloo "
                             "or --spawn N for a CPU dry run")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    dist.init_process_group(backend)


def _spawned(rank: int, world_size: int, port: int, argv: list[str]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    main(argv, spawned=True)


def spawn_local(world_size: int, argv: list[str]) -> None:
    """``world_size`` CPU processes on this machine with gloo (tests, dry runs)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_spawned, args=(world_size, port, [*argv, "--backend", "gloo"]), nprocs=world_size,
             join=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", nargs="+", choices=COLLECTIVES, default=list(COLLECTIVES))
    p.add_argument("--min-bytes", "-b", type=parse_size, default=parse_size("8"))
    p.add_argument("--max-bytes", "-e", type=parse_size, default=parse_size("1G"))
    p.add_argument("--step-factor", "-f", type=int, default=2)
    p.add_argument("--warmup", "-w", type=int, default=5, help="Untimed calls per size.")
    p.add_argument("--iters", "-n", type=int, default=20, help="Timed calls per size (mean).")
    p.add_argument("--dtype", "-d", choices=sorted(NCCL_TYPE_BYTES), default="float",
                   help="nccl-tests type name (float is nccl-tests' default).")
    p.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto",
                   help="auto: nccl when a GPU is visible, else gloo.")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                   help="Count wrong elements once per size and variant.")
    p.add_argument("--out", type=Path, default=None, help="Also write rank 0's output here.")
    p.add_argument("--spawn", type=int, default=0,
                   help="Start this many local gloo processes instead of using torchrun.")
    return p.parse_args(argv)


def main(argv: list[str] | None = None, spawned: bool = False) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.spawn == 1 or args.spawn < 0:
        raise SystemExit(ONE_RANK if args.spawn == 1 else f"collective_sweep: --spawn must be 2 or more (got {args.spawn})")
    if args.spawn and not spawned:
        spawn_local(args.spawn, argv)  # the children ignore --spawn (spawned=True)
        return
    import torch.distributed as dist

    _init_from_env(args.backend)
    try:
        run_sweep(args)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
