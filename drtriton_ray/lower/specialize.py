"""A solution's library code specialized to the constants the solution passes it.

The library's kernels and wrappers serve every operator of a family: `reduce_kernel` branches on `OP` over eight
reductions, a wrapper on `op`. A solution that sums carries all eight branches, and a model trained on it reads
(and must learn to write) a kernel three times longer than the one it needs. Where every call in the solution
passes one parameter the same constant, the branches that test it are folded here: the taken branch stays, the
others go, as Triton's compiler folds them for a `tl.constexpr` (so a kernel compiles to the same code) and as
Python would run them. Everything else (comments, names, layout) is the library's text, line for line.

A parameter is taken as constant only where no call could pass another value (a call with `*args` before the
parameter's position, or `**kwargs` without it named, leaves it open), and only where the function never assigns
it. Calls chain: a kernel launched with `OP=op` by a wrapper whose `op` is constant is specialized too."""

from __future__ import annotations

import ast
import operator

UNKNOWN = object()
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}


def value(node: ast.AST, known: dict):
    """The constant an expression evaluates to, given the known parameters' values, or UNKNOWN."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return known.get(node.id, UNKNOWN)
    if isinstance(node, ast.UnaryOp):
        v = value(node.operand, known)
        if v is UNKNOWN:
            return UNKNOWN
        if isinstance(node.op, ast.Not):
            return not v
        if isinstance(node.op, ast.USub) and isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v
        return UNKNOWN
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [value(e, known) for e in node.elts]
        return UNKNOWN if any(i is UNKNOWN for i in items) else tuple(items)
    if isinstance(node, ast.BoolOp):
        return _bool_op(node, known)
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        left = value(node.left, known)
        for op, right_node in zip(node.ops, node.comparators):
            right = value(right_node, known)
            if left is UNKNOWN or right is UNKNOWN:
                return UNKNOWN
            try:
                if not _COMPARE[type(op)](left, right):
                    return False
            except TypeError:
                return UNKNOWN
            left = right
        return True
    return UNKNOWN


def _bool_op(node: ast.BoolOp, known: dict):
    """and/or as Python decides them: a known operand may decide the whole, an unknown one leaves it open."""
    deciding = isinstance(node.op, ast.Or)  # the operand truth that decides an `or` (True) or an `and` (False)
    result = not deciding
    for operand in node.values:
        v = value(operand, known)
        if v is UNKNOWN:
            result = UNKNOWN
        elif bool(v) == deciding:
            return deciding
    return result


def _params(f: ast.FunctionDef) -> tuple[list[str], list[str], dict]:
    """(positional names, keyword-only names, name -> default node)."""
    a = f.args
    positional = [p.arg for p in a.posonlyargs + a.args]
    defaults = dict(zip(positional[len(positional) - len(a.defaults) :], a.defaults))
    defaults |= {p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None}
    return positional, [p.arg for p in a.kwonlyargs], defaults


# Parameters left open whatever the calls pass: the search's launch-config variants add `config=` to a solution's
# calls (search/sources.setup_variants), which must still reach the kernels' launches.
OPEN = {"config"}


def _fixable(f: ast.FunctionDef) -> set[str]:
    """Parameters of f that f never assigns (OPEN excepted): where every call passes one the same constant, it is
    that constant throughout f (for f's own tests and for the calls f makes)."""
    stored = {n.id for n in ast.walk(f) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    positional, keyword, _ = _params(f)
    return set(positional + keyword) - stored - OPEN


def _callee(call: ast.Call) -> str | None:
    func = call.func.value if isinstance(call.func, ast.Subscript) else call.func  # kernel[grid](...)
    return func.id if isinstance(func, ast.Name) else None


def _bind(f: ast.FunctionDef, call: ast.Call, known: dict) -> dict:
    """What the call passes each parameter of f: a constant or UNKNOWN."""
    positional, keyword, defaults = _params(f)
    bound: dict = {}
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):  # from here on any positional parameter may come from it
            for name in positional[i:]:
                bound.setdefault(name, UNKNOWN)
            break
        if i < len(positional):
            bound[positional[i]] = value(arg, known)
    splat = False
    for kw in call.keywords:
        if kw.arg is None:
            splat = True
        else:
            bound[kw.arg] = value(kw.value, known)
    for name in positional + keyword:
        if name not in bound:
            bound[name] = UNKNOWN if splat or name not in defaults else value(defaults[name], {})
    return bound


def _calls(tree: ast.Module) -> list[tuple[ast.Call, str | None]]:
    """Every call in the module with the top-level function it is made in (None: elsewhere, e.g. a method)."""
    out = []
    for top in tree.body:
        owner = top.name if isinstance(top, ast.FunctionDef) else None
        out += [(n, owner) for n in ast.walk(top) if isinstance(n, ast.Call)]
    return out


def constants(tree: ast.Module) -> dict[str, dict]:
    """Top-level function -> {parameter: the constant every call passes it}, to a fixed point (a caller's
    constants make its calls' arguments constant)."""
    funcs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    fixable = {name: _fixable(f) for name, f in funcs.items()}
    calls = _calls(tree)
    called = {id(c.func.value if isinstance(c.func, ast.Subscript) else c.func) for c, _ in calls}
    # a function named anywhere but as a call's callee (passed along, stored) may be called with anything
    escaped = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in funcs and id(n) not in called}
    known: dict[str, dict] = {name: {} for name in funcs}
    for _ in range(len(funcs) + 1):  # each round fixes at least one more caller, or none: then it is done
        found: dict[str, dict] = {}
        for name, f in funcs.items():
            sites = [(c, owner) for c, owner in calls if _callee(c) == name]
            if not fixable[name] or not sites or name in escaped:
                continue
            values: dict = {}
            for c, owner in sites:
                for param, v in _bind(f, c, known.get(owner, {})).items():
                    if param in fixable[name]:
                        values.setdefault(param, []).append(v)
            fixed = {}
            for param, vs in values.items():
                if all(v is not UNKNOWN and type(v) is type(vs[0]) and v == vs[0] for v in vs):
                    fixed[param] = vs[0]
            found[name] = fixed
        found = {name: found.get(name, {}) for name in funcs}
        if found == known:
            break
        known = found
    return known


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _dedent(line: str, shift: int) -> str:
    return line[min(shift, _indent(line)) :] if line.strip() else ""


