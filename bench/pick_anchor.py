"""Pick the anchor's strength (`algo.ref_kl`) from a replay (bench/rl_replay.py --out): the largest tried value whose
updates' gradient norms stay finite and within `--max-ratio` of the same setting replayed without the anchor, so that
the correct answers' pull still makes a fair part of each update. Prints the value, for `--set algo.ref_kl=...`.

Why: on the CPU testbed (bench/rl_learns.py --bystander, docs/results/rl-cpu-testbed.md), once the policy had
moved, an update with the anchor at ref_kl 1 had gradient norm 1.7 against 0.02-0.03 without it, and the clip (1.0)
then left the update to the anchor. Its size depends on the temperature and on how unlikely the sampled tokens are,
so it is measured on the run's own answers before the run, in seconds, rather than guessed.

A setting's baseline is the same overrides with `algo.ref_kl=0` where the replay has it (needed when --config sets
an anchor, as configs/gpu-1.yaml does), else the same overrides without `algo.ref_kl` ("" for the config as it is).

    python bench/rl_replay.py ... --setting "algo.ref_kl=0" --setting "algo.ref_kl=0.01" --setting "algo.ref_kl=0.1" \
        --out r.json
    python bench/pick_anchor.py r.json [--max-ratio 2]      # prints e.g. 0.1; exit 1 when none qualifies"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

CONFIG = "(config)"  # rl_replay's name for the setting "" (the config as it is)


def split_anchor(setting: str) -> tuple[float | None, str]:
    """(the ref_kl a replay setting sets or None, the name of the same setting without it)."""
    items = setting.split()
    values = [item.partition("=")[2] for item in items if item.startswith("algo.ref_kl=")]
    rest = " ".join(item for item in items if not item.startswith("algo.ref_kl="))
    return (float(values[-1]) if values else None), rest or CONFIG


def ratios(base: list[dict], updates: list[dict]) -> list[float]:
    """Per replayed step, the update's gradient norm over the baseline's; inf where it is not finite; steps either
    skipped (no gradient) are left out."""
    out = []
    for b, u in zip(base, updates):
        if b.get("grad_norm") is None or u.get("grad_norm") is None:
            continue
        norm = u["grad_norm"]
        out.append(norm / b["grad_norm"] if math.isfinite(norm) and b["grad_norm"] > 0 else math.inf)
    return out


def pick(results: dict, max_ratio: float) -> tuple[float | None, dict[float, float]]:
    """(the chosen ref_kl or None, each tried value's largest gradient-norm ratio to its baseline: the replay's
    setting with the same overrides but the anchor)."""
    worst = {}
    parsed = {name: split_anchor(name) for name in results if name != "start"}
    for name, (k, rest) in parsed.items():
        if k is None or k <= 0:
            continue
        base = next((n for n, (k0, r0) in parsed.items() if k0 == 0 and r0 == rest), rest)
        if base not in results:
            raise ValueError(
                f"setting {name!r} has no baseline {base!r} in the replay (the same overrides with "
                'algo.ref_kl=0, or without algo.ref_kl: "" for the config as it is)'
            )
        steps = ratios(results[base]["updates"], results[name]["updates"])
        worst[k] = max(steps) if steps else math.inf
    if not worst:
        raise ValueError("the replay tried no algo.ref_kl > 0")
    fine = [k for k, w in worst.items() if w <= max_ratio]
    return (max(fine) if fine else None), worst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("replay", help="bench/rl_replay.py --out JSON: settings with algo.ref_kl and the same without")
    ap.add_argument("--max-ratio", type=float, default=2.0, help="largest gradient norm allowed, over the baseline's")
    args = ap.parse_args(argv)
    try:
        chosen, worst = pick(json.loads(Path(args.replay).read_text()), args.max_ratio)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"error: {args.replay}: {e}")
    for k, w in sorted(worst.items()):
        print(f"ref_kl {k:g}: gradient norm up to {w:.2f}x the baseline's", file=sys.stderr)
    if chosen is None:
        print(f"error: no ref_kl kept the gradient norm within {args.max_ratio:g}x", file=sys.stderr)
        return 1
    print(f"{chosen:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
