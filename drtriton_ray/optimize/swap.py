"""Swapping converted blocks into a model, and back.

A group's answer (the converted wrapper, `ModelNew`) becomes one torch op, `drtriton::<op>` (`register`): its inputs
are the call's tensors and the block's parameters and buffers, its implementation runs `ModelNew` on them (one
template module built on the meta device, its state entries set for the call). Where Triton compiles for a GPU the op
is a `torch.library.triton_op` over the answer's traceable copy (traceable.py: every launch through wrap_triton), so
torch.compile traces the wrapper's Python and the kernel launches into its graph and Inductor launches the kernels
from its own code, fusing its kernels around them. Under Triton's interpreter, whose kernels cannot be traced, it is
an opaque custom op whose fake implementation runs the block's own forward. Outside torch.compile a swapped block
calls the implementation itself, on the answer module as written: the op's dispatch costs several times a small
kernel's launch, which a decode step pays once per block.

A block is swapped by giving it a subclass of its own class (`TritonLlamaMLP(LlamaMLP)`, `swap_in`) whose forward
calls the op where the call is one the answer was verified for: the same structure and constants, each tensor of the
recorded dtype and rank, contiguous, and of the recorded size in every dim the answer is not general in; in eval mode
and without autograd recording (inference). Any other call runs the class's own forward. The block keeps its object,
attributes, parameters and state_dict keys: `save_pretrained`, `load_state_dict` and `isinstance` see the model as
before."""

from __future__ import annotations

import importlib.util
import sys
import threading
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from drtriton_ray.optimize.problem import ATTRIBUTE
from drtriton_ray.optimize.record import matches, unflatten
from drtriton_ray.optimize.traceable import compiles, import_traceable

SCHEMA = "(Tensor[] args, Tensor[] state) -> Tensor[]"
OPS: dict[str, object] = {}  # op name -> the custom op registered in this process (an op name is registered once)
CLASSES: dict[tuple[type, str], type] = {}  # (block class, op name) -> its swapped subclass


class SwapError(ValueError):
    """A module that is not what the manifest says, or an answer that does not load."""


@dataclass
class Swap:
    """What a swapped block checks and calls at run time (stored in the manifest)."""

    op: str  # the custom op's name in the drtriton namespace, also the answer's file stem
    cls: str  # the block's class, module-qualified
    spec: dict  # the call's structure and constants (record.flatten)
    inputs: list  # per tensor of the call: [dtype, shape]; a shape entry None where any size is verified
    out_spec: dict  # the output's structure over the op's outputs
    state: list  # the block's parameter and buffer names, the op's `state` in this order


def class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def import_answer(path: Path, op: str):
    """Import an answer file as a module (Triton reads kernel sources through inspect: a file, not exec'd text)."""
    name = f"drtriton_optimized_{op}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise SwapError(f"{path} does not load: {type(e).__name__}: {e}") from None
    return module


def fresh(outputs: list, inputs: list) -> list:
    """Outputs that alias no input and no other output (a custom op's contract): copies where they would. Storages
    are compared by identity, not address: the fake tensors torch.compile traces with have none."""
    result: list = []
    for t in outputs:
        if any(torch._C._is_alias_of(t, u) for u in inputs) or any(torch._C._is_alias_of(t, u) for u in result):
            t = t.clone()
        result.append(t)
    return result


def tensor_outputs(out) -> list:
    return [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]


class Templates(threading.local):
    """One answer module per thread, built without storage (on the meta device where its constructor allows). A
    call puts the caller's parameters and buffers into the module's own entries for the call and puts the template's
    back after it (what functional_call does, at a dict store a tensor: the op runs once per block per step), so two
    threads must not share one."""

    def __init__(self, cls, state: list[str]):
        self.cls, self.names, self.module, self.slots = cls, [f"{ATTRIBUTE}.{n}" for n in state], None, []

    def get(self) -> nn.Module:
        if self.module is None:
            try:
                with torch.device("meta"):
                    self.module = self.cls().eval()  # the wrapper takes no constructor arguments
            except Exception:  # a constructor that reads values cannot run on meta tensors: a real one then
                self.module = self.cls().eval()
            self.slots = [self.entry(name) for name in self.names]
        return self.module

    def entry(self, name: str) -> tuple[dict, str]:
        owner, _, leaf = name.rpartition(".")
        module = self.module.get_submodule(owner)
        return (module._parameters if leaf in module._parameters else module._buffers), leaf

    def call(self, args: list, state: list):
        module = self.get()
        held = [table[leaf] for table, leaf in self.slots]
        for (table, leaf), tensor in zip(self.slots, state):
            table[leaf] = tensor
        try:
            return module(*args)
        finally:
            for (table, leaf), tensor in zip(self.slots, held):
                table[leaf] = tensor


def register(swap: Swap, path: Path):
    """The op of one answer file (module docstring), registered once per process; its implementation also serves
    calls outside torch.compile directly (`op.drt_run`)."""
    if swap.op in OPS:
        return OPS[swap.op]
    module = import_answer(path, swap.op)
    templates = Templates(module.ModelNew, swap.state)
    run = implementation(templates)
    if compiles(module):
        op = traced_op(swap, path)
    else:  # Triton's interpreter: torch.compile cannot trace its kernels, the op stays opaque
        op = torch.library.custom_op(f"drtriton::{swap.op}", run, mutates_args=(), schema=SCHEMA)
        op.register_fake(fake_implementation(swap, templates))
    op.drt_run = run
    OPS[swap.op] = op
    return op


