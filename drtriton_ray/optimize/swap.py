"""Swapping converted blocks into a model, and back.

A group's answer (the converted wrapper, `ModelNew`) becomes one torch custom op, `drtriton::<op>` (`register`):
its inputs are the call's tensors and the block's parameters and buffers, its implementation runs `ModelNew` on them
(`torch.func.functional_call` over one template built on the meta device), and its fake implementation runs the
block's own forward on fake tensors, so torch.compile traces the model through the op with no graph break and treats
the Triton code as one opaque call. Outside torch.compile a swapped block skips the op's dispatch and the
functional_call (together several times a small kernel's launch cost, which decode steps pay per block): it calls an
answer module bound once to the block's own parameter and buffer objects (`Bound`), rebound when they change.

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
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from drtriton_ray.optimize.problem import ATTRIBUTE
from drtriton_ray.optimize.record import matches, unflatten

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
    """Outputs that alias no input and no other output (a custom op's contract): copies where they would."""
    seen = {t.untyped_storage().data_ptr() for t in inputs if t.numel()}
    result = []
    for t in outputs:
        if t.numel() and t.untyped_storage().data_ptr() in seen:
            t = t.clone()
        if t.numel():
            seen.add(t.untyped_storage().data_ptr())
        result.append(t)
    return result


def tensor_outputs(out) -> list:
    return [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]


class Templates(threading.local):
    """One answer module per thread, built without storage (on the meta device where its constructor allows): the
    op runs it on the caller's parameters with functional_call, which swaps them in on the module for the call, so
    two threads must not share one."""

    def __init__(self, cls):
        self.cls, self.module = cls, None

    def get(self) -> nn.Module:
        if self.module is None:
            try:
                with torch.device("meta"):
                    self.module = self.cls().eval()  # the wrapper takes no constructor arguments
            except Exception:  # a constructor that reads values cannot run on meta tensors: a real one then
                self.module = self.cls().eval()
        return self.module


class Bound:
    """Per block, an answer module holding that block's own parameter and buffer objects (module docstring): built
    on the meta device, its state entries then point at the block's tensors, so it reads what the block holds now.
    A block whose tensors were replaced (`model.to(...)`, `load_state_dict(assign=True)`) gets a new one."""

    def __init__(self, cls, state: list[str]):
        self.cls, self.names = cls, [f"{ATTRIBUTE}.{n}" for n in state]
        self.modules: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # block -> (its tensors, the module)

    def get(self, block: nn.Module, state: list) -> nn.Module:
        held = self.modules.get(block)
        if held is not None and len(held[0]) == len(state) and all(a is b for a, b in zip(held[0], state)):
            return held[1]
        with torch.device("meta"):
            module = self.cls().eval()
        for name, tensor in zip(self.names, state):
            owner, _, leaf = name.rpartition(".")
            table = module.get_submodule(owner)
            # the entry itself, not setattr: a block's parameter stays the object it is, whatever the template held
            (table._parameters if leaf in table._parameters else table._buffers)[leaf] = tensor
        self.modules[block] = (list(state), module)
        return module


def register(swap: Swap, path: Path):
    """The custom op of one answer file (module docstring), registered once per process, and its `Bound` modules
    for calls outside torch.compile (`op.drt_bound`)."""
    if swap.op in OPS:
        return OPS[swap.op]
    module = import_answer(path, swap.op)
    templates = Templates(module.ModelNew)
    names = [f"{ATTRIBUTE}.{n}" for n in swap.state]

    def run(args, state):
        with torch.no_grad():
            out = torch.func.functional_call(templates.get(), dict(zip(names, state)), tuple(args))
        return fresh(tensor_outputs(out), list(args) + list(state))

    def fake(args, state):
        call_args, call_kwargs = unflatten(swap.spec, list(args))
        block = getattr(templates.get(), ATTRIBUTE)
        out = torch.func.functional_call(block, dict(zip(swap.state, state)), tuple(call_args), call_kwargs)
        leaves = []
        matches(swap.out_spec, out, leaves)
        return [torch.empty_like(t) for t in leaves]

    op = torch.library.custom_op(f"drtriton::{swap.op}", run, mutates_args=(), schema=SCHEMA)
    op.register_fake(fake)
    op.drt_bound = Bound(module.ModelNew, swap.state)
    OPS[swap.op] = op
    return op


def call_direct(op, swap: Swap, block: nn.Module, tensors: list, state: list):
    """The answer on this call outside torch.compile: the block's bound module, no dispatch (module docstring); the
    profiler still shows the op's name."""
    with torch.profiler.record_function(f"drtriton::{swap.op}"), torch.no_grad():
        out = op.drt_bound.get(block, state)(*tensors)
    return fresh(tensor_outputs(out), tensors + state)


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
                return unflatten(swap.out_spec, call_direct(op, swap, self, tensors, state))
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
