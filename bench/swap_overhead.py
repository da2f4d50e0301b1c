"""The Python cost of a swapped block's call (`drtriton optimize`), its kernel launches excluded: a tiny Llama
(tests/optimize/tiny_llama.json) optimized here on CPU, then per replaced class the microseconds of one call of the
swapped block, of its answer alone (the op's implementation: the template module run on the block's state) and of
the answer's forward inside it, every Triton launch a no-op. In a decode step, where kernels are short, this runs
on top of every launch's own cost, once per block.

    python bench/swap_overhead.py                  # optimize (about a minute), then time
    python bench/swap_overhead.py --out rows.json

Measures our own code only (the answers our search verified, the Hugging Face blocks the test model is built of)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from answer_overhead import per_call_us, without_launches  # noqa: E402  (bench/, the script's own folder)
from report import finish  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tests" / "optimize" / "tiny_llama.json"


def optimized_model(workers: int, budget_s: float):
    """The tiny Llama with its blocks swapped for Triton answers (CPU, the Triton interpreter)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from drtriton_ray.optimize import optimize
    from drtriton_ray.verify import WorkerPool

    config = json.loads(CONFIG.read_text())
    torch.manual_seed(0)
    folder = Path(tempfile.mkdtemp())
    AutoModelForCausalLM.from_config(LlamaConfig(**config)).save_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.randint(0, config["vocab_size"], (2, 8))
    with WorkerPool("cpu", size=workers, name="swap-overhead") as pool:
        return optimize(model, [ids], verifier=pool, cache=None, budget_s=budget_s, progress=False).model


def recorded_calls(model) -> dict:
    """The first call of one block of each swapped class: (block, args, kwargs)."""
    import torch

    calls, hooks = {}, []
    for module in model.modules():
        if hasattr(type(module), "drt_swap") and type(module) not in calls:

            def keep(m, args, kwargs, out):
                calls.setdefault(type(m), (m, args, kwargs))

            hooks.append(module.register_forward_hook(keep, with_kwargs=True))
    with torch.no_grad():
        model(torch.zeros(2, 8, dtype=torch.long))
    for h in hooks:
        h.remove()
    return calls


def measure(block, args, kwargs, repeat: int) -> dict:
    """One swapped block's row: the swapped call, the op's implementation, the answer's forward alone."""
    from drtriton_ray.optimize import swap

    s = type(block).drt_swap
    op, tensors = swap.OPS[s.op], []
    swap.accepts(s, block, args, kwargs, tensors)
    state = [swap.attribute(block, p.split(".")) for p in s.state]
    module = sys.modules[f"drtriton_optimized_{s.op}"]
    answer = module.ModelNew()
    answer.load_state_dict({f"block.{k}": v for k, v in zip(s.state, state)}, strict=False)
    return {
        "class": type(block).__name__.removeprefix("Triton"),
        "swapped_us": per_call_us(lambda: block(*args, **kwargs), repeat),
        "op_us": per_call_us(lambda: op.drt_run(tensors, state), repeat),
        "answer_us": per_call_us(lambda: answer(*tensors), repeat),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2, help="verifier processes while optimizing")
    ap.add_argument("--budget-s", type=float, default=120.0, help="search seconds for the whole model")
    ap.add_argument("--repeat", type=int, default=2000, help="calls per timing run")
    ap.add_argument("--out", default=None, help="a JSON file for the rows")
    args = ap.parse_args()
    import torch

    model = optimized_model(args.workers, args.budget_s)
    for name, module in list(sys.modules.items()):
        if name.startswith(("drtriton_optimized_", "drtriton_traceable_")):
            without_launches(module)
    rows = []
    with torch.no_grad():
        for block, call_args, kwargs in recorded_calls(model).values():
            rows.append(measure(block, call_args, kwargs, args.repeat))
    t = Table(title="Python per swapped block call, us, launches excluded (CPU)")
    for col in ("class", "swapped call", "op implementation", "answer forward", "swap's own"):
        t.add_column(col, justify="left" if col == "class" else "right")
    for r in rows:
        own = r["swapped_us"] - r["answer_us"]
        t.add_row(r["class"], *(f"{r[k]:.1f}" for k in ("swapped_us", "op_us", "answer_us")), f"{own:.1f}")
    return finish([t], {"rows": rows}, args.out)


if __name__ == "__main__":
    sys.exit(main())
