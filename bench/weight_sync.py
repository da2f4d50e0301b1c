"""Weight sync, side by side: Ray's object store against a collective broadcast (gloo here, NCCL between GPUs), from
this process (as the trainer's rank 0) to one real engine actor, on the same model and engine in one run.

    python bench/weight_sync.py --model models/smollm2 --engine vllm --pushes 5
    python bench/weight_sync.py --model models/smollm2 --engine hf --device cuda --backend nccl   # needs 2 GPUs

Each push sends a perturbed copy of the model (a new version) and waits until the engine has applied it; the
table gives the median seconds per push (the trainer's part: packing and putting, or broadcasting; and the whole
push until the engine runs the new weights) and the ratio object store / collective. After the last push of each
method the engine's greedy text must equal the pushed model's, or the run fails."""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from rich.console import Console
from rich.table import Table

from drtriton_ray.models import load_model
from drtriton_ray.rollout.engine import SamplingConfig
from drtriton_ray.rollout.pool import EnginePool
from drtriton_ray.rollout.push import CollectivePush, ObjectStorePush


PROBE = [{"role": "user", "content": "Write a ReLU kernel."}]


def greedy_equal(ray, engine, model, tok) -> bool:
    prompt = tok.apply_chat_template(PROBE, add_generation_prompt=True, tokenize=True, return_dict=False)
    [[sample]] = ray.get(engine.generate.remote([prompt], SamplingConfig(n=1, temperature=0.0, max_tokens=16)))
    with torch.no_grad():
        want = model.generate(
            torch.tensor([prompt]), max_new_tokens=16, do_sample=False, pad_token_id=tok.eos_token_id
        )[0, len(prompt) :].tolist()
    return sample.token_ids == want[: len(sample.token_ids)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a Hugging Face model folder")
    ap.add_argument("--engine", default="vllm", choices=("vllm", "hf"))
    ap.add_argument("--device", default="cpu", help="the engine's and this process's device (hf engine)")
    ap.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    ap.add_argument("--pushes", type=int, default=5)
    ap.add_argument("--bucket-mb", type=int, default=256)
    args = ap.parse_args()
    import ray

    ray.init(include_dashboard=False, log_to_driver=False)
    from drtriton_ray.rollout.actor import rollout_actor

    options = {"max_model_len": 1024, "kv_cache_bytes": 256 << 20} if args.engine == "vllm" else {"device": args.device}
    engine = rollout_actor(1, 1 if args.device.startswith("cuda") else 0, 0).remote(args.engine, args.model, options)
    # the RL job's engine pool actor owns the engine side of both methods, as in the job
    host = ray.remote(num_cpus=0)(EnginePool).remote([engine])
    model, tok = load_model(args.model)
    bucket = args.bucket_mb << 20
    pushers = {
        "object_store": ObjectStorePush(host, bucket),
        "collective": CollectivePush(host, 1, bucket, args.backend, 300, args.device),
    }
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    ray.get(engine.weight_version.remote())  # the engine is up before anything is timed
    rows, version = {}, 0
    try:
        for name, pusher in pushers.items():
            trainer_s, total_s = [], []
            for _ in range(args.pushes):
                version += 1
                with torch.no_grad():
                    for p in model.parameters():
                        p.add_(1e-3 * torch.randn_like(p))
                state = {k: v.to(args.device) for k, v in model.state_dict().items()}
                t0 = time.perf_counter()
                ref = pusher.push(state, version)
                t1 = time.perf_counter()
                ray.get(ref)
                trainer_s.append(t1 - t0)
                total_s.append(time.perf_counter() - t0)
            if not greedy_equal(ray, engine, model, tok):
                raise SystemExit(f"{name}: the engine's greedy text differs from the pushed model's")
            # the first collective push also forms the group: reported apart, not in the median
            rows[name] = (
                statistics.median(trainer_s[1:] or trainer_s),
                statistics.median(total_s[1:] or total_s),
                total_s[0],
            )
    finally:
        pushers["collective"].close()
    table = Table(
        title=f"weight sync to one {args.engine} engine: {nbytes / 2**20:.0f} MiB per push, "
        f"{args.pushes} pushes, median of pushes 2..n"
    )
    for col in ("method", "trainer s", "push until applied s", "first push s"):
        table.add_column(col, justify="right")
    for name, (trainer, total, first) in rows.items():
        table.add_row(
            name if name == "object_store" else f"collective ({args.backend})",
            f"{trainer:.2f}",
            f"{total:.2f}",
            f"{first:.2f}",
        )
    Console().print(table)
    o, c = rows["object_store"], rows["collective"]
    print(f"object store / collective: trainer {o[0] / c[0]:.2f}x, push until applied {o[1] / c[1]:.2f}x")


if __name__ == "__main__":
    main()
