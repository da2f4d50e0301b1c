"""Assembly: the cheapest tiling of the graph by verified fragments (PyTorch for the rest), rendered as one
`ModelNew` module that the verifier then judges end to end against the user's program.

Tiling: dynamic programming over the nodes in program order. On a GPU the cost is measured time: a fragment's
candidate_ms against its nodes' PyTorch time (each node's own eager_ms, from its 1-node fragment's reference
timing). On CPU, where the interpreter times nothing, it maximizes the nodes covered by verified Triton
fragments, ties going to fewer fragments (fewer launches, fewer seams).

Rendering: the user's module-level code (minus Model, get_inputs, get_init_inputs), `ModelNew` with Model's
class body and constructor as written (so state_dict names and seeded initialisation match the original), and a
forward that runs the graph in order: each chosen fragment through its candidate's kernels (the candidate's
top-level names prefixed by a scope-aware rename; its ModelNew.forward made a function whose `self.weight_k` are
arguments bound to the user's parameters, e.g. `self.fc.weight`), Torch nodes through torch_call, the other
registry nodes through their PyTorch templates; the buffer updates the graph carries (BatchNorm's running
statistics) are copied into the module's buffers. A graph whose eval mode differs (graph.eval_graph) gets
`if self.training: <the tiling> else: <the eval graph in PyTorch>`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Optional

from drtriton_ray.ir import Graph
from drtriton_ray.ir import node_line
from drtriton_ray.ir.render import SIZE_NAME
from drtriton_ray.lower.symbolic import binding_lines, bindings, code_expr, readable
from drtriton_ray.search.fragments import VIEW_OPS, Fragment

WEIGHT_ATTR = re.compile(r"^weight_(\d+)$")
CONSTANT, EVAL_CONSTANT = "drt_const_", "drt_eval_const_"  # buffer names of the graphs' constants
USER_ENTRY_POINTS = ("Model", "get_inputs", "get_init_inputs")
# what the rendered code names: torch (ATen calls), nn, F (the registry's PyTorch templates), triton, tl
REQUIRED_IMPORTS = (
    "import torch",
    "import torch.nn as nn",
    "import torch.nn.functional as F",
    "import triton",
    "import triton.language as tl",
)


class AssemblyError(ValueError):
    """A candidate or the user's program cannot be assembled (the search then keeps the original)."""


@dataclass
class Option:
    """A verified fragment the tiling may use: nodes [start, end), its time (None where untimed)."""

    start: int
    end: int
    ms: Optional[float]
    key: str  # the fragment's hash


@dataclass
class Piece:
    """One step of the chosen tiling: a fragment run in Triton, or a node left to PyTorch."""

    start: int
    end: int
    kind: str  # "triton" | "torch"
    fragment: str = ""  # hash, for "triton"
    ms: Optional[float] = None  # the fragment's candidate_ms or the node's PyTorch time, where measured


def choose_tiling(n: int, options: list[Option], node_ms: Optional[list[float]]) -> list[Piece]:
    """The least-cost cover of nodes 0..n-1. node_ms None (CPU): most nodes in Triton, then fewest fragments;
    else least total milliseconds, then fewest fragments. Options of equal cost: the first given wins."""
    timed = node_ms is not None
    best: list[tuple] = [(0.0, 0)] + [(float("inf"), 0)] * n
    step: list[Optional[Piece]] = [None] * (n + 1)
    ending: dict[int, list[Option]] = {}
    for o in options:
        if not timed or o.ms is not None:
            ending.setdefault(o.end, []).append(o)
    for i in range(1, n + 1):
        torch_ms = node_ms[i - 1] if timed else 0.0
        best[i] = (best[i - 1][0] + torch_ms, best[i - 1][1])
        step[i] = Piece(i - 1, i, "torch", ms=torch_ms if timed else None)
        for o in ending.get(i, []):
            cost = o.ms if timed else -(o.end - o.start)
            cand = (best[o.start][0] + cost, best[o.start][1] + 1)
            if cand < best[i]:
                best[i], step[i] = cand, Piece(o.start, o.end, "triton", o.key, o.ms)
    pieces, i = [], n
    while i > 0:
        pieces.append(step[i])
        i = step[i].start
    return pieces[::-1]