def implementation(templates: Templates):
    """The op's implementation: the answer module run on the call's tensors and the block's state."""

    def run(args, state):
        with torch.no_grad() if torch.is_grad_enabled() else nullcontext():  # entering no_grad costs microseconds
            out = templates.call(list(args), list(state))
        return fresh(tensor_outputs(out), list(args) + list(state))

    return run


def fake_implementation(swap: Swap, templates: Templates):
    """The custom op's outputs on fake tensors: the block's own forward on them."""

    def fake(args, state):
        call_args, call_kwargs = unflatten(swap.spec, list(args))
        block = getattr(templates.get(), ATTRIBUTE)
        out = torch.func.functional_call(block, dict(zip(swap.state, state)), tuple(call_args), call_kwargs)
        leaves = []
        matches(swap.out_spec, out, leaves)
        return [torch.empty_like(t) for t in leaves]

    return fake


def traced_op(swap: Swap, path: Path):
    """The triton_op running the answer's traceable copy (traceable.py), which torch.compile traces into its graph."""
    try:
        module = import_traceable(path, f"drtriton_traceable_{swap.op}")
    except Exception as e:
        raise SwapError(f"{path} has no traceable copy: {type(e).__name__}: {e}") from None
    templates = Templates(module.ModelNew, swap.state)
    templates.get()  # built now, not first inside a trace on fake tensors (another thread builds its own)
    run = implementation(templates)

    def body(args: list[torch.Tensor], state: list[torch.Tensor]) -> list[torch.Tensor]:
        return run(args, state)

    return torch.library.triton_op(f"drtriton::{swap.op}", body, mutates_args=())


def call_direct(op, swap: Swap, tensors: list, state: list):
    """The op's implementation without the dispatcher (module docstring); a running profiler still shows the op's
    name. A record_function costs about as much as the rest of the call, so only a profiler pays it (the flag
    torch.autograd.profiler keeps; where a torch release lacks it, every call records)."""
    if not getattr(torch.autograd.profiler, "_is_profiler_enabled", True):
        return op.drt_run(tensors, state)
    with torch.profiler.record_function(f"drtriton::{swap.op}"):
        return op.drt_run(tensors, state)


def accepts(swap: Swap, module: nn.Module, args: tuple, kwargs: dict, tensors: list) -> bool:
    """Whether this call is one the answer was verified for (module docstring); its tensors go to `tensors`."""
    if module.training or not matches(swap.spec, (args, kwargs), tensors):
        return False
    grad = torch.is_grad_enabled()
    for t, (dtype, shape) in zip(tensors, swap.inputs):
        if str(t.dtype) != f"torch.{dtype}" or t.dim() != len(shape) or not t.is_contiguous():
            return False
        if grad and t.requires_grad or any(d is not None and d != n for d, n in zip(shape, t.shape)):
            return False
    return True


def attribute(module: nn.Module, path: list[str]):
    """A parameter or buffer by its dotted name's parts (a loop torch.compile traces, unlike operator.attrgetter)."""
    value = module
    for part in path:
        value = getattr(value, part)
    return value


def swapped_class(cls: type, swap: Swap, op) -> type:
    """The subclass of `cls` whose forward calls `op` where it may (module docstring)."""
    key = (cls, swap.op)
    if key in CLASSES:
        return CLASSES[key]
    paths = [n.split(".") for n in swap.state]

    def forward(self, *args, **kwargs):
        tensors: list = []
        if accepts(swap, self, args, kwargs, tensors):
            state = [attribute(self, p) for p in paths]
            if not (torch.is_grad_enabled() and any(s.requires_grad for s in state)):
                if torch.compiler.is_compiling():
                    return unflatten(swap.out_spec, op(tensors, state))
                return unflatten(swap.out_spec, call_direct(op, swap, tensors, state))
        return cls.forward(self, *args, **kwargs)

    name = f"Triton{cls.__name__}"
    CLASSES[key] = type(name, (cls,), {"forward": forward, "drt_swap": swap, "__qualname__": name})
    return CLASSES[key]


def original_class(module: nn.Module) -> type:
    cls = type(module)
    return cls.__bases__[0] if hasattr(cls, "drt_swap") else cls


def swap_in(model: nn.Module, paths: list[str], swap: Swap, path: Path) -> None:
    """Swap the blocks at `paths` (each of class `swap.cls`) for the answer in the file `path`."""
    op = register(swap, path)
    for p in paths:
        module = model.get_submodule(p)
        if class_name(original_class(module)) != swap.cls:
            raise SwapError(f"{p} is a {class_name(type(module))}, the answer is for a {swap.cls}")
        module.__class__ = swapped_class(original_class(module), swap, op)


def swap_out(model: nn.Module, paths: Optional[list[str]] = None) -> None:
    """Give the blocks at `paths` (default: every swapped block) their own class back."""
    for p, module in model.named_modules():
        if (paths is None or p in paths) and hasattr(type(module), "drt_swap"):
            module.__class__ = original_class(module)