class _Writer:
    """The lines of a function body, its decided branches folded (see the module's docstring)."""

    def __init__(self, lines: list[str], known: dict):
        self.lines, self.known, self.out = lines, known, []

    def block(self, stmts: list[ast.stmt], shift: int, start: int) -> None:
        """stmts, with the comment and blank lines from `start` (a 1-based line) before each, dedented by shift;
        a block left with no statement gets `pass`."""
        first = len(self.out)
        for stmt in stmts:
            self.gap(start, stmt.lineno, shift)
            self.statement(stmt, shift)
            start = stmt.end_lineno + 1
        if not any(line.strip() and not line.lstrip().startswith("#") for line in self.out[first:]):
            self.out.append(" " * (stmts[0].col_offset - shift) + "pass")

    def gap(self, start: int, stop: int, shift: int) -> None:
        self.out += [_dedent(line, shift) for line in self.lines[start - 1 : stop - 1]]

    def verbatim(self, stmt: ast.stmt, shift: int, first: int | None = None, last: int | None = None) -> None:
        first, last = first or stmt.lineno, last or stmt.end_lineno
        self.out += [_dedent(line, shift) for line in self.lines[first - 1 : last]]

    def statement(self, stmt: ast.stmt, shift: int) -> None:
        if isinstance(stmt, ast.If):
            self.branch(stmt, shift)
        elif isinstance(stmt, (ast.For, ast.While, ast.With)) and not getattr(stmt, "orelse", None):
            if stmt.body[0].lineno == stmt.lineno:  # `for ...: x` on one line
                self.simple(stmt, shift)
                return
            self.verbatim(stmt, shift, last=stmt.body[0].lineno - 1)
            self.block(stmt.body, shift, stmt.body[0].lineno)
        else:
            self.simple(stmt, shift)

    def simple(self, stmt: ast.stmt, shift: int) -> None:
        """The statement's lines, its decided one-line conditional expressions replaced by the branch taken."""
        lines = self.lines[stmt.lineno - 1 : stmt.end_lineno]
        folds = []
        for node in ast.walk(stmt):
            if isinstance(node, ast.IfExp) and node.lineno == node.end_lineno:
                v = value(node.test, self.known)
                if v is not UNKNOWN:
                    folds.append((node, node.body if v else node.orelse))
        done: list[ast.IfExp] = []
        for node, taken in sorted(folds, key=lambda f: (-f[0].lineno, -f[0].col_offset)):
            if any(_inside(node, other) for other in done) or taken.lineno != taken.end_lineno:
                continue
            i = node.lineno - stmt.lineno
            line = lines[i].encode()  # the offsets count UTF-8 bytes
            text = line[taken.col_offset : taken.end_col_offset]
            text = b"(" + text + b")" if _needs_parens(taken) else text
            lines[i] = (line[: node.col_offset] + text + line[node.end_col_offset :]).decode()
            done.append(node)
        self.out += [_dedent(line, shift) for line in lines]

    def branch(self, stmt: ast.If, shift: int) -> None:
        """An if/elif/else chain: branches whose test is known false go, the first known true one becomes the else
        (or, first of all, the whole), the rest stay."""
        chain, node = [], stmt
        while True:
            if node.body[0].lineno == node.lineno:  # `if x: y` on one line: left as written
                self.verbatim(stmt, shift)
                return
            chain.append(node)
            if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) and _is_elif(self.lines, node.orelse[0]):
                node = node.orelse[0]
            else:
                break
        rest = chain[-1].orelse
        kept: list[ast.If] = []
        for link in chain:
            v = value(link.test, self.known)
            if v is UNKNOWN:
                kept.append(link)
            elif v:
                rest = link.body
                break
        inner = stmt.body[0].col_offset - stmt.col_offset  # a block's indent under its header
        if not kept:
            if rest:
                self.block(rest, shift + inner, rest[0].lineno)
            return
        for k, link in enumerate(kept):
            header = self.lines[link.lineno - 1 : link.body[0].lineno - 1]
            head = header[0].lstrip()
            keyword = "if" if k == 0 else "elif"
            head = keyword + head[head.index(" ") :]
            self.out.append(" " * (stmt.col_offset - shift) + head)
            self.out += [_dedent(line, shift) for line in header[1:]]
            self.block(link.body, shift, link.body[0].lineno)
        if rest:
            self.out.append(" " * (stmt.col_offset - shift) + "else:")
            self.block(rest, shift, rest[0].lineno)


def _is_elif(lines: list[str], node: ast.If) -> bool:
    return lines[node.lineno - 1].lstrip().startswith("elif")


def _inside(node: ast.AST, other: ast.AST) -> bool:
    return (other.lineno, other.col_offset) <= (node.lineno, node.col_offset) and (
        node.end_lineno,
        node.end_col_offset,
    ) <= (other.end_lineno, other.end_col_offset)


def _needs_parens(node: ast.AST) -> bool:
    return not isinstance(node, (ast.Name, ast.Constant, ast.Attribute, ast.Call, ast.Subscript, ast.Tuple))


def specialize(source: str) -> str:
    """source (a solution module) with each top-level function's branches on its constant parameters folded."""
    tree = ast.parse(source)
    known = constants(tree)
    lines = source.splitlines()
    out, done = [], 0
    for f in tree.body:
        if not isinstance(f, ast.FunctionDef) or not known.get(f.name):
            continue
        w = _Writer(lines, known[f.name])
        w.block(f.body, 0, f.body[0].lineno)
        out += lines[done : f.body[0].lineno - 1] + w.out
        done = f.end_lineno
    out += lines[done:]
    text = "\n".join(out) + ("\n" if source.endswith("\n") else "")
    return text if text == source else specialize(text)
