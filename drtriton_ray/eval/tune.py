"""Launch-configuration tuning of the reference lowering (bench/tune_lowering.py): one node of a program run through
the library wrapper (or its generated elementwise kernel) with `config=`, as the emitter passes it, and each
candidate configuration timed and checked against the default's values."""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import torch
import triton
import triton.testing

from drtriton_ray.ir import Program, Tensor
from drtriton_ray.lower import tuning, wrappers
from drtriton_ray.lower.elementwise import is_elementwise
from drtriton_ray.lower.emit import HEADER, fused_elementwise, launch_call, split_small
from drtriton_ray.lower.library import library_source


def elementwise_launcher(p: Program, k: int, tmp: Path):
    """(call(config) running node k as the lowering's generated elementwise kernel, its input tensor ids)."""
    src, line = fused_elementwise(p, [k], "timed", None)
    path = tmp / f"tune_{abs(hash(src))}.py"
    path.write_text(HEADER + "\n" + library_source([src]) + "\n\n" + src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.DTYPE = getattr(torch, p.dtype)
    args = line.split("timed(", 1)[1].rstrip(")").split(", ")
    setup = "flat_args" if hasattr(mod, "flat_args") else "elementwise_args"  # dense inputs only: the flat wrapper
    base = getattr(mod, setup)

    def call(env, config):
        setattr(mod, setup, functools.partial(base, config=config))
        return mod.timed(*(env[a] for a in args))

    return call


def launcher(p: Program, k: int, tmp: Path):
    """call(env, config) running node k through the library wrapper (or generated elementwise kernel)."""
    node = p.nodes[k]
    if is_elementwise(node.op):
        return elementwise_launcher(p, k, tmp)
    shapes = [p.tensors[t].shape for t in node.inputs + node.weights]
    out_shape = p.tensors[node.outputs[0]].shape

    @functools.lru_cache(maxsize=None)
    def code(config_json: str):
        config = tuning.resolved(node.op, node.params, shapes, out_shape, json.loads(config_json))
        small, config = split_small(config)  # a conv's kernel: the emitter's wrapper choice (conv, conv_small)
        text = launch_call(node, shapes[0], out_shape, {"SMALL": small} if small else None)
        return compile(text[:-1] + ", config=__config__)", "<launch>", "eval"), config

    def call(env, config):
        launch, rest = code(json.dumps(config, sort_keys=True))
        return eval(launch, {**vars(wrappers), **env, "__config__": rest})

    return call


def environment(p: Program, k: int, device: str = "cuda") -> dict:
    """Node k's inputs and weights drawn at their shapes and dtypes (integers in their draw hint's range, so a
    captured cross-entropy's labels are classes)."""
    node = p.nodes[k]
    env = {f"tensor_{t}": draw(p.tensors[t], device) for t in node.inputs}
    weights = {f"weight_{w}": draw(p.tensors[w], device) for w in node.weights}
    return {**env, "self": SimpleNamespace(**weights)}


def draw(t: Tensor, device: str) -> torch.Tensor:
    dtype = getattr(torch, t.dtype)
    if t.dtype == "bool":
        return torch.rand(t.shape, device=device) < 0.5
    if not dtype.is_floating_point:
        lo, hi = (int(v) for v in t.init.split(":")[1:3]) if t.init.startswith("int:") else (0, 2)
        return torch.randint(lo, hi, t.shape, device=device, dtype=dtype)
    return torch.randn(t.shape, device=device, dtype=dtype)


def same(a, b) -> bool:
    """Whether a config's result is the default's: bit-equal integers, float32 within 1e-4, 16-bit within an ulp
    or two (another tile sums in another order, which rounds to a neighbouring bf16 value)."""
    if not a.dtype.is_floating_point:
        return torch.equal(a, b)
    tol = 1e-4 if a.dtype == torch.float32 else 1e-2
    return torch.allclose(a.float(), b.float(), atol=tol, rtol=tol, equal_nan=True)


def gpu_ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=5, rep=30, return_mode="median")


def tune_one(call, env, kernel, dims, timer=gpu_ms) -> tuple[dict | None, dict]:
    """(the best configuration if it beats the default by 3%, the timings in ms)."""
    ms = lambda config: timer(lambda: call(env, config))  # noqa: E731
    want = call(env, None)
    times = {"default": ms(None)}
    best, best_ms = None, times["default"] * 0.97
    for config in tuning.candidates(kernel, dims):
        try:
            ok = same(call(env, config), want)
            t = ms(config) if ok else None
        except Exception as e:  # noqa: BLE001 - a configuration that does not compile (resources) is skipped
            ok, t = False, f"{type(e).__name__}"
        times[json.dumps(config)] = t
        if ok and t < best_ms:
            best, best_ms = config, t
    return best, times
