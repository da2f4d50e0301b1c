"""Ray job: synthesize the curriculum's program datasets with sampler actors.

    python jobs/synth.py                       # starts a local Ray itself
    ray job submit --working-dir . -- python jobs/synth.py --levels 1,2,5 --count 200

Writes one Parquet file per level to --out-dir and prints a summary table (programs, seconds,
programs/s, operator coverage, fan-out share, chi-square p-value against uniform draws).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import ray
from rich.console import Console
from rich.table import Table

from drtriton_ray.synth.actors import synthesize_ray
from drtriton_ray.synth.config import PROFILES, SynthConfig
from drtriton_ray.synth.coverage import coverage_report
from drtriton_ray.synth.dataset import write_parquet


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="1,2,5", help="comma-separated levels (default: the RL curriculum's 1,2,5)")
    ap.add_argument("--count", type=int, default=134, help="programs per level (default: twice the registry)")
    ap.add_argument("--profile", default="small", choices=sorted(PROFILES))
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=0, help="sampler actors (default: the cluster's CPUs)")
    ap.add_argument("--out-dir", default="out/synth")
    args = ap.parse_args(argv)
    try:
        levels = [int(x) for x in args.levels.split(",")]
        if args.count <= 0 or any(level < 1 for level in levels):
            raise ValueError
    except ValueError:
        ap.error(f"--levels must be positive integers and --count positive, got {args.levels!r} / {args.count}")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    ray.init(address=os.environ.get("RAY_ADDRESS"), ignore_reinit_error=True, log_to_driver=False)
    workers = args.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    table = Table(title=f"synthesis: profile {args.profile}, dtype {args.dtype}, {workers} sampler actors")
    for col in ("level", "programs", "seconds", "programs/s", "ops covered", "pairs covered", "fan-out", "uniform p"):
        table.add_column(col, justify="right")
    for level in levels:
        cfg = SynthConfig(level=level, profile=args.profile, dtype=args.dtype)
        t0 = time.perf_counter()
        records = synthesize_ray(cfg, args.seed, list(range(args.count)), workers)
        dt = time.perf_counter() - t0
        write_parquet(records, out_dir / f"level{level}.parquet")
        rep = coverage_report([r.ops for r in records], cfg.op_space(), level, [r.fan_out for r in records])
        p = rep["op_uniformity"]["p_value"]
        table.add_row(
            str(level),
            str(len(records)),
            f"{dt:.1f}",
            f"{len(records) / dt:.1f}",
            f"{rep['ops_covered']}/{rep['operators']}",
            f"{rep['pairs_covered']}/{rep['pairs']}" if "pairs" in rep else "-",
            f"{100 * rep['fan_out_share']:.0f}%",
            "-" if level < 3 or p is None else f"{p:.3f}",
        )
    Console(width=140).print(table)
    print(f"datasets in {out_dir}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
