"""A user's PyTorch program (KernelBench format) captured into a `Graph`: every ATen call one node, a registry
operator where one computes exactly the call (capture/aten.py), else a `Torch` node that keeps the call.

Why torch.export (non-strict): it traces the real forward on fake tensors through Python as written, so any module,
helper function or tensor method works, and it records ATen calls with their schema (defaults, overloads), shapes
and dtypes (`meta["val"]`) and the user's line (`meta["stack_trace"]`). fx.symbolic_trace records Python-level
calls (modules, methods) that would need one mapping per spelling and knows no shapes; dynamo (strict export)
refuses more user code and brings its own bytecode machinery. Non-strict export refuses exactly what a graph cannot
hold: control flow on tensor values (data-dependent guards), which ends here as a CaptureError naming the line.

Why `run_decompositions({})`: the training IR that export returns keeps in-place calls (`relu_`, `x.mul_(2)`,
buffer updates), whose readers would see the wrong values if taken as functional. An empty decomposition table
only functionalizes: every op stays as high-level as it was (linear, layer_norm, softmax, conv2d, gelu), except
training batch norm (`_native_batch_norm_legit_functional`, mapped too), dropout (`native_dropout`) and chunk
(`split`); buffer updates become extra outputs (kept as the Graph's `updates`).

Both modes: the program is captured in training mode (nn.Module's default, KernelBench's) and again in eval mode;
where the two graphs differ (batch norm: batch statistics or running ones; dropout: random or the identity; any
`self.training` branch) the eval-mode one rides along as `eval_graph`. In training mode batch norm normalizes with
batch statistics (the registry's BatchNorm) and its running-statistics update is kept: the new buffer values are
extra outputs named in `updates` (graph.py), computed by Torch nodes at the end of the graph (`var_mean` of the
input, `lerp` by the momentum) where the registry's BatchNorm makes only the normalized output; dropout with p > 0
stays a Torch node and makes the outputs random. Forward arguments that are not tensors
are specialized to the values `get_inputs()` gave (noted). Parameters and buffers are weights named in `state`;
tensors the forward creates are `constants` (values up to CONSTANT_LIMIT elements). Every tensor gets an `init`
hint from one run of the captured program on the user's own inputs (intermediates too: fragments start there).
"""

from __future__ import annotations

import operator
import re
import traceback
import types
from typing import Optional, Sequence

import torch
import torch.export  # loaded with this module: a worker imports it once, before its sandbox

from drtriton_ray.capture.aten import Site, bind, dtype_name, is_alias, registry_nodes, widened
from drtriton_ray.capture.dims import mark_symbolic, size_constants
from drtriton_ray.capture.errors import CaptureError
from drtriton_ray.ir import TORCH_OP, Graph, Node, Program, Tensor

FILENAME = "<problem>"  # the user's source compiles under this name: tracebacks and stack traces point into it
EVAL_BATCH_NORM = "aten._native_batch_norm_legit_no_training.default"
CONSTANT_LIMIT = 4096  # elements of one tensor the forward creates, kept as values in the Graph
_FRAME = re.compile(r'File "' + re.escape(FILENAME) + r'", line (\d+)')


def capture_source(source: str, device: str = "cpu", seed: int = 0, dynamic: Optional[Sequence[str]] = ()) -> Graph:
    """The Graph of the program `source` defines, on `device`. Runs the user's code: callers run it only inside
    the verifier's sandboxed workers (capture/sandbox.py). `dynamic`: the size constants that may vary (dims.py);
    None infers them, () keeps every size fixed."""
    mod = load(source)
    model, inputs = build(mod, device, seed, source)
    check_forward(model, inputs, source)
    graph = capture_mode(model, inputs, source, training=True)
    try:
        eval_graph = capture_mode(model, inputs, source, training=False)
    except CaptureError as e:
        graph.notes.append(f"eval mode cannot be captured ({e}): only the training-mode graph is kept")
        eval_graph = graph
    if eval_graph.canonical() != graph.canonical():
        graph.eval_graph = eval_graph
        graph.notes.append("the forward computes differently in eval mode: its eval-mode graph is kept too")
    if dynamic is None or dynamic:
        constants = size_constants(source, vars(mod)) if dynamic is None else declared(mod, dynamic)
        mark_symbolic(graph, constants, lambda values: recapture(source, device, seed, values), dynamic is not None)
    return graph