def node_times(n: int, measured: list[tuple[int, int, float]], moved: Optional[list[int]] = None) -> list[float]:
    """Each node's PyTorch time from (start, end, eager_ms) of measured fragments: a 1-node fragment's own time; a
    node without one gets a share of what the smallest measured fragment around it leaves over, by the bytes it
    moves (`moved`: per node, 0 for a view; evenly without). A node in no measured fragment costs its bytes at the
    fastest rate the measured fragments show, not nothing: else a tiling would leave a scale or a cast of a large
    tensor to PyTorch as if it were free."""
    moved = moved or [1] * n
    ms: list[Optional[float]] = [None] * n
    for start, end, eager in measured:
        if end - start == 1:
            ms[start] = eager
    for start, end, eager in sorted(measured, key=lambda m: m[1] - m[0]):
        unknown = [k for k in range(start, end) if ms[k] is None]
        if unknown:
            left = max(eager - sum(ms[k] for k in range(start, end) if ms[k] is not None), 0.0)
            weight = sum(moved[k] for k in unknown)
            for k in unknown:
                ms[k] = left * moved[k] / weight if weight else left / len(unknown)
    rates = [eager / sum(moved[start:end]) for start, end, eager in measured if sum(moved[start:end])]
    rate = min(rates, default=0.0)
    return [moved[k] * rate if m is None else m for k, m in enumerate(ms)]


def moved_bytes(p) -> list[int]:
    """Per node of a program, the bytes PyTorch's kernel reads and writes (its tensors' sizes; 0 for a view)."""
    import torch

    size = {t.id: t.numel * getattr(torch, t.dtype).itemsize for t in p.tensors.values()}
    return [0 if n.op in VIEW_OPS else sum(size[t] for t in n.inputs + n.weights + n.outputs) for n in p.nodes]


# -- a candidate's names, prefixed ---------------------------------------------------------------------------
def _stored_names(body: list[ast.stmt]) -> set[str]:
    """Names a function body binds (its locals), nested functions' own locals left out."""
    names: set[str] = set()
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        todo.extend(ast.iter_child_nodes(node))
    return names


def _params(args: ast.arguments) -> set[str]:
    every = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
    return {a.arg for a in every}


class _Prefix(ast.NodeTransformer):
    """Renames the module's top-level names (functions, classes, assigned constants) to PREFIX + name, wherever
    they are meant: a function's parameters and locals of the same name shadow them and stay."""

    def __init__(self, names: set[str], prefix: str):
        self.names, self.prefix = names, prefix
        self.shadow: list[set[str]] = []

    def _new(self, name: str) -> str:
        return self.prefix + name if name in self.names else name

    def visit_Name(self, node: ast.Name):
        if node.id in self.names and not any(node.id in s for s in self.shadow):
            node.id = self.prefix + node.id
        return node

    def _scoped(self, node, local: set[str]):
        for d in getattr(node, "decorator_list", []):
            self.visit(d)
        self.visit(node.args)
        if getattr(node, "returns", None):
            self.visit(node.returns)
        self.shadow.append(local)
        body = node.body if isinstance(node.body, list) else [node.body]
        new = [self.visit(b) for b in body]
        node.body = new if isinstance(node.body, list) else new[0]
        self.shadow.pop()
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef):
        if not self.shadow:
            node.name = self._new(node.name)
        return self._scoped(node, _params(node.args) | _stored_names(node.body))

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda):
        return self._scoped(node, _params(node.args))

    def visit_ClassDef(self, node: ast.ClassDef):
        if not self.shadow:
            node.name = self._new(node.name)
        node.bases = [self.visit(b) for b in node.bases]
        node.body = [self.visit(b) for b in node.body]
        return node


def top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


