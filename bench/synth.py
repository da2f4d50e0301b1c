"""Synthesis throughput: programs/s on one core, per level, validation off and on, plus coverage.

    python bench/synth.py                         # paper profile, levels 1 2 5 20; validation on CPU
    python bench/synth.py --device cuda           # validation of paper-size programs on a GPU
    python bench/synth.py --profile small --count 200

One process, one CP-SAT worker and one torch thread: the rates are per core. With validation on,
each program runs once in PyTorch on --device (paper-size programs hold up to 2^32 elements, so on
a CPU they are validated only with --validate-profile small unless you pass --validate-profile paper).
"""

from __future__ import annotations

import argparse
import time

import torch
from rich.console import Console
from rich.table import Table

from drtriton_ray.synth.config import SynthConfig
from drtriton_ray.synth.sampler import Sampler


def run(level: int, profile: str, validate: bool, count: int, seed: int, device: str):
    sampler = Sampler(SynthConfig(level=level, profile=profile, validate=validate, device=device), seed)
    t0 = time.perf_counter()
    records = [sampler.sample(i) for i in range(count)]
    return records, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description="synthesis throughput per core")
    ap.add_argument("--profile", default="paper")
    ap.add_argument(
        "--validate-profile",
        default=None,
        help="profile for the validation-on rows (default: --profile on CUDA, small on CPU)",
    )
    ap.add_argument("--levels", default="1,2,5,20")
    ap.add_argument("--count", type=int, default=0, help="programs per row (default: 134/100/60/20 by level)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-coverage", action="store_true", help="no coverage table (it needs scipy)")
    args = ap.parse_args()
    if not args.skip_coverage:
        from drtriton_ray.synth.coverage import coverage_report
    torch.set_num_threads(1)
    vprofile = args.validate_profile or (args.profile if args.device.startswith("cuda") else "small")
    default_count = {1: 134, 2: 100, 5: 60, 20: 20}
    table = Table(title=f"synthesis throughput, one core (validation on {args.device})")
    for col in ("level", "profile", "validation", "programs", "seconds", "programs/s/core", "attempts/program"):
        table.add_column(col, justify="right")
    coverage = Table(title="coverage of the validation-off rows")
    for col in ("level", "ops covered", "pairs covered", "chi2 p (uniform ops)", "fan-out share", "multi-output share"):
        coverage.add_column(col, justify="right")
    for level in [int(x) for x in args.levels.split(",")]:
        count = args.count or default_count.get(level, 20)
        for validate, profile in ((False, args.profile), (True, vprofile)):
            records, dt = run(level, profile, validate, count, args.seed, args.device)
            table.add_row(
                str(level),
                profile,
                "on" if validate else "off",
                str(count),
                f"{dt:.1f}",
                f"{count / dt:.2f}",
                f"{sum(r.attempts for r in records) / count:.2f}",
            )
            if not validate and not args.skip_coverage:
                names = Sampler(SynthConfig(level=level, profile=profile), args.seed).names
                rep = coverage_report([r.ops for r in records], names, level, [r.fan_out for r in records])
                p = rep["op_uniformity"]["p_value"]
                coverage.add_row(
                    str(level),
                    f"{rep['ops_covered']}/{rep['operators']}",
                    f"{rep['pairs_covered']}/{rep['pairs']}" if "pairs" in rep else "-",
                    "-" if level < 3 else f"{p:.3f}",
                    f"{rep['fan_out_share']:.0%}",
                    f"{sum(r.num_outputs > 1 for r in records) / count:.0%}",
                )
    console = Console(width=140)
    console.print(table)
    if not args.skip_coverage:
        console.print(coverage)


if __name__ == "__main__":
    main()
