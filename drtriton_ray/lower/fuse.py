"""Whole-fragment fusion: a library kernel of `lower/kernels.py` (reduction, along-dim operator, norm, matmul,
convolution, pooling) rewritten for one fused group. Its op-selecting constexprs (OP, MODE, HAS_B, ...) are fixed and
the branches they rule out dropped, so the kernel reads as one operator's; a PROLOGUE (an elementwise sub-DAG) is
computed on every value it loads, from the sub-DAG's leaves, in place of the load of an input that is never
written; an EPILOGUE (another one) is applied to every value it stores. A prologue may KEEP a value: a further
elementwise group of its result, stored to a second output (kept_ptr) at the loads marked `# each value once` in
the library kernel, those that together read each input value exactly once.

The rewrite is textual over the kernel's own lines (comments and layout kept), at the statements that have the
library's two site forms: a load `X = tl.load(x_ptr + IDX, mask=M, other=O).to(tl.float32)` and a store
`tl.store(out_ptr + IDX, V.to(out_ptr.dtype.element_ty), mask=M)`, IDX the flat index of a contiguous input or
output. A leaf of the input's (output's) shape is read at IDX, a smaller one through broadcast strides over the
index unravelled as in the fused elementwise kernels (dims and strides constexpr: no division by a runtime value)."""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field

from drtriton_ray.lower import kernels


@dataclass
class Side:
    """One side's elementwise sub-DAG: leaves k (pointer in{k}_ptr, value v{k}), whether each is dense (the input's
    or output's shape), the lines computing it ("t5 = v0 + v1") and the name of its result. An epilogue's anchor
    value is `val`, not a leaf."""

    leaves: list[int]
    dense: list[bool]
    body: list[str]
    result: str
    ops: list[str] = field(default_factory=list)
    kept: tuple[list[str], str] | None = None  # a prologue's second output: the lines computing it, its name


def _known(test: ast.AST, consts: dict):
    """The value of a test over fixed constexprs only, or None."""
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    if not names or not names <= set(consts):
        return None
    return bool(eval(compile(ast.Expression(test), "<test>", "eval"), {"__builtins__": {}}, dict(consts)))


def _taken(node: ast.If, consts: dict, lines: list[str]):
    """The statements an if/elif/else chain runs under the fixed constexprs ([] for none), None if not known."""
    while True:
        value = _known(node.test, consts)
        if value is None:
            return None
        if value:
            return node.body
        nxt = node.orelse[0] if len(node.orelse) == 1 else None
        if isinstance(nxt, ast.If) and lines[nxt.lineno - 1].lstrip().startswith("elif"):
            node = nxt
            continue
        return node.orelse


def _prune(stmts, consts, lines, drop: set, dedent: dict) -> None:
    """Mark the lines of branches the constexprs rule out (drop) and how far kept lines move left (dedent)."""
    for s in stmts:
        taken = _taken(s, consts, lines) if isinstance(s, ast.If) else None
        if taken is None:
            for block in ("body", "orelse"):
                _prune(getattr(s, block, None) or [], consts, lines, drop, dedent)
            continue
        keep = set(range(taken[0].lineno, taken[-1].end_lineno + 1)) if taken else set()
        for ln in range(s.lineno, s.end_lineno + 1):
            if ln in keep:
                dedent[ln] = dedent.get(ln, 0) + taken[0].col_offset - s.col_offset
            else:
                drop.add(ln)
        _prune(taken, consts, lines, drop, dedent)


def _segment(src: str, node) -> str:
    return " ".join(part.strip() for part in ast.get_source_segment(src, node).splitlines())


