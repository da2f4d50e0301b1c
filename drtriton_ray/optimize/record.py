"""What a model's blocks are called with: the candidate blocks (`blocks`), their calls recorded with forward hooks
during example forwards (`record_calls`), and call values flattened into a JSON spec plus tensor leaves (`flatten`,
`unflatten`), the form in which a group's signature is keyed, rendered into a problem and matched at run time.

Which sizes vary: two forward passes, at the example inputs and at inputs grown by one row and two columns
(`grow`); a dim of a block's input that follows the batch (B -> B+1) is `batch_size`, one that follows the sequence
(S -> S+2) `seq_len`, their product `batch_size * seq_len`; any other dim is fixed at its first value."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import nn

PLAIN = (type(None), bool, int, float, str)
BATCH, SEQ = "batch_size", "seq_len"
GROW = {BATCH: 1, SEQ: 2}  # rows and columns the grown pass adds: distinct steps keep the two dims apart


class NotRecordable(ValueError):
    """A call value that is neither a tensor, a plain constant, nor a tuple, list or dict of those."""


@dataclass
class TensorInfo:
    shape: list  # per dim: an int, or the size constant expression it follows ("seq_len", "batch_size * seq_len")
    dtype: str  # "float32"
    low: Optional[int] = None  # integer tensors: the smallest and largest value seen, drawn between in problems
    high: Optional[int] = None

    def key(self) -> tuple:
        return (tuple(self.shape), self.dtype)


@dataclass
class Call:
    """One block's call: its (args, kwargs) and its output as specs over tensor leaves."""

    spec: Any
    inputs: list[TensorInfo]
    out_spec: Any
    outputs: list[TensorInfo] = field(default_factory=list)
    sizes: dict = field(default_factory=dict)  # the size constants' values in the recorded call

    def key(self) -> tuple:
        return (repr(self.spec), tuple(t.key() for t in self.inputs), repr(self.out_spec))


def flatten(value, leaves: list) -> Any:
    """The JSON spec of `value`: {"t": i} for the i-th tensor (appended to `leaves`), {"c": v} for a constant,
    {"tuple"|"list": [...]} and {"dict": [[key, spec], ...]}."""
    if isinstance(value, torch.Tensor):
        leaves.append(value)
        return {"t": len(leaves) - 1}
    if isinstance(value, PLAIN):
        if isinstance(value, float) and not math.isfinite(value):
            raise NotRecordable(f"a non-finite float {value}")
        return {"c": value}
    if type(value) in (tuple, list):
        return {type(value).__name__: [flatten(v, leaves) for v in value]}
    if type(value) is dict and all(isinstance(k, str) for k in value):
        return {"dict": [[k, flatten(v, leaves)] for k, v in value.items()]}
    raise NotRecordable(f"a {type(value).__name__} value")


def unflatten(spec, leaves: list):
    if "t" in spec:
        return leaves[spec["t"]]
    if "c" in spec:
        return spec["c"]
    if "dict" in spec:
        return {k: unflatten(s, leaves) for k, s in spec["dict"]}
    kind = "tuple" if "tuple" in spec else "list"
    items = [unflatten(s, leaves) for s in spec[kind]]
    return tuple(items) if kind == "tuple" else items


def matches(spec, value, leaves: list) -> bool:
    """Whether `value` has the structure and constants of `spec`; its tensors are appended to `leaves`."""
    if "t" in spec:
        leaves.append(value)
        return isinstance(value, torch.Tensor)
    if "c" in spec:
        return type(value) is type(spec["c"]) and value == spec["c"]
    if "dict" in spec:
        if type(value) is not dict or list(value) != [k for k, _ in spec["dict"]]:
            return False
        pairs = [(s, value[k]) for k, s in spec["dict"]]
    else:
        kind = "tuple" if "tuple" in spec else "list"
        if type(value).__name__ != kind or len(value) != len(spec[kind]):
            return False
        pairs = zip(spec[kind], value)
    for s, v in pairs:  # a loop, not all() over a generator: a swapped block matches its every call
        if not matches(s, v, leaves):
            return False
    return True


def is_torch_layer(module: nn.Module) -> bool:
    return type(module).__module__.startswith("torch.")


def holds_state(module: nn.Module) -> bool:
    return any(True for _ in module.parameters()) or any(True for _ in module.buffers())


def is_block(module: nn.Module) -> bool:
    """Code of the model's own (not a torch.nn layer) that holds parameters or buffers."""
    return not is_torch_layer(module) and holds_state(module)


def blocks(model: nn.Module) -> dict[str, nn.Module]:
    """The candidates, by path: the innermost blocks, i.e. blocks with no block inside them. A norm, an MLP, a
    rotary embedding or an attention is one; a decoder layer (blocks inside) or the model is not, nor is a lone
    torch.nn layer (an embedding lookup, the lm_head's matmul), which PyTorch already runs as one library call."""
    found = {}
    for path, module in model.named_modules():
        if path and is_block(module) and not any(is_block(m) for _, m in module.named_modules() if m is not module):
            found[path] = module
    return found