@dataclass
class CandidateParts:
    imports: list[str]
    definitions: str  # the candidate's kernels, helpers and constants, prefixed
    function: str  # its forward as a function: (inputs..., weights...) or (instance, inputs..., weights...)
    name: str  # that function's name
    instance_class: str = ""  # the prefixed ModelNew, kept only when its forward reads other attributes of self


class _SelfWeights(ast.NodeTransformer):
    """`self.weight_k` -> the argument `weight_k` (the fragment's parameter k, bound to the user's tensor)."""

    def __init__(self):
        self.seen: set[int] = set()

    def visit_Attribute(self, node: ast.Attribute):
        m = WEIGHT_ATTR.match(node.attr)
        if isinstance(node.value, ast.Name) and node.value.id == "self" and m:
            self.seen.add(int(m.group(1)))
            return ast.copy_location(ast.Name(node.attr, node.ctx), node)
        return self.generic_visit(node)


def candidate_parts(code: str, prefix: str, weight_ids: list[int]) -> CandidateParts:
    """A fragment candidate split for assembly. weight_ids: the fragment's parameter numbers, in call order."""
    tree = ast.parse(code)
    imports = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    tree.body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))]
    tree = _Prefix(top_level_names(tree), prefix).visit(tree)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == prefix + "ModelNew"), None)
    forward = cls and next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None or not forward.args.args:
        raise AssemblyError("the candidate has no ModelNew.forward(self, ...)")
    forward = _SelfWeights().visit(forward)
    keep_self = any(isinstance(n, ast.Name) and n.id == "self" for n in ast.walk(forward))
    args = forward.args.args if keep_self else forward.args.args[1:]
    taken = _params(forward.args) | _stored_names(forward.body)
    weights = [ast.arg(f"weight_{k}") for k in weight_ids]
    clash = [w.arg for w in weights if w.arg in taken - {f"weight_{k}" for k in weight_ids}]
    if clash:
        raise AssemblyError(f"the candidate's forward already uses the names {clash}")
    forward.args.args = args + weights
    forward.args.defaults = []  # every argument is passed, positionally
    forward.name = prefix + "forward"
    forward.decorator_list = []
    tree.body = [n for n in tree.body if n is not cls or keep_self]
    return CandidateParts(imports, ast.unparse(tree), ast.unparse(forward), forward.name, cls.name if keep_self else "")


# -- the user's side -----------------------------------------------------------------------------------------
def _is_main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)


def find_model(tree: ast.Module) -> ast.ClassDef:
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        raise AssemblyError("the program defines no class Model")
    return model


def preamble(source: str, tree: ast.Module) -> list[str]:
    """The user's module-level code, verbatim, but for what only the original may hold: Model, get_inputs,
    get_init_inputs, a __main__ guard, and anything naming them (the verifier bans the name Model in a candidate;
    `_init = get_init_inputs` would name a function the solution lacks), or naming what such a statement defines."""
    dropped, gone = set(USER_ENTRY_POINTS), set()
    while True:  # until no statement names what is dropped (a function may name a later statement's name)
        more = {
            i
            for i, node in enumerate(tree.body)
            if i not in gone and (_is_main_guard(node) or _defines(node) & dropped or _mentions_any(node, dropped))
        }
        if not more:
            break
        gone |= more
        for i in more:
            dropped |= _defines(tree.body[i])
    lines = source.splitlines()
    out = []
    for i, node in enumerate(tree.body):
        if i not in gone:
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            out += lines[start - 1 : node.end_lineno]
    return out


def _defines(node: ast.stmt) -> set[str]:
    """The module-level names a statement binds."""
    return top_level_names(ast.Module(body=[node], type_ignores=[]))


def _mentions_any(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def state_expr(path: str) -> str:
    """A state_dict name as an expression on the module: "layers.0.weight" -> self.layers[0].weight."""
    return "self" + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in path.split("."))


class _RenameModel(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name):
        if node.id == "Model":
            node.id = "ModelNew"
        return node