def _site(stmt, src: str):
    """('load', X, IDX, M, O) or ('store', V, IDX, M) for a statement of a site form, else None."""
    call = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr)) else None
    kw = {k.arg: _segment(src, k.value) for k in getattr(call, "keywords", [])}
    if isinstance(stmt, ast.Assign) and isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
        inner = call.func.value
        ok = isinstance(inner, ast.Call) and inner.args and _segment(src, inner.func) == "tl.load"
        if ok and _segment(src, inner.args[0]).startswith("x_ptr + ") and call.func.attr == "to":
            ptr = _segment(src, inner.args[0])
            kw = {k.arg: _segment(src, k.value) for k in inner.keywords}
            return "load", _segment(src, stmt.targets[0]), ptr[len("x_ptr + ") :], kw["mask"], kw["other"]
    if isinstance(stmt, ast.Expr) and isinstance(call, ast.Call) and _segment(src, call.func) == "tl.store":
        ptr, value = (_segment(src, a) for a in call.args[:2])
        suffix = ".to(out_ptr.dtype.element_ty)"
        if ptr.startswith("out_ptr + ") and value.endswith(suffix):
            return "store", value[: -len(suffix)], ptr[len("out_ptr + ") :], kw["mask"]
    return None


def _loads(side: Side, idx: str, mask: str, unravel: str, uses: int = 0) -> tuple[list[str], str]:
    """Lines loading a side's leaves at flat index `idx`: dense ones there, broadcast ones through their strides over
    the index unravelled into `unravel`0..4 by the side's dims (`uses`: other uses of the index after them)."""
    bound = sum(side.dense) + (not all(side.dense)) + uses > 1 and not idx.isidentifier()
    out = [f"{unravel}idx = {idx}"] if bound else []
    flat = f"{unravel}idx" if bound else idx
    if not all(side.dense):
        names = ", ".join(f"{unravel}{j}" for j in range(5))
        dims = ", ".join(f"{unravel}d{j}" for j in range(1, 5))
        out.append(f"{names} = unravel5({flat}, {dims})  # constant dims: multiplies and shifts")
    for k, dense in zip(side.leaves, side.dense):
        offset = flat if dense else " + ".join(f"{unravel}{j} * s{k}_{j}" for j in range(5))
        out.append(f"v{k} = tl.load(in{k}_ptr + {offset}, mask={mask}, other=0.0).to(tl.float32)")
    return out, flat


def _rewrite(site, prologue: Side | None, epilogue: Side | None, once: bool) -> list[str] | None:
    """The lines replacing a site, or None to keep it; `once`: a load marked as reading each value once."""
    if site[0] == "load" and prologue:
        _, target, idx, mask, other = site
        keep = prologue.kept if once else None
        out, flat = _loads(prologue, idx, mask, "p", uses=int(keep is not None))
        out += prologue.body
        if keep:
            lines, value = keep
            out += lines + [f"tl.store(kept_ptr + {flat}, {value}.to(kept_ptr.dtype.element_ty), mask={mask})"]
        return out + [f"{target} = tl.where({mask}, {prologue.result}, {other})"]
    if site[0] == "store" and epilogue:
        _, value, idx, mask = site
        out = [f"val = {value}.to(tl.float32)  # the value the unfused kernel stored"]
        if not mask.isidentifier() and len(epilogue.leaves) > 0:
            out, mask = out + [f"emask = {mask}"], "emask"
        loads, flat = _loads(epilogue, idx, mask, "e", uses=1)
        out += loads + epilogue.body
        return out + [f"tl.store(out_ptr + {flat}, {epilogue.result}.to(out_ptr.dtype.element_ty), mask={mask})"]
    return None