def declared(mod, names: Sequence[str]) -> dict[str, int]:
    out = {}
    for name in names:
        value = getattr(mod, name, None)
        if type(value) is not int or value < 1:
            raise CaptureError(f"--dynamic {name}: the problem has no module-level size constant {name} (an integer)")
        out[name] = value
    return out


def recapture(source: str, device: str, seed: int, values: dict) -> Graph:
    """The training-mode graph with some module-level constants set to other values."""
    mod = load(source)
    for name, value in values.items():
        setattr(mod, name, value)
    model, inputs = build(mod, device, seed, source)
    return capture_mode(model, inputs, source, training=True)


def capture_mode(model, inputs: list, source: str, training: bool) -> Graph:
    """The Graph of the model's forward in training or eval mode."""
    model.train(training)
    ep = export(model, inputs, source)
    builder = Builder(ep, source)
    graph = builder.build()
    hints(graph, builder, run_exported(ep, inputs))
    return graph


# -- running the user's code ---------------------------------------------------------------------
def what(e: BaseException) -> str:
    """`Type: first line of the message`, one line and short."""
    lines = str(e).strip().splitlines()
    text = lines[0] if lines else ""
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


def where_in(e: BaseException, source: str) -> str:
    """` (line N: code)` for the innermost frame of the user's file in e's traceback or message; "" if none."""
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == FILENAME]
    lines += [int(n) for n in _FRAME.findall(str(e))]
    if isinstance(e, SyntaxError) and e.filename == FILENAME and e.lineno:
        lines.append(e.lineno)
    return _line_text(lines[-1], source) if lines else ""


def _line_text(n: int, source: str) -> str:
    lines = source.splitlines()
    code = lines[n - 1].strip() if 0 < n <= len(lines) else ""
    return f" (line {n}: {code})"


def load(source: str) -> types.ModuleType:
    mod = types.ModuleType("problem")
    try:
        exec(compile(source, FILENAME, "exec"), mod.__dict__)
    except (Exception, SystemExit) as e:
        raise CaptureError(f"the program does not load: {what(e)}{where_in(e, source)}") from None
    for needed in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, needed):
            raise CaptureError(f"the problem defines no {needed}")
    return mod


def build(mod, device: str, seed: int, source: str) -> tuple[torch.nn.Module, list]:
    """Model(*get_init_inputs()) and get_inputs(), both made on the device under the seed."""
    torch.manual_seed(seed)
    with torch.device(device):
        init = _call("get_init_inputs()", mod.get_init_inputs, source)
        model = _call("Model(*get_init_inputs())", lambda: mod.Model(*init), source)
        inputs = _call("get_inputs()", mod.get_inputs, source)
    if not isinstance(model, torch.nn.Module):
        raise CaptureError("Model(*get_init_inputs()) is not a torch.nn.Module")
    if not isinstance(inputs, (list, tuple)):
        raise CaptureError(f"get_inputs() returns {type(inputs).__name__}, not a list of inputs")
    return model, list(inputs)


def _call(name: str, fn, source: str):
    try:
        return fn()
    except (Exception, SystemExit) as e:
        raise CaptureError(f"{name} raised {what(e)}{where_in(e, source)}") from None


def check_forward(model, inputs: list, source: str) -> None:
    """One eager run: the forward's own errors, with its line, and what it returns (tensors only)."""
    with torch.no_grad():
        out = _call("forward", lambda: model(*inputs), source)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    bad = [type(o).__name__ for o in outs if not isinstance(o, torch.Tensor)]
    if bad or not outs:
        raise CaptureError(
            f"forward returns {bad[0] if bad else 'nothing'}; capture needs a tensor or a tuple/list of tensors"
        )