def model_new_class(model: ast.ClassDef, forward: str, init_extra: list[str]) -> str:
    """Model's class body as written (constructor, helpers, class constants), named ModelNew, with `forward`
    in place of its own (kept as ORIGINAL) and `init_extra` run at the end of its constructor."""
    cls = _RenameModel().visit(ast.parse(ast.unparse(model)).body[0])
    cls.name = "ModelNew"
    doc = ast.get_docstring(cls, clean=False) is not None
    cls.body = cls.body[doc:]
    for n in cls.body:
        if isinstance(n, ast.FunctionDef) and n.name == "forward":
            n.name = ORIGINAL
    if init_extra:
        init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            init = ast.parse("def __init__(self):\n    super().__init__()").body[0]
            cls.body.insert(0, init)
        init.body += ast.parse("\n".join(init_extra)).body
    cls.body.append(ast.parse(forward).body[0])
    cls.body.insert(0, ast.Expr(ast.Constant("Converted by `drtriton convert`: verified Triton kernels.")))
    return ast.unparse(ast.fix_missing_locations(cls))


def forward_names(model: ast.ClassDef, graph: Graph, constant: str = CONSTANT) -> tuple[str, dict[int, str]]:
    """Model.forward's signature and an expression per tensor the forward starts from: its tensor arguments (in
    order, then *args), the user's parameters and buffers (by state_dict name), constants (buffers we add)."""
    fwd = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if fwd is None:
        raise AssemblyError("class Model has no forward")
    params = [a.arg for a in fwd.args.posonlyargs + fwd.args.args][1:]
    names: dict[int, str] = {}
    for i, t in enumerate(graph.inputs):
        if i < len(params):
            names[t] = params[i]
        elif fwd.args.vararg:
            names[t] = f"{fwd.args.vararg.arg}[{i - len(params)}]"
        else:
            raise AssemblyError(f"the graph has {len(graph.inputs)} inputs, Model.forward {len(params)}")
    names.update({t: state_expr(path) for t, path in graph.state.items()})
    names.update({t: f"self.{constant}{t}" for t in graph.constants})
    return f"def forward({ast.unparse(fwd.args)}):", names


def constant_lines(graph: Graph, constant: str = CONSTANT) -> list[str]:
    """The forward's constants as non-persistent buffers (named `constant` + tensor id): they follow the module's
    device, stay out of the state_dict."""
    out = []
    for t, c in sorted(graph.constants.items()):
        shape = tuple(graph.program.tensors[t].shape)
        dtype = c.get("dtype", graph.program.tensors[t].dtype)
        value = f"torch.tensor({c['values']!r}, dtype=torch.{dtype}).reshape({shape})"
        out.append(f"self.register_buffer('{constant}{t}', {value}, persistent=False)")
    return out


# -- the whole module ----------------------------------------------------------------------------------------
def _local_namer(taken: set[str]):
    def name(t: int) -> str:
        n = f"t{t}"
        while n in taken:
            n += "_"
        return n

    return name


def write_back_lines(graph: Graph, name) -> list[str]:
    """The buffer updates the forward makes in place (BatchNorm's running statistics in training mode), copied
    into the module's buffers outside autograd, as the original's forward does."""
    if not graph.updates:
        return []
    return ["with torch.no_grad():"] + [f"    {state_expr(path)}.copy_({name(t)})" for t, path in graph.updates.items()]


def all_torch(graph: Graph) -> list[Piece]:
    """A tiling of every node left to PyTorch (the eval-mode path)."""
    return [Piece(k, k + 1, "torch") for k in range(len(graph.program.nodes))]