def _signature(name: str, fn: ast.FunctionDef, body: str, consts, prologue, epilogue) -> tuple[str, list[str]]:
    """The fused kernel's def line(s) and the fixed constexprs its body still uses (passed by the wrapper). An
    argument the library kernel lists after its constexprs (a row count the wrappers pass by keyword) comes after
    the positional ones here too."""
    plain, late, constexprs, after = [], [], [], False
    for a in fn.args.args:
        if a.annotation is not None and "constexpr" in ast.unparse(a.annotation):
            after = True
            if a.arg not in consts or _uses(body, a.arg):
                constexprs.append(a.arg)
        elif a.arg == "x_ptr" and prologue:
            plain += [f"in{k}_ptr" for k in prologue.leaves] + (["kept_ptr"] if prologue.kept else [])
        else:
            (late if after else plain).append(a.arg)
    plain += [f"in{k}_ptr" for k in epilogue.leaves] if epilogue else []
    # a broadcast leaf's dims and strides: constants (the program's shapes are fixed), so unravelling the index is
    # multiplies and shifts, not four divisions and modulos by runtime values an element; listed after the
    # positional arguments and before the kernel's own constexprs, the wrapper still passes them positionally
    index = []
    for side, prefix in ((prologue, "p"), (epilogue, "e")):
        if side and not all(side.dense):
            index += [f"{prefix}d{j}" for j in range(1, 5)]
            index += [f"s{k}_{j}" for k, d in zip(side.leaves, side.dense) if not d for j in range(5)]
    params = plain + [f"{c}: tl.constexpr" for c in index] + late + [f"{c}: tl.constexpr" for c in constexprs]
    head, lines = f"def {name}(", []
    line = head
    for j, p in enumerate(params):
        piece = p + (", " if j < len(params) - 1 else "):")
        if len(line) + len(piece) > 118:
            lines.append(line.rstrip())
            line = " " * len(head)
        line += piece
    return "\n".join(lines + [line]), [c for c in constexprs if c in consts]


def _uses(text: str, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(ast.parse(text)))


def fused_anchor_source(
    base: str, name: str, consts: dict, prologue: Side | None, epilogue: Side | None, comment: str
) -> tuple[str, list[str]]:
    """(source of kernel `name`: library kernel `base` specialized to `consts` with the prologue and epilogue, the
    fixed constexprs it still takes)."""
    module = inspect.getsource(kernels)
    node = next(f for f in ast.parse(module).body if isinstance(f, ast.FunctionDef) and f.name == base)
    src = "\n".join(module.splitlines()[node.lineno - 1 : node.end_lineno]) + "\n"
    lines = src.splitlines()
    fn = ast.parse(src).body[0]
    drop: set[int] = set()
    dedent: dict[int, int] = {}
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):  # the generic kernel's docstring
        drop |= set(range(first.lineno, first.end_lineno + 1))
    _prune(fn.body, consts, lines, drop, dedent)
    replaced: dict[int, tuple[int, list[str]]] = {}
    for stmt in ast.walk(fn):
        site = _site(stmt, src) if isinstance(stmt, ast.stmt) and stmt.lineno not in drop else None
        once = lines[stmt.lineno - 2].strip().startswith("# each value once") if site else False
        new = _rewrite(site, prologue, epilogue, once) if site else None
        if new is not None:
            indent = stmt.col_offset - dedent.get(stmt.lineno, 0)
            replaced[stmt.lineno] = (stmt.end_lineno, [" " * indent + line for line in new])
    body, ln = [f"    # {comment}"], fn.body[0].lineno
    while ln <= fn.end_lineno:
        if ln in replaced:
            body += replaced[ln][1]
            ln = replaced[ln][0] + 1
            continue
        if ln not in drop:
            body.append(lines[ln - 1][dedent.get(ln, 0) :])
        ln += 1
    text = "\n".join(body)
    if (prologue and _uses("if True:\n" + text, "x_ptr")) or (epilogue and "val = " not in text):
        raise ValueError(f"{base}: a load or store is not of a site form, the group cannot fuse")
    if prologue and prologue.kept and "kept_ptr + " not in text:
        raise ValueError(f"{base}: no load reads each value once, the prologue's value cannot be kept")
    signature, fixed = _signature(name, fn, "if True:\n" + text, consts, prologue, epilogue)
    source = "@triton.jit\n" + signature + "\n" + text + "\n"
    ast.parse(source)
    return source, fixed
