"""A group's KernelBench problem: a wrapper `class Model` whose `__init__` builds the block as the model's code does
(`Constructor`: the class imported from its module, its arguments as literals, a Hugging Face config as
`LlamaConfig(**CONFIG)`), whose `forward` calls it as the model did, and whose `get_inputs` draws tensors of the
recorded shapes, the varying sizes as module-level constants (`batch_size`, `seq_len`) that convert is told are
dynamic.

The constructor's arguments are inferred, then checked: each comes from the block's attribute of that name, its
config (or the model's), its default, or for numbers the block's own attribute values and state dims; the first
combination that rebuilds a block with the same parameter and buffer names, shapes and dtypes and the same plain
attributes is the one written. A block that no combination rebuilds is reported and left as it was."""

from __future__ import annotations

import ast
import inspect
import itertools
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import nn

from drtriton_ray.optimize.record import PLAIN, Call, TensorInfo

MAX_TRIES = 256  # constructor argument combinations tried per block
ATTRIBUTE = "block"  # the wrapper's attribute holding the block: state names in the answer are "block." + the block's


class NotRebuildable(ValueError):
    """The block's class cannot be imported by name, or no inferred constructor call rebuilds it."""


def is_config(value) -> bool:
    """A Hugging Face configuration object (duck-typed: its class name moved between transformers versions)."""
    return hasattr(value, "to_dict") and hasattr(value, "model_type") and not isinstance(value, nn.Module)


def is_literal(value) -> bool:
    if isinstance(value, (tuple, list)):
        return all(is_literal(v) for v in value)
    return isinstance(value, PLAIN)


@dataclass
class Constructor:
    """How a block is built: `cls(**args)` (a config argument as {"config": (module, name, dict)}), then `.to(cast)`."""

    module: str
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    cast: Optional[str] = None

    def build(self, cls, device: str = "meta") -> nn.Module:
        args = {k: config_of(v) if isinstance(v, dict) and "config" in v else v for k, v in self.args.items()}
        with torch.device(device):
            built = cls(**args)
        return built.to(getattr(torch, self.cast)) if self.cast else built


def config_of(arg: dict):
    """The config object an argument {"config": (module, class name, values)} stands for."""
    import importlib

    module, name, values = arg["config"]
    return getattr(importlib.import_module(module), name)(**values)


def config_arg(config) -> dict:
    values = config.to_dict()
    if getattr(config, "_attn_implementation", None):  # set by from_pretrained, not part of to_dict()
        values["attn_implementation"] = config._attn_implementation
    try:
        if ast.literal_eval(repr(values)) != values:
            raise ValueError
    except (ValueError, SyntaxError):
        raise NotRebuildable(f"its {type(config).__name__} does not print as a Python literal") from None
    return {"config": (type(config).__module__, type(config).__name__, values)}


def plain_attributes(module: nn.Module) -> dict:
    """What a rebuilt block must share with the original besides its state: literal attributes and configs."""
    found = {}
    for k, v in vars(module).items():
        if k.startswith("_") or k == "training":
            continue
        if is_literal(v):
            found[k] = v
        elif is_config(v):
            found[k] = (v.to_dict(), getattr(v, "_attn_implementation", None))
    return found


def state_layout(module: nn.Module) -> list:
    tensors = list(module.named_parameters()) + list(module.named_buffers())
    return [(name, tuple(t.shape), t.dtype) for name, t in tensors]


def same_block(built: nn.Module, module: nn.Module) -> bool:
    return (
        type(built) is type(module)
        and state_layout(built) == state_layout(module)
        and plain_attributes(built) == plain_attributes(module)
    )