def grow(value, batch: int, seq: int):
    """The input one row and two columns longer: a tensor whose leading dims are (batch, seq) repeats its first row
    and its last column (token ids stay token ids, a mask stays a mask); other values stay as they are."""
    if isinstance(value, torch.Tensor) and value.dim() >= 2 and tuple(value.shape[:2]) == (batch, seq):
        value = torch.cat([value, value[:1]], 0)
        return torch.cat([value] + [value[:, -1:]] * GROW[SEQ], 1)
    return value


def size_names(first: tuple[int, int], second: tuple[int, int]) -> dict:
    """(value in the example pass, value in the grown pass) -> the expression that follows it."""
    (b1, s1), (b2, s2) = first, second
    return {(b1, b2): BATCH, (s1, s2): SEQ, (b1 * s1, b2 * s2): f"{BATCH} * {SEQ}"}


def tensor_info(t: torch.Tensor, other: Optional[torch.Tensor], names: dict) -> TensorInfo:
    """A tensor's dims named against the same leaf of the grown pass (`other`; None: every dim fixed)."""
    shape = []
    for i, n in enumerate(t.shape):
        second = other.shape[i] if other is not None and other.dim() == t.dim() else n
        shape.append(n if second == n else names.get((n, second), n))
    info = TensorInfo(shape, str(t.dtype).removeprefix("torch."))
    if not t.is_floating_point() and t.numel():
        info.low, info.high = int(t.min()), int(t.max())
    return info


class Recorder:
    """Forward hooks on the candidate blocks keeping each one's first call of a pass: (spec, tensors) or a reason."""

    def __init__(self, candidates: dict[str, nn.Module]):
        self.runs: list[dict[str, Any]] = []
        self.handles = [
            m.register_forward_hook(self.hook(path), with_kwargs=True, always_call=False)
            for path, m in candidates.items()
        ]

    def hook(self, path: str):
        def keep(module, args, kwargs, output):
            run = self.runs[-1]
            if path in run:
                return
            try:
                leaves, out_leaves = [], []
                spec = flatten((tuple(args), dict(kwargs)), leaves)
                out_spec = flatten(output, out_leaves)
                run[path] = (spec, leaves, out_spec, out_leaves)
            except NotRecordable as e:
                run[path] = f"called with {e}"

        return keep

    def run(self, model: nn.Module, inputs: list, kwargs: dict) -> None:
        self.runs.append({})
        with torch.no_grad():
            model(*inputs, **kwargs)

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def calls_of(first, second, names: dict, sizes: dict) -> Call | str:
    """A block's Call from the example pass's record, dims named against the grown pass's (None: all fixed)."""
    if isinstance(first, str):
        return first
    spec, leaves, out_spec, out_leaves = first
    if isinstance(second, str) or second is None or second[0] != spec or len(second[1]) != len(leaves):
        second = (spec, [None] * len(leaves), out_spec, [None] * len(out_leaves))
    inputs = [tensor_info(t, o, names) for t, o in zip(leaves, second[1])]
    outputs = [tensor_info(t, o, names) for t, o in zip(out_leaves, second[3])] if second[2] == out_spec else []
    return Call(spec, inputs, out_spec, outputs or [tensor_info(t, None, names) for t in out_leaves], sizes)


def record_calls(model: nn.Module, candidates: dict, inputs: list, kwargs: dict, dynamic: bool) -> dict:
    """path -> its Call (or why it cannot be one): one forward at `inputs`, and where `dynamic` a second at the
    grown inputs naming the batch and sequence dims (the first tensor input's leading two)."""
    recorder = Recorder(candidates)
    try:
        recorder.run(model, inputs, kwargs)
        names, sizes = {}, {}
        first = next((v for v in [*inputs, *kwargs.values()] if isinstance(v, torch.Tensor)), None)
        if dynamic and first is not None and first.dim() >= 2:
            batch, seq = first.shape[:2]
            grown = {k: grow(v, batch, seq) for k, v in kwargs.items()}
            try:
                recorder.run(model, [grow(v, batch, seq) for v in inputs], grown)
                names = size_names((batch, seq), (batch + GROW[BATCH], seq + GROW[SEQ]))
                sizes = {BATCH: batch, SEQ: seq}
            except Exception:  # a model that takes no other sizes (the leading dims are not batch and sequence)
                recorder.runs.pop()
    finally:
        recorder.close()
    second = recorder.runs[1] if len(recorder.runs) > 1 else {}
    return {
        path: calls_of(recorder.runs[0][path], second.get(path), names, sizes)
        for path in candidates
        if path in recorder.runs[0]
    }