class _Renderer:
    """The forward's lines for a graph's tiling; the chosen candidates' code collected once per fragment hash."""

    def __init__(self, init_extra: list[str]):
        self.parts: dict[str, CandidateParts] = {}
        self.imports: list[str] = []
        self.definitions: list[str] = []
        self.init_extra = init_extra

    def candidate(self, piece: Piece, frag: Fragment, code: str) -> CandidateParts:
        if piece.fragment not in self.parts:
            prefix = f"drt{len(self.parts)}_"
            p = self.parts[piece.fragment] = candidate_parts(code, prefix, [frag.local[w] for w in frag.weights])
            self.imports += p.imports
            self.definitions.append(f"# fragment {frag.name}: {' -> '.join(frag.ops)}\n{p.definitions}\n\n{p.function}")
            if p.instance_class:
                self.init_extra.append(f"self.{prefix}impl = ({p.instance_class}(),)  # a tuple: not a submodule")
        return self.parts[piece.fragment]

    def path(self, graph: Graph, pieces: list[Piece], chosen: dict, names: dict[int, str]) -> list[str]:
        """Every piece in order, the buffer write-backs, the return."""
        local = _local_namer(set(names.values()))

        def name(t: int) -> str:
            return names.get(t) or local(t)

        body = []
        bound = bindings(graph.program, names.get, graph.inputs)
        for piece in pieces:
            if piece.kind == "torch":
                node = graph.program.nodes[piece.start]
                sizes = (lambda e: code_expr(e, bound)) if node.sym and readable(node.sym.values(), bound) else None
                body.append(on_input_device(node_line(node, name, sizes=sizes), graph, names))
                continue
            frag, code = chosen[(piece.start, piece.end)]
            p = self.candidate(piece, frag, code)
            args = ([f"self.{p.name.removesuffix('forward')}impl[0]"] if p.instance_class else []) + [
                name(t) for t in frag.inputs + frag.weights
            ]
            body.append(f"{', '.join(name(t) for t in frag.outputs)} = {p.name}({', '.join(args)})")
        body += write_back_lines(graph, name)
        outs = [name(t) for t in graph.results]
        body.append("return " + (outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"))
        return binding_lines(graph.program, "\n".join(body), bound) + body  # sizes PyTorch nodes read


DEVICE = re.compile(r"torch\.device\('[^']*'\)")


def on_input_device(line: str, graph: Graph, names: dict[int, str]) -> str:
    """A PyTorch node that creates a tensor (a mask, positions) makes it where the first input lives, not on the
    device the program was captured on: an answer converted on a CPU runs on a GPU."""
    return DEVICE.sub(f"{names[graph.inputs[0]]}.device", line) if graph.inputs else line


GUARD = '''def drt_verified_at(tensor, shape, dtype):
    """Whether the kernels were verified for this input: its dtype, and its shape where `shape` gives a size (None:
    a dim the kernels were verified to take at any size)."""
    if tensor.dtype != dtype or len(tensor.shape) != len(shape):
        return False
    for got, want in zip(tensor.shape, shape):  # a loop: all() over a generator takes half as long again
        if want is not None and got != want:
            return False
    return True'''
ORIGINAL = "drt_original_forward"  # the user's forward, kept in ModelNew for inputs the kernels were not verified at


def guard_lines(
    graph: Graph, names: dict[int, str], model: ast.ClassDef, general: bool = False, refused: tuple = ()
) -> list[str]:
    """Inputs of another shape or dtype than the verified ones go to the user's own forward: right at every
    shape the original accepts, the kernels' speed where they were verified. `general`: every kernel was verified
    at other values of the graph's size constants too (1 among them), so its symbolic dims may take any size but 0,
    provided the inputs agree on them (each size read where the kernels read it: lower/symbolic.py bindings), and
    none of `refused` ({size constant: value}, where the program has no answer: it raises there, or returns an empty
    output) holds."""
    sizes = bindings(graph.program, names.get, graph.inputs) if general else {}  # as the kernels read them
    checks, relations = [], []
    for t in graph.inputs:
        tensor, dims = graph.program.tensors[t], []
        for axis, (name, size) in enumerate(zip(tensor.dim_names(), tensor.shape)):
            here = f"{names[t]}.shape[{axis}]"
            free = general and name and readable([name], sizes)
            dims.append("None" if free else str(size))
            if free and sizes.get(name) != here:
                relations.append(f"{here} == {size_expression(name, sizes)}")
        shape = "(" + "".join(f"{d}, " for d in dims).removesuffix(" ") + ")" if dims else "()"
        checks.append(f"drt_verified_at({names[t]}, {shape}, torch.{tensor.dtype})")
    # a size of 0 was never verified; a product of sizes is 0 only where one of them is (an offset, seq_len-1, may be)
    checks += [f"{where} > 0" for expr, where in sizes.items() if re.fullmatch(r"[\w*]+", expr)]
    checks += relations + [refusal(values, sizes) for values in refused]
    if not checks:
        return []
    return [f"if not ({' and '.join(checks)}):", f"    return self.{ORIGINAL}({forward_call(model)})"]


def refusal(values: dict[str, int], sizes: dict[str, str]) -> str:
    """The guard's test that the inputs' sizes are not `values`; each size constant must be read from an input dim of
    its own."""
    unread = [n for n in values if n not in sizes]
    if unread:
        raise AssemblyError(
            f"no input dim is {unread[0]} alone: the guard cannot refuse {unread[0]}={values[unread[0]]}"
        )
    return "not (" + " and ".join(f"{sizes[n]} == {v}" for n, v in values.items()) + ")"


def size_expression(expr: str, sizes: dict[str, str]) -> str:
    """A symbolic dim's expression with each size constant replaced by the input dim it was read from (the whole
    expression's input dim where it is bound whole)."""
    if expr in sizes:
        return sizes[expr]
    return SIZE_NAME.sub(lambda m: f"({sizes[m.group(0)]})", expr)


def forward_call(model: ast.ClassDef) -> str:
    """The arguments of Model.forward passed on as they came."""
    args = next(n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward").args
    out = [a.arg for a in args.posonlyargs + args.args][1:]
    out += [f"*{args.vararg.arg}"] if args.vararg else []
    out += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    out += [f"**{args.kwarg.arg}"] if args.kwarg else []
    return ", ".join(out)


def render_module(
    source: str,
    graph: Graph,
    pieces: list[Piece],
    chosen: dict[tuple[int, int], tuple[Fragment, str]],
    eval_pieces: Optional[list[Piece]] = None,
    eval_chosen: Optional[dict[tuple[int, int], tuple[Fragment, str]]] = None,
    general: bool = False,
    refused: tuple = (),
) -> str:
    """The assembled ModelNew for `pieces` (choose_tiling's); `chosen` maps each Triton piece's (start, end) to
    its fragment and the verified candidate code run for it. Repeats of one computation (same hash) share
    their kernels, each called on its own tensors. A graph with an eval-mode graph runs `pieces` in training
    mode and `eval_pieces` (with `eval_chosen`; all of its nodes in PyTorch where None) in eval mode. `general`:
    every kernel was verified at other sizes too, and `refused` the sizes it must not take (guard_lines)."""
    tree = ast.parse(source)
    model = find_model(tree)
    signature, names = forward_names(model, graph)
    r = _Renderer(constant_lines(graph))
    body = guard_lines(graph, names, model, general, refused) + r.path(graph, pieces, chosen, names)
    if graph.eval_graph is not None:
        ev = graph.eval_graph
        _, eval_names = forward_names(model, ev, EVAL_CONSTANT)
        r.init_extra += constant_lines(ev, EVAL_CONSTANT)
        eval_body = r.path(ev, eval_pieces or all_torch(ev), eval_chosen or {}, eval_names)
        body = ["if self.training:"] + [f"    {line}" for line in body]
        body += ["else:"] + [f"    {line}" for line in eval_body]
    forward = signature + "\n" + "\n".join("    " + line for line in body)
    head = preamble(source, tree)
    have = {line.strip() for line in head}
    wanted = list(REQUIRED_IMPORTS) + r.imports
    extra = [i for i in dict.fromkeys(wanted) if i not in have and "__future__" not in i]
    module = head + [""] + extra + ["", ""] + ["\n\n\n".join(r.definitions + [GUARD]), "", ""]
    module.append(model_new_class(model, forward, r.init_extra))
    text = "\n".join(module) + "\n"
    ast.parse(text)  # a bug here should fail loudly, not in the verifier
    return text
