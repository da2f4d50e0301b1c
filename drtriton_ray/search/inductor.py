"""Inductor's Triton as a candidate source (`inductor`): what torch.compile generates for a fragment, made a
self-contained module, verified and timed like any other candidate, so the search always holds one as fast as
torch.compile's.

Two layers:
- `self_contained(code, kernels, args, problem)`, pure: Inductor's output code (its `call(args)` wrapper and the
  kernels it compiles), the config its autotuner chose per kernel, and the meaning of each of `call`'s arguments ->
  a candidate module. The kernels stay as Inductor wrote them (`@triton.jit` only); the `triton_helpers` functions
  they call are copied in from the installed torch (renamed `triton_helpers_<name>`), `libdevice` and `tl_math`
  come from Triton itself; `ModelNew` runs the wrapper with plain PyTorch allocation and one launch
  `kernel[grid](...)` per kernel, the grid as Inductor's launcher computes it for the chosen config. What it cannot
  carry is refused with a one-line reason (`NotSelfContained`): library calls (mm, addmm: the lowering covers
  contractions), ATen fallbacks, grid types it does not know, a kernel without a chosen config.
- `capture(fragment, device, verifier)`, GPU only: torch.compile of the fragment's Model with its varying dims
  dynamic (capture/inductor.py), in a worker of the verifier where one is given (the service's Search has no GPU
  of its own), and the meaning of each graph input; what the first layer needs.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import re
import textwrap
import time

from drtriton_ray.capture.inductor import NotSelfContained, call_function, compiled_code, kernel_sources
from drtriton_ray.search.sources import Candidate, SourceStats, one_line

# A `call` argument: ("input", i) the forward's i-th input, ("param", "name") a parameter or buffer of the Model,
# ("size", i, d) dim d of input i.
Arg = tuple

HEADER = """import math

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.language import math as tl_math
from triton.language.extra import libdevice
"""
# Names a kernel or a helper may read besides its own: triton_helpers' `math` is Triton's (tl_math here).
KERNEL_GLOBALS = frozenset({"tl", "triton", "libdevice", "tl_math", "math"})
HELPERS = "triton_helpers"
HELPER_PREFIX = "triton_helpers_"
CONSTEXPR = ("tl.constexpr", "triton.language.constexpr")
# Calls of Inductor's wrapper that mean nothing outside torch.compile's runtime (device guard, stream, arg freeing)
DROPPED_CALLS = frozenset({"args.clear", "assert_alignment", "torch.cuda.set_device"})
PLAIN_CALLS = frozenset({"max", "min", "abs", "int", "float"})
MAX_Y_GRID = 65535  # CUDA's grid limit in y and z (Inductor's get_max_y_grid)

CHECK_LAYOUT = '''

def check_layout(t, size, stride):
    """The input layout the kernels were compiled for (a size-1 dim's stride never moves an index)."""
    if tuple(t.shape) != tuple(size) or any(n != 1 and a != b for n, a, b in zip(size, t.stride(), stride)):
        raise ValueError(f"an input {tuple(t.shape)}, strides {t.stride()}: the kernels expect {size}, {stride}")
'''
FITS_INT32 = '''

def fits_int32(*sizes):
    """Inductor indexes these kernels with 32-bit integers, as it may only where every size stays below 2**31."""
    if max(sizes) > 2**31 - 1:
        raise ValueError("a size reaches 2**31: these kernels were compiled with 32-bit indexing")
'''


def free_names(fn: ast.FunctionDef) -> set[str]:
    """The global names a function reads (not its arguments, locals or Python's builtins)."""
    a = fn.args
    local = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs + [v for v in (a.vararg, a.kwarg) if v]}
    nodes = [n for part in [a, *fn.body] for n in ast.walk(part)]  # not its decorators
    local |= {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    loads = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return loads - local - set(dir(builtins))


# -- kernels and helpers ---------------------------------------------------------------------------------------
def jit_kernel(name: str, source: str) -> tuple[str, ast.FunctionDef, set[str]]:
    """(the kernel with `@triton.jit` its only decorator, its definition, the triton_helpers functions it calls)."""
    tree = ast.parse(source)
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    for n in tree.body:
        setup = isinstance(n, ast.Expr) and ast.unparse(n) == "triton_helpers.set_driver_to_gpu()"
        if not (setup or isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef))):
            raise NotSelfContained(f"kernel {name}'s module runs other code: {ast.unparse(n)[:60]}")
    if [f.name for f in fns] != [name]:
        raise NotSelfContained(f"kernel {name}'s module defines {[f.name for f in fns]}")
    fn = fns[0]
    decorators = [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in fn.decorator_list]
    foreign = [d for d in decorators if d != "triton.jit" and not d.startswith("triton_heuristics.")]
    if "triton.jit" not in decorators or foreign:
        raise NotSelfContained(f"kernel {name} has decorators {decorators}")
    helpers = {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute) and ast.unparse(n.value) == HELPERS}
    unknown = free_names(fn) - KERNEL_GLOBALS - {HELPERS}
    if unknown:
        raise NotSelfContained(f"kernel {name} reads {', '.join(sorted(unknown))}")
    text = "\n".join(source.splitlines()[fn.lineno - 1 : fn.end_lineno])
    text = re.sub(r"\btriton_helpers\.(\w+)", HELPER_PREFIX + r"\1", text)
    return "@triton.jit\n" + textwrap.dedent(text), fn, helpers


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]):
        self.names = names

    def visit_Name(self, node: ast.Name):
        node.id = self.names.get(node.id, node.id)
        return node


def helper_sources(names: set[str]) -> list[str]:
    """The triton_helpers functions of the installed torch that `names` need, dependencies first, each renamed
    `triton_helpers_<name>` (so that `any`, `exp`, `maximum` shadow nothing) and reading `tl_math` for its `math`."""
    from torch._inductor.runtime import triton_helpers
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    jitted = (JITFunction, InterpretedFunction)  # what @triton.jit makes, compiled or interpreted

    order: list[str] = []
    done: set[str] = set()

    def add(name: str) -> None:
        if name in done:
            return
        done.add(name)
        obj = getattr(triton_helpers, name, None)
        if not isinstance(obj, jitted):
            raise NotSelfContained(f"triton_helpers.{name} is not a @triton.jit function")
        fn = ast.parse(textwrap.dedent(inspect.getsource(obj.fn))).body[0]
        free = free_names(fn)
        helpers = {g for g in free - KERNEL_GLOBALS if isinstance(getattr(triton_helpers, g, None), jitted)}
        other = free - KERNEL_GLOBALS - helpers
        if other:
            raise NotSelfContained(f"triton_helpers.{name} reads {', '.join(sorted(other))}")
        for h in sorted(helpers):
            add(h)
        renames = {"math": "tl_math", **{h: HELPER_PREFIX + h for h in helpers}}
        fn = _Rename({k: v for k, v in renames.items() if k in free}).visit(fn)
        fn.name = HELPER_PREFIX + name
        order.append(ast.unparse(fn))

    for name in sorted(names):
        add(name)
    return order


def kernel_params(fn: ast.FunctionDef) -> tuple[list[str], list[str]]:
    """(the arguments a launch passes by position, the tl.constexpr ones)."""
    runtime, constexpr = [], []
    for a in fn.args.args:
        is_constexpr = a.annotation is not None and ast.unparse(a.annotation) in CONSTEXPR
        (constexpr if is_constexpr else runtime).append(a.arg)
    return runtime, constexpr


# -- the wrapper -----------------------------------------------------------------------------------------------
def ceildiv(numel: ast.expr, block) -> ast.expr:
    """numel / block rounded up, as Inductor's launcher computes a grid (a block of 1 or none: numel itself)."""
    if block is None or block == 1:
        return numel
    top = ast.BinOp(numel, ast.Add(), ast.Constant(block - 1))
    return ast.BinOp(top, ast.FloorDiv(), ast.Constant(block))


def grid(kernel: str, grid_type: str, numels: dict[str, ast.expr], meta: dict) -> tuple[list[str], str]:
    """(statements before the launch, the grid) of Inductor's launcher for this grid type and config."""

    def numel(n: str) -> ast.expr:
        if n not in numels:
            raise NotSelfContained(f"kernel {kernel}'s grid ({grid_type}) needs {n}, which it does not take")
        return numels[n]

    if grid_type not in ("Grid1D", "Grid2D", "Grid3D", "Grid2DWithYZOverflow"):
        raise NotSelfContained(f"kernel {kernel}'s grid type {grid_type} is not handled")
    x = ceildiv(numel("xnumel"), meta.get("XBLOCK"))
    if grid_type == "Grid1D":
        return [], f"({ast.unparse(x)},)"
    y = ceildiv(numel("ynumel"), meta.get("YBLOCK"))
    if grid_type == "Grid2D":
        return [], f"({ast.unparse(x)}, {ast.unparse(y)})"
    if grid_type == "Grid3D":
        z = ceildiv(numel("znumel"), meta.get("ZBLOCK"))
        return [], f"({ast.unparse(x)}, {ast.unparse(y)}, {ast.unparse(z)})"
    raw, div = f"{kernel}_y_raw", f"{kernel}_y_div"  # Grid2DWithYZOverflow: y past CUDA's limit spills into z
    prefix = [f"{raw} = {ast.unparse(y)}", f"{div} = ({raw} + {MAX_Y_GRID - 1}) // {MAX_Y_GRID}"]
    return prefix, f"({ast.unparse(x)}, 0 if {div} == 0 else ({raw} + {div} - 1) // {div}, {div})"


class _Calls(ast.NodeTransformer):
    """The wrapper's expressions in plain PyTorch: allocation on the inputs' device, reinterpretation as a strided
    view; a call of anything else (a library kernel, an ATen fallback) is refused."""

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        func = ast.unparse(node.func)
        if func == "empty_strided_cuda" and len(node.args) == 3 and not node.keywords:
            size, stride, dtype = node.args
            return ast.parse(
                f"torch.empty_strided({ast.unparse(size)}, {ast.unparse(stride)}, dtype={ast.unparse(dtype)}, "
                "device=buffer_device)",
                mode="eval",
            ).body
        if func == "reinterpret_tensor" and len(node.args) == 4:  # its offset adds to the tensor's own
            t, size, stride, offset = (ast.unparse(a) for a in node.args)
            return ast.parse(f"{t}.as_strided({size}, {stride}, {t}.storage_offset() + {offset})", mode="eval").body
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("size", "stride") and not node.args:
            return node
        if func in PLAIN_CALLS:
            return node
        if func.startswith("extern_kernels."):
            raise NotSelfContained(f"a library kernel ({func}), not Triton: the lowering covers contractions")
        if func.startswith(("aten.", "torch.ops.")):
            raise NotSelfContained(f"an ATen fallback ({func}) in Inductor's code")
        raise NotSelfContained(f"Inductor's wrapper calls {func}, which is not handled")


class Wrapper:
    """Inductor's `call(args)` as `inductor_call(args)`: statement by statement, each launch with its config.
    `checked`: with Inductor's checks of the inputs' layout and of 32-bit sizes (a caller that admits only the exact
    sizes and layout the kernels were compiled for leaves them out: microseconds of Python a call)."""

    def __init__(self, kernels: dict, defs: dict[str, ast.FunctionDef], checked: bool = True):
        self.kernels, self.defs, self.checked = kernels, defs, checked
        self.uses_layout = self.uses_int32 = False

    def statements(self, body: list[ast.stmt]) -> list[str]:
        out = []
        for s in body:
            call = s.value if isinstance(s, (ast.Expr, ast.Assign)) and isinstance(s.value, ast.Call) else None
            func = ast.unparse(call.func) if call is not None else ""
            if func in DROPPED_CALLS or func == "get_raw_stream":
                continue
            if isinstance(s, ast.With):
                guards = [ast.unparse(i.context_expr.func) for i in s.items if isinstance(i.context_expr, ast.Call)]
                if len(guards) != len(s.items) or any(g != "torch.cuda._DeviceGuard" for g in guards):
                    raise NotSelfContained(f"Inductor's wrapper enters {ast.unparse(s.items[0])[:60]}")
                out += self.statements(s.body)
            elif isinstance(s, ast.Expr) and func == "assert_size_stride":
                if not self.checked:
                    continue
                self.uses_layout = True
                # (tensor, size, stride); newer torch adds the tensor's name
                out.append(f"check_layout({', '.join(ast.unparse(a) for a in call.args[:3])})")
            elif isinstance(s, ast.Expr) and func.endswith(".run") and func[: -len(".run")] in self.defs:
                out += self.launch(func[: -len(".run")], call)
            elif isinstance(s, (ast.Assign, ast.Expr, ast.Delete, ast.Return, ast.Pass)):
                out.append(ast.unparse(_Calls().visit(s)))
            else:
                raise NotSelfContained(f"Inductor's wrapper has a {type(s).__name__} statement, not handled")
        return out

    def launch(self, name: str, call: ast.Call) -> list[str]:
        """`name.run(*args, stream=...)` as `name[grid](*args, <config>)`, with the 32-bit indexing guard."""
        meta = self.kernels.get(name) or {}
        chosen = meta.get("chosen")
        if not chosen:
            raise NotSelfContained(f"no chosen config for kernel {name}")
        if any(kw.arg != "stream" for kw in call.keywords):
            raise NotSelfContained(f"kernel {name} is launched with {[kw.arg for kw in call.keywords]}")
        runtime, constexpr = kernel_params(self.defs[name])
        if len(call.args) != len(runtime):
            raise NotSelfContained(f"kernel {name} takes {len(runtime)} arguments, its launch passes {len(call.args)}")
        args = [_Calls().visit(a) for a in call.args]
        values = dict(zip(runtime, args))
        config = dict(chosen["kwargs"])
        missing = [c for c in constexpr if c not in config]
        if missing:
            raise NotSelfContained(f"kernel {name}'s config does not set {', '.join(missing)}")
        grid_type = (meta.get("inductor_meta") or {}).get("grid_type", "")
        prefix, launch_grid = grid(name, grid_type, values, config)
        out = list(prefix)
        signature = meta.get("signature") or {}
        if "i32" in signature.values() and self.checked:
            self.uses_int32 = True
            numels = [values[p] for p in runtime if p.endswith("numel")]
            total = functools.reduce(lambda a, b: ast.BinOp(a, ast.Mult(), b), numels or [ast.Constant(0)])
            tensors = [f"{ast.unparse(values[p])}.numel()" for p in runtime if signature.get(p, "").startswith("*")]
            out.append(f"fits_int32({', '.join([ast.unparse(total)] + tensors)})")
        options = [f"{k}={config[k]!r}" for k in constexpr]
        options += [f"num_warps={chosen['num_warps']}", f"num_stages={chosen['num_stages']}"]
        out.append(f"{name}[{launch_grid}]({', '.join([ast.unparse(a) for a in args] + options)})")
        return out


def unpacked(fn: ast.FunctionDef) -> list[str]:
    """The names `call` unpacks its arguments into (`arg0_1, arg1_1 = args`)."""
    first = fn.body[0] if fn.body else None
    if not (isinstance(first, ast.Assign) and ast.unparse(first.value) == "args"):
        raise NotSelfContained("Inductor's call(args) does not start by unpacking its arguments")
    target = first.targets[0]
    names = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
    return [n.id for n in names]


def problem_parts(problem: str) -> tuple[list[str], ast.ClassDef, list[str]]:
    """(the problem's own top-level statements but its entry points, verbatim; its Model; forward's inputs)."""
    tree = ast.parse(problem)
    lines = problem.splitlines()
    entry = {"Model", "get_inputs", "get_init_inputs"}
    own = []
    for i, n in enumerate(tree.body):
        is_docstring = i == 0 and isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
        if not is_docstring and getattr(n, "name", None) not in entry:
            own.append("\n".join(lines[n.lineno - 1 : n.end_lineno]))
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    forward = model and next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None or forward.args.vararg or forward.args.kwarg:
        raise NotSelfContained("the problem's Model has no forward with named inputs")
    return own, model, [a.arg for a in forward.args.args[1:]]


def model_new(problem: str, model: ast.ClassDef, inputs: list[str], args: list[Arg], single: bool) -> str:
    """ModelNew: the Model's class body but its forward and docstring, verbatim (the same constructor, parameters
    and buffers), and a forward that runs Inductor's wrapper on its arguments."""
    lines = problem.splitlines()
    body = []
    for i, n in enumerate(model.body):
        is_docstring = i == 0 and isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
        if not is_docstring and getattr(n, "name", None) != "forward":
            first = n.decorator_list[0].lineno if getattr(n, "decorator_list", None) else n.lineno
            body.append(textwrap.indent(textwrap.dedent("\n".join(lines[first - 1 : n.end_lineno])), "    "))
    bases = ", ".join(ast.unparse(b) for b in model.bases) or "nn.Module"
    head = [f"class ModelNew({bases}):", '    """torch.compile\'s Triton kernels (Inductor), self-contained."""', ""]
    forward = [
        f"    def forward(self, {', '.join(inputs)}):",
        f"        return {call_expr('inductor_call', args, inputs, single)}",
    ]
    return "\n".join(head + ["\n\n".join(body + ["\n".join(forward)])]) + "\n"


def call_expr(call: str, args: list[Arg], inputs: list[str], single: bool) -> str:
    """`call([...])` on the forward's values of Inductor's call arguments `args` (`[0]` where it returns one)."""
    values = []
    for a in args:
        if a[0] == "input" and a[1] < len(inputs):
            values.append(inputs[a[1]])
        elif a[0] == "size" and a[1] < len(inputs):
            values.append(f"{inputs[a[1]]}.shape[{a[2]}]")
        elif a[0] == "param" and re.fullmatch(r"\w+(\.\w+)*", a[1]):
            values.append(f"self.{a[1]}")
        else:
            raise NotSelfContained(f"an argument of Inductor's call the forward cannot give: {a}")
    return f"{call}([{', '.join(values)}]){'[0]' if single else ''}"


def self_contained(
    code: str, kernels: dict, args: list[Arg], problem: str, single: bool = True, checked: bool = True
) -> str:
    """The candidate module for `problem` (KernelBench source) from Inductor's output `code`: `kernels` maps each
    kernel's name to {"chosen": {"kwargs", "num_warps", "num_stages"}, "inductor_meta": {"grid_type"}, "signature"}
    (what `capture` records), `args` says what each argument of its `call` is, `single`: the forward returns one
    tensor (else the tuple `call` returns), `checked`: see Wrapper. Raises NotSelfContained with the reason where it
    cannot."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise NotSelfContained(f"Inductor's code does not parse: {e.msg}") from None
    sources = kernel_sources(tree)
    texts, defs, helpers = [], {}, set()
    for name, source in sources.items():
        text, fn, used = jit_kernel(name, source)
        texts.append(text)
        defs[name] = fn
        helpers |= used
    call = call_function(tree)
    names = unpacked(call)
    if len(names) != len(args):
        raise NotSelfContained(f"Inductor's call takes {len(names)} arguments, {len(args)} are known")
    tensors = [n for n, a in zip(names, args) if a[0] != "size"]
    if not tensors:
        raise NotSelfContained("no tensor argument to take the device from")
    wrapper = Wrapper(kernels, defs, checked)
    body = [ast.unparse(call.body[0]), f"buffer_device = {tensors[0]}.device"] + wrapper.statements(call.body[1:])
    if not any(re.match(r"\w+\[", line) for line in body):
        raise NotSelfContained("Inductor's call launches no Triton kernel")
    own, model, inputs = problem_parts(problem)
    own = [s for s in own if s not in HEADER.splitlines()]
    parts = [HEADER.rstrip("\n")] + (["\n".join(own)] if own else []) + helper_sources(helpers) + texts
    checks = (CHECK_LAYOUT if wrapper.uses_layout else "") + (FITS_INT32 if wrapper.uses_int32 else "")
    parts += [checks.strip("\n")] if checks else []
    parts.append("def inductor_call(args):\n" + textwrap.indent("\n".join(body), "    "))
    parts.append(model_new(problem, model, inputs, args, single))
    return '"""torch.compile\'s (Inductor\'s) Triton kernels for this program, self-contained."""\n\n' + "\n\n\n".join(
        parts
    )


# -- the live capture (GPU) ------------------------------------------------------------------------------------
SOURCE_INPUT = re.compile(r"""L\[['"](\w+)['"]\]""")
SOURCE_SIZE = re.compile(r"""L\[['"](\w+)['"]\]\.size\(\)\[(\d+)\]""")
SOURCE_STATE = re.compile(r"""\._(?:parameters|buffers|modules)\[['"](\w+)['"]\]|\.(\w+)""")


def arg_of(source: str, inputs: list[str]) -> Arg:
    """What a graph input is, from its Dynamo source's name: L['x'], L['x'].size()[1], L['self']._parameters['w']."""
    if m := SOURCE_INPUT.fullmatch(source):
        if m.group(1) in inputs:
            return ("input", inputs.index(m.group(1)))
    elif m := SOURCE_SIZE.fullmatch(source):
        if m.group(1) in inputs:
            return ("size", inputs.index(m.group(1)), int(m.group(2)))
    elif source.startswith("L['self']"):
        rest = source[len("L['self']") :]
        parts = [a or b for a, b in SOURCE_STATE.findall(rest)]
        if parts and SOURCE_STATE.sub("", rest) == "":
            return ("param", ".".join(parts))
    raise NotSelfContained(f"a graph input from {source}, not an input, a size of one or the Model's state")


def varying_dims(program) -> list[list[int]]:
    """Per forward input (the Program's inputs, in order): the dims that vary (symbolic in the IR)."""
    return [[d for d, s in enumerate(program.tensors[t].dim_names()) if s] for t in program.inputs]


def dynamic_source(fragment) -> str:
    """The fragment's source with its forward reading each size constant it uses from an input dim (`batch_size =
    tensor_0.shape[0]` first): Dynamo takes a module-level int as a constant, so a view to (batch_size * seq_len, 64)
    would pin the sizes that vary."""
    from drtriton_ray.lower.symbolic import bindings

    tree = ast.parse(fragment.source)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    forward = next(n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    used = {n.id for s in forward.body for n in ast.walk(s) if isinstance(n, ast.Name)}
    bound = [f"{name} = {where}" for name, where in bindings(fragment.program).items() if name in used]
    lines = fragment.source.splitlines()
    at, indent = forward.body[0].lineno - 1, " " * forward.body[0].col_offset
    return "\n".join(lines[:at] + [indent + b for b in bound] + lines[at:]) + "\n"


def capture(fragment, device: str = "cuda", verifier=None, static: bool = False) -> dict:
    """Inductor's code for the fragment (capture/inductor.compiled_code) compiled in a worker of `verifier` where
    one is given (its GPU, its sandbox), else here: `self_contained`'s arguments {"code", "kernels", "args",
    "single"}. `static`: compiled for the fragment's own sizes only, as torch.compile first compiles."""
    if static:
        request = (fragment.source, [[] for _ in fragment.program.inputs])
    else:
        request = (dynamic_source(fragment), varying_dims(fragment.program))
    if verifier is None:
        result = compiled_code(*request, device)
    else:
        (result,) = verifier.inductor_code([request])
        if "error" in result:
            raise NotSelfContained(result["error"])
    names = problem_parts(fragment.source)[2]
    args = [arg_of(s, names) for s in result["sources"]]
    return {"code": result["code"], "kernels": result["kernels"], "args": args, "single": result["single"]}


def inductor_candidate(fragment, device: str = "cuda", verifier=None) -> str:
    """The fragment's candidate module from torch.compile's code (raises NotSelfContained with the reason). Where
    sizes vary, Inductor's kernels for every size, and its static kernels for the fragment's own sizes in front
    (`specialized`); the general module alone where the static compile cannot be carried."""
    general = self_contained(problem=fragment.source, **capture(fragment, device, verifier))
    if not any(varying_dims(fragment.program)):
        return general
    try:
        static = capture(fragment, device, verifier, static=True)
        shapes = [fragment.program.tensors[t].shape for t in fragment.program.inputs]
        return specialized(general, static, fragment.source, shapes)
    except Exception:  # the static path is an extra: the general module stands without it
        return general


STATIC_PREFIX = "static_"


def specialized(general: str, static: dict, problem: str, shapes: list[list[int]]) -> str:
    """The `general` candidate module with a path in front for inputs of exactly `shapes`, contiguous: Inductor's
    kernels compiled for those sizes (`static`: `capture(..., static=True)`), as torch.compile runs at the sizes it
    first sees, its index math dividing by constants where the general kernels' divides by sizes known only at run
    time. Every other input takes the general kernels. The static module's functions sit beside the general ones,
    renamed `static_*`."""
    _, _, inputs = problem_parts(problem)
    if len(shapes) != len(inputs):
        raise NotSelfContained("the fragment's inputs and its forward's differ")
    # the path's test admits only the compiled sizes, contiguous: Inductor's layout and 32-bit checks hold there
    functions, renamed = prefixed_functions(self_contained(problem=problem, checked=False, **static), STATIC_PREFIX)
    test = " and ".join(f"tuple({x}.shape) == {tuple(s)} and {x}.is_contiguous()" for x, s in zip(inputs, shapes))
    call = call_expr(renamed["inductor_call"], static["args"], inputs, static["single"])
    front = [
        "        # the sizes the static kernels were compiled for",
        f"        if {test}:",
        f"            return {call}",
    ]
    tree = ast.parse(general)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    forward = next(n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    lines = general.splitlines()
    at, first_class = forward.body[0].lineno - 1, next(n for n in tree.body if isinstance(n, ast.ClassDef)).lineno - 1
    return "\n".join(lines[:first_class] + [functions, ""] + lines[first_class:at] + front + lines[at:]) + "\n"


def prefixed_functions(module: str, prefix: str) -> tuple[str, dict[str, str]]:
    """The module's top-level functions (kernels, helpers, the wrapper) with `prefix` before each name, in their
    definitions and wherever they call one another, and the renaming."""
    defs = [n for n in ast.parse(module).body if isinstance(n, ast.FunctionDef)]
    renamed = {d.name: prefix + d.name for d in defs}
    for d in defs:
        d.name = renamed[d.name]
        _Rename(renamed).visit(d)
    return "\n\n".join(ast.unparse(d) for d in defs), renamed


SHARE = 0.5  # of the search's seconds left, the most the compiles may take


class InductorSource:
    """torch.compile's own Triton per fragment (CUDA only), largest fragments first, within SHARE of the seconds
    left: each compile takes seconds and the larger a fragment the more Inductor fuses, so a fragment inside one it
    has already compiled is left out (the lowering still proposes for it)."""

    name = "inductor"

    def __init__(self, device: str = "cpu", verifier=None):
        self.device, self.verifier = device, verifier  # compiles in the verifier's workers where one is given
        self.stats = SourceStats()

    def propose(self, fragments, budget, history=()) -> list[Candidate]:
        import torch

        if not str(self.device).startswith("cuda"):
            self.stats.fail("inductor: Triton code generation needs a CUDA device")
            return []
        if self.verifier is None and not torch.cuda.is_available():
            self.stats.fail("inductor: this process sees no CUDA device, and no verifier was given")
            return []
        deadline = time.monotonic() + budget.seconds * SHARE
        out, made = [], []
        for f in sorted(fragments, key=lambda f: -f.size)[: max(budget.candidates, 0)]:
            if any(g.start <= f.start and f.end <= g.end for g in made):
                continue
            if time.monotonic() > deadline:
                self.stats.fail("inductor: its share of the budget's seconds ran out")
                break
            self.stats.asked += 1
            try:
                code = inductor_candidate(f, self.device, self.verifier)
            except NotSelfContained as e:
                self.stats.fail(f"inductor: {e}"[:160])
                continue
            except Exception as e:  # torch.compile failing on one fragment: recorded, the others go on
                self.stats.fail(f"torch.compile failed on {f.name}: {one_line(e)}")
                continue
            out.append(Candidate(f.hash, self.name, code, "torch.compile (Inductor)"))
            made.append(f)
        self.stats.proposed += len(out)
        return out
