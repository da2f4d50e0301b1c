"""Recover a program's DAG from its KernelBench source, for problems written in the operator
space's own PyTorch forms (everything `drtriton synth` emits): each forward line is matched
against the operators' templates, and one run of the model gives every tensor's shape."""

from __future__ import annotations

import ast
import re
import sys

import torch

from drtriton_ray.ops import REGISTRY
from drtriton_ray.ir import Node, Program, Tensor, load_problem

LINE = re.compile(r"^\s*tensor_(\d+) = (.+)$")


class UnsupportedProblem(ValueError):
    """The source is not a program of the operator space."""


def _pattern(template: str) -> re.Pattern:
    out, seen = [], set()
    for literal, field, _, _ in __import__("string").Formatter().parse(template):
        out.append(re.escape(literal))
        if field is None:
            continue
        group = f"i{field}" if field.isdigit() else field
        if group in seen:
            out.append(f"(?P={group})")
            continue
        seen.add(group)
        if field.isdigit():
            out.append(rf"(?P<{group}>tensor_\d+)")
        elif re.fullmatch(r"w\d", field):
            out.append(rf"self\.weight_(?P<{group}>\d+)")
        else:
            # a number, a word or a list (a shape); never a tensor (torch.pow(x, tensor_4) is Pow, not PowScalar)
            out.append(rf"(?P<{group}>\[[^\[\]]*\]|(?!tensor_\d)[^,()\[\]]+)")
    return re.compile("^" + "".join(out) + "$")


PATTERNS = [(name, _pattern(spec.template)) for name, spec in REGISTRY.items()]


def _match(expr: str) -> tuple[str, dict]:
    for name, pat in PATTERNS:
        m = pat.match(expr)
        if m:
            return name, m.groupdict()
    raise UnsupportedProblem(f"no operator of the registry renders as `{expr}`")


def _param(text: str):
    """A param as the template wrote it: a Python literal, or a word the template quotes (reduction='mean')."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return text.strip()


def _forward_locals(model, inputs) -> dict:
    """Run forward once and keep its locals: the shape of every intermediate tensor."""
    captured: dict = {}
    code = type(model).forward.__code__

    def tracer(frame, event, arg):
        if frame.f_code is code:
            if event == "return":
                captured.update(frame.f_locals)
            return tracer
        return None

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        sys.settrace(old)
    return captured


def program_from_source(source: str) -> Program:
    try:
        tree = ast.parse(source)
        mod = load_problem(source)
    except Exception as e:  # a problem that does not even import
        raise UnsupportedProblem(f"the problem does not load: {type(e).__name__}: {e}") from None
    for needed in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, needed):
            raise UnsupportedProblem(f"the problem defines no {needed}")
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    fwd = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if fwd is None:
        raise UnsupportedProblem("Model has no forward")
    lines = source.splitlines()
    nodes: list[Node] = []
    for stmt in fwd.body:
        text = lines[stmt.lineno - 1] if stmt.lineno == stmt.end_lineno else None
        if isinstance(stmt, ast.Return):
            continue
        m = LINE.match(text or "")
        if not m:
            raise UnsupportedProblem(f"forward line {stmt.lineno} is not `tensor_k = <operator>`")
        name, groups = _match(m.group(2).strip())
        ins = [int(groups[f"i{j}"].removeprefix("tensor_")) for j in range(REGISTRY[name].arity)]
        weights = [int(groups[k]) for k in sorted(groups) if re.fullmatch(r"w\d", k)]
        params = {k: _param(v) for k, v in groups.items() if not re.fullmatch(r"i\d|w\d", k)}
        nodes.append(Node(name, ins, [int(m.group(1))], params, weights))
    model = mod.Model(*mod.get_init_inputs())
    inputs = mod.get_inputs()
    local = _forward_locals(model, inputs)
    consumed = {t for n in nodes for t in n.inputs}
    produced = {n.outputs[0] for n in nodes}
    tensors: dict[int, Tensor] = {}
    for arg in fwd.args.args[1:]:
        tid = int(arg.arg.removeprefix("tensor_"))
        tensors[tid] = Tensor(tid, list(local[arg.arg].shape), _dtype(local[arg.arg]), "input")
    for n in nodes:
        for t in n.outputs:
            v = local[f"tensor_{t}"]
            tensors[t] = Tensor(t, list(v.shape), _dtype(v), "intermediate" if t in consumed else "output")
        for w in n.weights:
            weight = getattr(model, f"weight_{w}")
            tensors[w] = Tensor(w, list(weight.shape), _dtype(weight), "weight")
    if not produced or set(tensors) < consumed:
        raise UnsupportedProblem("forward reads tensors it never defines")
    # the program's dtype: its first floating input's (a mask or class indices may come first)
    dtype = next((_dtype(x) for x in inputs if x.is_floating_point()), "float32")
    return Program(nodes, dict(sorted(tensors.items())), dtype, 0)


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")