def export(model, inputs: list, source: str):
    try:
        ep = torch.export.export(model, tuple(inputs), strict=False)
        return ep.run_decompositions({})
    except Exception as e:
        text = f"{type(e).__name__} {e}".lower()
        if "data-dependent" in text or "datadependent" in text:
            raise CaptureError(
                f"data-dependent control flow{where_in(e, source)}: a graph holds one path for every input"
            ) from None
        raise CaptureError(f"torch.export cannot capture the program: {what(e)}{where_in(e, source)}") from None


def run_exported(ep, inputs: list) -> dict:
    """Every FX node's value in one run of the captured graph on the user's inputs."""
    values: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            values[n.name] = super().run_node(n)
            return values[n.name]

    user = iter(inputs)
    flat = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind.name == "USER_INPUT":
            flat.append(next(user))
        else:
            flat.append(ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target])
    with torch.no_grad():
        Recorder(ep.graph_module).run(*flat)
    return values


# -- the graph -----------------------------------------------------------------------------------
def encode(value, ids) -> object:
    """A Torch node's argument as graph.py encodes it; `ids(fx_node)` gives a tensor's id."""
    if isinstance(value, torch.fx.Node):
        tid = ids(value)
        if not isinstance(tid, int):
            raise CaptureError(f"an argument {value.name} that is not one tensor")
        return {"$t": tid}
    for kind, key in ((torch.dtype, "$dtype"), (torch.memory_format, "$memory_format"), (torch.layout, "$layout")):
        if isinstance(value, kind):
            return {key: str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"$device": str(value)}
    if isinstance(value, (list, tuple)):
        return [encode(v, ids) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise CaptureError(f"an argument of type {type(value).__name__} that a graph cannot hold")


def tensor_inputs(value) -> list[int]:
    """The tensor ids an encoded argument list reads, in order of appearance, each once."""
    found: list[int] = []

    def walk(v):
        if isinstance(v, dict) and "$t" in v and v["$t"] not in found:
            found.append(v["$t"])
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(value)
    return found


def classify(t: torch.Tensor) -> str:
    """The init hint of a value (graph.py): how a sub-problem draws inputs like it."""
    if t.dtype == torch.bool:
        return "bool"
    if not t.is_floating_point():
        if not t.numel():
            return "int:0:1"
        lo, hi = int(t.min()), int(t.max()) + 1
        if lo < 0 < hi and t[t < 0].unique().numel() == 1:  # indices and one sentinel (an ignored label, -100)
            return f"int:{int(t[t >= 0].min())}:{hi}:{lo}"
        return f"int:{lo}:{hi}"
    if t.numel() == 0 or not bool(torch.isfinite(t).all()):
        return ""
    if bool((t >= 0).all()) and bool((t < 1).all()):
        return "uniform"
    return "positive" if bool((t > 0).all()) else ""


def hints(graph: Graph, builder: "Builder", values: dict) -> None:
    for tid, t in graph.program.tensors.items():
        name, k = builder.made_by[tid]
        value = values.get(name)
        value = value[k] if k is not None and isinstance(value, (tuple, list)) else value
        if isinstance(value, torch.Tensor):
            t.init = classify(value.detach())


class Builder:
    """Walks the exported graph once: placeholders, calls (registry or Torch nodes), outputs; then drops what no
    output reads."""

    def __init__(self, ep, source: str):
        self.ep, self.source = ep, source
        self.tensors: dict[int, Tensor] = {}
        self.ids: dict[str, object] = {}  # FX node name -> tensor id, or a list of them for several results
        self.made_by: dict[int, tuple[str, int | None]] = {}  # tensor id -> (FX node name, result index)
        self.nodes: list[tuple[Node, str, str]] = []  # with the user's line and, for Torch nodes, why
        self.stats: dict[str, dict[int, int]] = {}  # batch norm FX node -> {3: batch mean id, 4: batch var id}
        self.casts: dict[tuple[int, str], int] = {}  # (tensor id, float dtype) -> its Cast's output
        self.graph = Graph(Program([], {}, "float32", 0), [])

    def build(self) -> Graph:
        self.placeholders()
        for n in self.ep.graph.nodes:
            if n.op == "call_function":
                self.call(n)
            elif n.op == "get_attr":
                raise CaptureError(f"a submodule call torch.export keeps as {n.target} (control flow operators)")
        self.finish(*self.outputs())
        return self.graph

    def id_of(self, fx_node):
        return self.ids.get(fx_node.name)

    def new_tensor(self, val, role: str, name: str, index=None) -> int:
        tid = len(self.made_by)
        self.tensors[tid] = Tensor(tid, list(val.shape), str(val.dtype).removeprefix("torch."), role)
        self.made_by[tid] = (name, index)
        return tid

    def line(self, fx_node) -> str:
        found = _FRAME.findall(fx_node.meta.get("stack_trace") or "")
        return _line_text(int(found[-1]), self.source)[2:-1] if found else ""

    def placeholders(self) -> None:
        """The forward's tensor arguments first (ids 0, 1, ...), then parameters, buffers and constants."""
        specs = list(
            zip([n for n in self.ep.graph.nodes if n.op == "placeholder"], self.ep.graph_signature.input_specs)
        )
        user = [(n, s) for n, s in specs if s.kind.name == "USER_INPUT"]
        for k, (n, _) in enumerate(user):
            val = n.meta.get("val")
            if isinstance(val, torch.Tensor):
                self.ids[n.name] = self.new_tensor(val, "input", n.name)
                self.graph.inputs.append(self.ids[n.name])
            else:
                self.graph.notes.append(f"forward argument {k} ({val!r}) is specialized: the graph holds its value")
        for n, spec in specs:
            if spec.kind.name not in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
                continue
            tid = self.ids[n.name] = self.new_tensor(n.meta["val"], "weight", n.name)
            if spec.kind.name == "CONSTANT_TENSOR":
                self.graph.constants[tid] = self.constant(self.ep.constants[spec.target])
            else:
                self.graph.state[tid] = spec.target

    @staticmethod
    def constant(value: torch.Tensor) -> dict:
        if value.numel() > CONSTANT_LIMIT:
            raise CaptureError(
                f"the forward creates a tensor of {value.numel()} elements (at most {CONSTANT_LIMIT}): "
                "make it a buffer of the module (register_buffer)"
            )
        return {"values": value.detach().cpu().tolist(), "dtype": str(value.dtype).removeprefix("torch.")}

    def results(self, n) -> list[int]:
        """New tensors for a call's results: [] when it returns no tensor."""
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            return [self.new_tensor(val, "intermediate", n.name)]
        if isinstance(val, (list, tuple)) and val and all(isinstance(v, torch.Tensor) for v in val):
            return [self.new_tensor(v, "intermediate", n.name, k) for k, v in enumerate(val)]
        if n.users:
            raise CaptureError(f"{n.target} returns {type(val).__name__}, which a graph cannot hold{self.at(n)}")
        return []

    def at(self, n) -> str:
        line = self.line(n)
        return f" ({line})" if line else ""

    def call(self, n) -> None:
        if n.target is operator.getitem:
            self.ids[n.name] = self.ids[n.args[0].name][n.args[1]]
            return
        if not isinstance(n.target, torch._ops.OpOverload):
            raise CaptureError(f"{n.target} is not an ATen operator: capture cannot keep it{self.at(n)}")
        outs = self.results(n)
        if not outs:
            return
        site = Site(str(n.target), bind(n.target, n.args, n.kwargs), n, self.id_of, self.tensors, outs)
        if is_alias(site):
            for t in outs:
                del self.tensors[t]
            self.ids[n.name] = site.t("self") if "self" in site.args else site.t("input")
            return
        self.ids[n.name] = outs[0] if isinstance(n.meta["val"], torch.Tensor) else outs
        made, ids = self.promote(site)
        nodes, why = registry_nodes(Site(site.target, site.args, n, ids, self.tensors, outs)), ""
        if isinstance(nodes, str):
            for node in reversed(made):  # the last tensors made: ids stay dense
                del self.tensors[node.outputs[0]], self.made_by[node.outputs[0]]
            made, nodes, why = [], [self.torch_node(n, outs)], nodes
        for node in made + nodes:
            if node.op == "Cast":
                self.casts.setdefault((node.inputs[0], node.params["dtype"]), node.outputs[0])
        self.nodes += [(node, self.line(n), why) for node in made + nodes]

    def promote(self, site: Site) -> tuple[list[Node], object]:
        """The Casts PyTorch's type promotion implies for a call's operands (aten.widened), each tensor's Cast to that
        dtype made once (an explicit `x.float()` before is reused), and the call's tensor ids with them."""
        widen = widened(site.target, site.args, site.fx.meta.get("val"))
        if not widen:
            return [], self.id_of
        made, to, cast_of = [], dtype_name(site.fx.meta["val"]), {}
        for v in widen:
            src = self.id_of(v)
            tid = self.casts.get((src, to), next((m.outputs[0] for m in made if m.inputs[0] == src), None))
            if tid is None:
                tid = len(self.made_by)
                self.tensors[tid] = Tensor(tid, list(self.tensors[src].shape), to, "intermediate")
                self.made_by[tid] = self.made_by[src]  # its values are the operand's (hints)
                made.append(Node("Cast", [src], [tid], {"dtype": to}))
            cast_of[v.name] = tid
        return made, lambda fx: cast_of.get(fx.name, self.id_of(fx))

    def torch_node(self, n, outs: list[int]) -> Node:
        target, args, kwargs = str(n.target), list(n.args), dict(n.kwargs)
        if target == EVAL_BATCH_NORM and all(u.target is operator.getitem and u.args[1] == 0 for u in n.users):
            # the verifier refuses private names (torch.ops.aten._native...): the public call, one result
            a = bind(n.target, n.args, n.kwargs)
            stats = [a[k] for k in ("input", "weight", "bias", "running_mean", "running_var")]
            target, args, kwargs, outs = (
                "aten.batch_norm.default",
                stats + [False, a["momentum"], a["eps"], True],
                {},
                outs[:1],
            )
        args = encode(args, self.id_of)
        kwargs = {k: encode(v, self.id_of) for k, v in kwargs.items()}
        params = {"target": target, "args": args, "kwargs": kwargs}
        return Node(TORCH_OP, tensor_inputs([args, list(kwargs.values())]), outs, params)

    def outputs(self) -> tuple[list[int], dict[int, str]]:
        """The forward's tensors in return order, and the buffer updates (tensor id -> buffer name). One that no
        node makes here (an input, a weight, a tensor returned twice) gets a copy (a Torch clone), so that every
        output is one node's own result; a running statistic of a batch norm mapped to the registry gets its own
        nodes (`running_stat`)."""
        out = next(n for n in self.ep.graph.nodes if n.op == "output")
        produced = {t for node, _, _ in self.nodes for t in node.outputs}
        results: list[int] = []
        updates: dict[int, str] = {}
        for arg, spec in zip(out.args[0], self.ep.graph_signature.output_specs):
            kind = spec.kind.name
            if kind == "USER_INPUT_MUTATION":
                self.graph.notes.append(f"the forward updates its input {spec.target} in place: dropped")
                continue
            tid = self.id_of(arg) if isinstance(arg, torch.fx.Node) else None
            if not isinstance(tid, int):
                raise CaptureError(f"the forward returns {arg!r}, not a tensor")
            if kind == "BUFFER_MUTATION" and tid not in produced and self.running_stat(tid):
                produced |= {t for node, _, _ in self.nodes for t in node.outputs}
            elif kind == "BUFFER_MUTATION" and tid not in produced:
                self.graph.notes.append(f"the forward updates {spec.target} in place: dropped, no node makes it")
                continue
            if tid not in produced or tid in results or tid in updates:
                copy = self.new_tensor(arg.meta["val"], "intermediate", *self.made_by[tid])
                params = {"target": "aten.clone.default", "args": [{"$t": tid}], "kwargs": {}}
                self.nodes.append((Node(TORCH_OP, [tid], [copy], params), "", "an output that no operator makes"))
                tid = copy
            if kind == "BUFFER_MUTATION":
                updates[tid] = spec.target
                self.graph.notes.append(f"the forward updates {spec.target} in place: written back in training mode")
            else:
                results.append(tid)
        return results, updates

    def running_stat(self, tid: int) -> bool:
        """Nodes for a new running mean or variance (result 3 or 4) of a training batch norm that the registry's
        BatchNorm computes (it makes only the normalized output): the input's unbiased `var_mean` over every dim
        but the channels (cast to the statistics' dtype where it differs), then `lerp` from the old statistic by
        the momentum. False for any other tensor."""
        name, k = self.made_by[tid]
        fx = next(n for n in self.ep.graph.nodes if n.name == name)
        if str(fx.target) != "aten._native_batch_norm_legit_functional.default" or k not in (3, 4):
            return False
        a = bind(fx.target, fx.args, fx.kwargs)
        x, old = self.id_of(a["input"]), self.id_of(a["running_mean" if k == 3 else "running_var"])
        line, why = self.line(fx), "the running statistics of a batch norm"
        if name not in self.stats:
            stats = {j: self.new_tensor(fx.meta["val"][j], "intermediate", name, j) for j in (3, 4)}
            dims = [0] + list(range(2, len(self.tensors[x].shape)))
            params = {"target": "aten.var_mean.correction", "args": [{"$t": x}, dims], "kwargs": {"correction": 1}}
            self.nodes.append((Node(TORCH_OP, [x], [stats[4], stats[3]], params), line, why))
            for j, t in list(stats.items()):
                if self.tensors[t].dtype != self.tensors[x].dtype:
                    stats[j] = self.new_tensor(fx.meta["val"][j], "intermediate", name, j)
                    cast = {"target": "aten.to.dtype", "args": [{"$t": t}, {"$dtype": self.tensors[t].dtype}]}
                    self.tensors[t].dtype = self.tensors[x].dtype  # what var_mean returns
                    self.nodes.append((Node(TORCH_OP, [t], [stats[j]], {**cast, "kwargs": {}}), line, why))
            self.stats[name] = stats
        batch = self.stats[name][k]
        params = {"target": "aten.lerp.Scalar", "args": [{"$t": old}, {"$t": batch}, a["momentum"]], "kwargs": {}}
        self.nodes.append((Node(TORCH_OP, [old, batch], [tid], params), line, why))
        return True

    def live(self, outputs: list[int]) -> list[tuple[Node, str, str]]:
        """The nodes some of `outputs` read, in program order."""
        needed, kept = set(outputs), []
        for node, line, why in reversed(self.nodes):
            if needed & set(node.outputs):
                kept.append((node, line, why))
                needed |= set(node.inputs) | set(node.weights)
        return kept[::-1]

    def finish(self, results: list[int], updates: dict[int, str]) -> None:
        """Keep the nodes some output reads, their tensors, state and constants; the nodes only buffer updates read
        go last (a fragment of the forward's own nodes is not cut by them); outputs last, results then updates."""
        outputs = results + list(updates)
        main = {id(node) for node, _, _ in self.live(results)}
        kept = self.live(outputs)
        kept = [k for k in kept if id(k[0]) in main] + [k for k in kept if id(k[0]) not in main]
        needed = {t for node, _, _ in kept for t in node.inputs + node.weights} | set(outputs)
        g = self.graph
        g.updates = updates
        keep = set(g.inputs) | needed | {t for node, _, _ in kept for t in node.outputs}
        for tid in keep:
            t = self.tensors[tid]
            t.role = "output" if tid in outputs else t.role
        order = sorted(t for t in keep if t not in outputs) + outputs
        g.program.tensors = {t: self.tensors[t] for t in order}
        g.program.nodes = [node for node, _, _ in kept]
        g.lines = {k: line for k, (_, line, _) in enumerate(kept) if line}
        g.notes += [
            f"{node.params['target']} stays PyTorch{f' ({line})' if line else ''}: {why}"
            for node, line, why in kept
            if why
        ]
        g.state = {t: name for t, name in g.state.items() if t in keep}
        g.constants = {t: c for t, c in g.constants.items() if t in keep}
        floats = [t.dtype for t in g.program.tensors.values() if t.dtype in ("float32", "float16", "bfloat16")]
        g.program.dtype = floats[0] if floats else "float32"