def argument_choices(module: nn.Module, param: inspect.Parameter, model_config) -> list:
    """The values worth trying for one constructor argument, likeliest first."""
    choices = []
    value = getattr(module, param.name, None)
    if is_config(value) or param.name == "config" and model_config is not None:
        choices.append(config_arg(value if is_config(value) else model_config))
    elif param.name in vars(module) and is_literal(value):
        choices.append(value)
    if param.default is not inspect.Parameter.empty:
        choices.append(param.default)
    numbers = [v for v in vars(module).values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    dims = [n for _, shape, _ in state_layout(module) for n in shape]
    annotation = str(param.annotation)
    if "float" in annotation or isinstance(param.default, float):
        choices += [v for v in numbers if isinstance(v, float)]
    elif "bool" not in annotation and not isinstance(param.default, bool):
        choices += [v for v in numbers if isinstance(v, int)] + dims
    unique = []
    for c in choices:
        if not any(type(c) is type(u) and c == u for u in unique):
            unique.append(c)
    return unique


def infer_constructor(module: nn.Module, model_config=None) -> Constructor:
    """The constructor call that rebuilds `module` (NotRebuildable: none found, or the class is not importable)."""
    cls = type(module)
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        raise NotRebuildable(f"{cls.__qualname__} is not importable by name (defined in {cls.__module__})")
    params = [
        p
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    choices = [argument_choices(module, p, model_config) for p in params]
    if any(not c for c in choices):
        missing = [p.name for p, c in zip(params, choices) if not c]
        raise NotRebuildable(f"no value found for the constructor argument(s) {', '.join(missing)}")
    floats = [t for t in [*module.parameters(), *module.buffers()] if t.is_floating_point()]
    casts = [None] + sorted({str(t.dtype).removeprefix("torch.") for t in floats})
    for values in itertools.islice(itertools.product(*choices), MAX_TRIES):
        args = {p.name: v for p, v in zip(params, values)}
        for cast in casts:
            constructor = Constructor(cls.__module__, cls.__qualname__, args, cast)
            try:
                built = constructor.build(cls)
            except Exception:  # a wrong guess may fail anywhere in the user's constructor
                continue
            if same_block(built, module):
                return constructor
    raise NotRebuildable(f"no constructor call found that rebuilds it ({len(params)} arguments tried)")


def dim_text(d) -> str:
    return str(d)


def input_text(t: TensorInfo) -> str:
    shape = "(" + ", ".join(map(dim_text, t.shape)) + ("," if len(t.shape) == 1 else "") + ")"
    if t.dtype.startswith(("float", "bfloat")):
        return f"torch.randn({shape}, dtype=torch.{t.dtype})"
    if t.dtype == "bool":
        return f"torch.randint(0, 2, {shape}) > 0"
    return f"torch.randint({t.low or 0}, {(t.high or 0) + 1}, {shape}, dtype=torch.{t.dtype})"


def spec_text(spec, names: list[str]) -> str:
    """A call spec as Python: tensors by name, constants as literals."""
    if "t" in spec:
        return names[spec["t"]]
    if "c" in spec:
        return repr(spec["c"])
    if "dict" in spec:
        return "{" + ", ".join(f"{k!r}: {spec_text(s, names)}" for k, s in spec["dict"]) + "}"
    kind = "tuple" if "tuple" in spec else "list"
    items = [spec_text(s, names) for s in spec[kind]]
    if kind == "tuple":
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return "[" + ", ".join(items) + "]"


def call_text(call: Call, names: list[str]) -> str:
    args, kwargs = call.spec["tuple"]
    parts = [spec_text(s, names) for s in args["tuple"]] + [f"{k}={spec_text(s, names)}" for k, s in kwargs["dict"]]
    return f"self.{ATTRIBUTE}(" + ", ".join(parts) + ")"


def tensor_paths(spec, path: str = "out") -> list[str]:
    """Python expressions reaching each tensor leaf of an output spec, in leaf order."""
    if "t" in spec:
        return [path]
    if "c" in spec:
        return []
    if "dict" in spec:
        return [p for k, s in spec["dict"] for p in tensor_paths(s, f"{path}[{k!r}]")]
    kind = "tuple" if "tuple" in spec else "list"
    return [p for i, s in enumerate(spec[kind]) for p in tensor_paths(s, f"{path}[{i}]")]


def returns_tensors_only(spec) -> bool:
    """The block returns a tensor or a tuple of tensors: the wrapper returns its result as it is."""
    return "t" in spec or "tuple" in spec and all("t" in s for s in spec["tuple"]) and spec["tuple"]


def constructor_text(c: Constructor) -> tuple[list[str], list[str], str]:
    """(import lines, module-level constants, the expression that builds the block)."""
    imports, constants, args = [f"from {c.module} import {c.name}"], [], []
    for name, value in c.args.items():
        if isinstance(value, dict) and "config" in value:
            module, cls, values = value["config"]
            imports.append(f"from {module} import {cls}")
            constant = "CONFIG" if not constants else f"CONFIG{len(constants)}"
            constants.append(f"{constant} = {values!r}")
            args.append(f"{name}={cls}(**{constant})")
        else:
            args.append(f"{name}={value!r}")
    built = f"{c.name}({', '.join(args)})" + (f".to(torch.{c.cast})" if c.cast else "")
    return imports, constants, built


def problem_source(constructor: Constructor, call: Call, title: str) -> str:
    """The KernelBench problem for one group (module docstring)."""
    imports, constants, built = constructor_text(constructor)
    names = [f"x{i}" for i in range(len(call.inputs))]
    sizes = sorted({p for t in call.inputs for d in t.shape if isinstance(d, str) for p in d.split(" * ")})
    if returns_tensors_only(call.out_spec):
        body = f"        return {call_text(call, names)}"
    else:
        paths = tensor_paths(call.out_spec)
        result = paths[0] if len(paths) == 1 else "(" + ", ".join(paths) + ")"
        body = f"        out = {call_text(call, names)}\n        return {result}"
    lines = [
        f'"""{title}"""',
        "",
        "import torch",
        "import torch.nn as nn",
        *dict.fromkeys(imports),
        "",
        *[f"{name} = {call.sizes[name]}" for name in sizes],
        *constants,
        "",
        "",
        "class Model(nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        f"        self.{ATTRIBUTE} = {built}",
        "",
        f"    def forward(self, {', '.join(names)}):",
        body,
        "",
        "",
        "def get_inputs():",
        "    return [" + ", ".join(input_text(t) for t in call.inputs) + "]",
        "",
        "",
        "def get_init_inputs():",
        "    return []",
        "",
    ]
    return "\n".join(lines)
