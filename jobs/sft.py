"""Ray job: SFT warm start of a policy model (drtriton_ray/train/sft.py).

    python jobs/sft.py --config my-sft.yaml --set num_workers=2
    ray job submit --working-dir . -- python jobs/sft.py --config my-sft.yaml --set use_gpu=true

my-sft.yaml holds SFTConfig fields (drtriton_ray/train/sft.py), e.g. model, data, run_name, max_steps.

Rerunning with the same run_name and storage_path resumes from the latest checkpoint. Prints the
final loss and the checkpoint folder (a Hugging Face model folder)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import ray
import yaml
from pydantic import ValidationError

from drtriton_ray.overrides import OverrideError, add_set_argument, load_yaml_with_overrides
from drtriton_ray.train.metrics import read_metrics
from drtriton_ray.train.sft import SFTConfig, run_sft


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="YAML file with SFTConfig fields")
    add_set_argument(ap)
    args = ap.parse_args(argv)
    try:
        cfg = SFTConfig(**load_yaml_with_overrides(args.config, args.set))
    except OverrideError as e:  # names the --set item (or the config file) itself
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (OSError, yaml.YAMLError, ValidationError, ValueError) as e:
        print(f"error: {args.config}: {e}", file=sys.stderr)
        return 2
    ray.init(address=os.environ.get("RAY_ADDRESS"), ignore_reinit_error=True, log_to_driver=False)
    result = run_sft(cfg)
    rows = read_metrics(Path(cfg.storage_path).absolute() / cfg.run_name / "metrics.jsonl")
    last = rows[-1] if rows else {}
    print(
        json.dumps(
            {
                "run": cfg.run_name,
                "step": last.get("step"),
                "loss": last.get("loss"),
                "checkpoint": result.checkpoint.path if result.checkpoint else None,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
