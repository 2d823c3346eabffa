"""Refit the shipped default profile: ``python calibration/refit.py``.

1. Starts from the per-GPU attention efficiencies measured in kernels.csv (FlashAttention-2
   fwd+bwd, causal, head dim 128, 16K tokens: A100 189 of 312 TFLOP/s) and the collective fit
   (calibration/collectives_fit.yaml, from nccl-tests logs) when present;
2. fits the runs parameters to calibration/data/runs/calibration_runs.csv (perfmodel calibrate --runs),
   jointly with the 16 ZeRO-3 vs ZeRO++ pairs (calibration/data/runs/zeropp_pairs.csv) for DeepSpeed;
3. writes calibration/default_profile.yaml, which perfmodel applies when no --calibration is given.
Leave-one-source-out numbers: ``python calibration/refit.py --loso``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from perfmodel.calibrate.command import run_calibration  # noqa: E402
from perfmodel.calibrate.fit_runs import leave_one_source_out  # noqa: E402
from perfmodel.calibration_profile import Calibration  # noqa: E402

KERNEL_ATTENTION = {
    # FlashAttention-2 fwd+bwd, causal, hdim 128, seq 16K (kernels.csv): 189/312 on A100
    "a100-sxm4-80gb": {"attention_efficiency_max": 0.61},
    "a100-sxm4-40gb": {"attention_efficiency_max": 0.61},
    "a100-sxm4": {"attention_efficiency_max": 0.61},
    "a800-sxm4-80gb": {"attention_efficiency_max": 0.61},
}


def base_calibration() -> Calibration:
    data: dict = {"gpus": {k: dict(v) for k, v in KERNEL_ATTENTION.items()}}
    frag = HERE / "collectives_fit.yaml"
    if frag.is_file():
        coll = yaml.safe_load(frag.read_text()) or {}
        data["constants"] = coll.get("constants", {})
        data["networks"] = coll.get("networks", {})
        for name, over in (coll.get("gpus") or {}).items():
            data["gpus"].setdefault(name, {}).update(over)
        data["provenance"] = {"collectives": str(frag.relative_to(HERE.parent))}
    return Calibration(**data)


def main(argv: list[str] | None = None) -> None:
    import argparse

    import pandas as pd

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loso", action="store_true", help="print the leave-one-source-out MAPE per source; "
                    "writes nothing")
    args = ap.parse_args(argv)
    runs = HERE / "data" / "runs" / "calibration_runs.csv"
    if args.loso:
        table = leave_one_source_out(pd.read_csv(runs), base_calibration(),
                                     pairs=pd.read_csv(HERE / "data" / "runs" / "zeropp_pairs.csv"))
        print(table.round(1).to_string())
        print(f"macro-averaged LOSO MAPE: {table.loso_mape_pct.mean():.1f}%")
        return
    run_calibration(gpu="h100-sxm5-80gb", out=HERE / "default_profile.yaml", runs=[runs], base=base_calibration(),
                    pairs=HERE / "data" / "runs" / "zeropp_pairs.csv")


if __name__ == "__main__":
    main()
