"""What torch.compile generates for a fragment: Inductor's output code and what its kernels were launched with.
It runs where the GPU is (a verifier worker, or a process that has one); search/inductor.py makes the result a
self-contained candidate module.

`compiled_code(source, dims, device)`: the fragment's Model (`source`, its forward reading each varying size from
an input) compiled with those dims dynamic, through a backend that records where each graph input comes from:
{"code", "kernels" (per kernel its chosen config, grid type, signature), "sources" (per argument of Inductor's
`call`), "single" (the forward returns one tensor)}. What cannot become a candidate raises `NotSelfContained`."""

from __future__ import annotations

import ast
from typing import Optional


class NotSelfContained(ValueError):
    """Inductor's code holds something a self-contained Triton module cannot; the message says what, in one line."""


def kernel_sources(tree: ast.Module) -> dict[str, str]:
    """Name -> source of each kernel the output code compiles (`name = async_compile.triton('name', '''...''')`)."""
    out = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        func = ast.unparse(node.value.func)
        if func.startswith("async_compile.") and func != "async_compile.triton":
            raise NotSelfContained(f"a kernel compiled by {func}, not Triton")
        if func == "async_compile.triton":
            out[node.targets[0].id] = node.value.args[1].value
    if not out:
        raise NotSelfContained("Inductor generated no Triton kernel")
    return out


def call_function(tree: ast.Module) -> ast.FunctionDef:
    """Inductor's `call(args)`: a method of its Runner class (torch >= 2.8) or a module-level function."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            return node
        if isinstance(node, ast.ClassDef) and node.name == "Runner":
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "call":
                    return fn
    raise NotSelfContained("Inductor's code has no call(args) function")


def returned(code: str) -> Optional[int]:
    """How many tensors Inductor's call returns (None: not a tuple)."""
    returns = [n for n in ast.walk(call_function(ast.parse(code))) if isinstance(n, ast.Return)]
    last = returns[-1].value if returns else None
    return len(last.elts) if isinstance(last, ast.Tuple) else None


def chosen_config(kernel) -> Optional[dict]:
    """The config Inductor's autotuner launched a kernel with (its only one where it had no choice)."""
    launchers = getattr(kernel, "launchers", None) or []
    configs = [launchers[0].config] if launchers else list(getattr(kernel, "configs", None) or [])
    if len(configs) != 1:
        return None
    c = configs[0]
    return {"kwargs": dict(c.kwargs), "num_warps": c.num_warps, "num_stages": c.num_stages}


def kernels_of(code: str) -> dict:
    """Per kernel of Inductor's output `code`: the chosen config, grid type and signature, from the module Inductor
    loaded for it (the one written from exactly this code)."""
    from torch._inductor.codecache import PyCodeCache

    _, path = PyCodeCache.write(code)
    module = next((m for m in reversed(PyCodeCache.modules) if getattr(m, "__file__", None) == path), None)
    module = module or PyCodeCache.modules_no_attr.get(path)
    if module is None:
        raise NotSelfContained("the module Inductor loaded for its code is not in its cache")
    out = {}
    for name in kernel_sources(ast.parse(code)):
        k = getattr(module, name)
        out[name] = {
            "chosen": chosen_config(k),
            "inductor_meta": {"grid_type": k.inductor_meta.get("grid_type")},
            "signature": {a: str(b) for a, b in k.triton_meta.get("signature", {}).items()},
        }
    return out


def fragment_inputs(source: str, dims: list, device: str) -> tuple:
    """(the fragment's Model on `device`, its inputs with the varying dims marked dynamic)."""
    import torch

    from drtriton_ray.ir.problem import load_problem

    mod = load_problem(source, "inductor_fragment")
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).to(device).eval()
    inputs = [x.to(device) if torch.is_tensor(x) else x for x in mod.get_inputs()]
    for x, varying in zip(inputs, dims):
        for d in varying:
            if x.shape[d] < 2:  # Dynamo specializes sizes 0 and 1: its code would hold at that size only
                raise NotSelfContained(f"a varying dim is {x.shape[d]} at the fragment's sizes")
            # maybe: where the fragment pins a dim (a view to fixed sizes), compile it specialized rather than
            # fail; the candidate's layout checks then refuse other sizes, and the verifier sees it is not general
            torch._dynamo.maybe_mark_dynamic(x, d)
    return model, inputs


def compiled_code(source: str, dims: list, device: str = "cuda") -> dict:
    """torch.compile of the fragment's Model on `device` (default Inductor settings, as the verifier's reference),
    `dims` (per forward input, the dims that vary) dynamic: {"code", "kernels", "sources", "single"}."""
    import torch
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    import torch.fx.experimental._config as fx_config
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.utils import run_and_get_code

    model, inputs = fragment_inputs(source, dims, device)
    graphs: list[list[str]] = []

    def backend(gm, example_inputs):
        sources = [n.meta["grapharg"].source for n in gm.graph.nodes if n.op == "placeholder"]
        graphs.append([s.name() if callable(s.name) else s.name for s in sources])
        return compile_fx(gm, example_inputs)

    # each (varying) size its own symbol, and code written now rather than read from a cache
    with (
        torch.no_grad(),
        fx_config.patch(use_duck_shape=False),
        inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
    ):
        out, codes = run_and_get_code(torch.compile(model, backend=backend), *inputs)
    if len(graphs) != 1 or len(codes) != 1:
        raise NotSelfContained(f"torch.compile made {len(graphs)} graphs ({len(codes)} output codes), not one")
    wanted = 1 if torch.is_tensor(out) else len(out)
    if returned(codes[0]) != wanted:  # AOTAutograd makes an output that aliases an input outside Inductor's code
        raise NotSelfContained(f"Inductor's call returns {returned(codes[0])} tensors, the forward {wanted}")
    return {"code": codes[0], "kernels": kernels_of(codes[0]), "sources": graphs[0], "single": torch.is_tensor(out)}
