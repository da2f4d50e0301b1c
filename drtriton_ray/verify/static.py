"""Static (AST) checks on candidate and problem sources. Runs in the parent: it never imports the candidate.

Each violation names its rule, so a rejection tells the model (and the reader) what to fix. The rules:
- safety (every policy): banned modules, imports outside an allow-list, escape builtins, dunder/private/frame
  attributes, attribute assignment outside `self`, Triton internals, try/except, any use of the reference `Model`;
- contract: a `@triton.jit` kernel exists and a launch `kernel[grid](...)` is reachable from `ModelNew.forward`;
- policy `strict` only: no `torch.*` compute call, no `F.*`, no `torch.nn` layer call, no tensor compute method on
  the forward path. Operators (`x + y`) cannot be typed statically: the worker's dispatch audit catches those.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterable, Optional

POLICIES = ("strict", "hybrid")

# Modules that let a candidate escape the worker, read the grader's state or tamper with timers.
BANNED_MODULES = frozenset(
    {
        "os",
        "sys",
        "subprocess",
        "socket",
        "ctypes",
        "inspect",
        "gc",
        "importlib",
        "builtins",
        "threading",
        "multiprocessing",
        "_thread",
        "signal",
        "shutil",
        "pathlib",
        "io",
        "pickle",
        "marshal",
        "types",
        "weakref",
        "resource",
        "time",
        "concurrent",
        "asyncio",
        "traceback",
        "code",
        "codeop",
        "runpy",
        "atexit",
        "mmap",
        "tempfile",
        "glob",
        "urllib",
        "http",
        "requests",
        "cffi",
        "pty",
        "fcntl",
        "posix",
        "select",
        "selectors",
    }
)
# Everything a kernel module legitimately needs; anything else is rejected even if not known to be dangerous.
ALLOWED_MODULE_PREFIXES = (
    "torch",
    "triton",
    "math",
    "typing",
    "functools",
    "numpy",
    "__future__",
    "operator",
    "itertools",
    "dataclasses",
    "numbers",
)
# Sub-packages of allowed roots that build native code or reach interpreter internals.
BANNED_SUBMODULES = (
    "torch.utils.cpp_extension",
    "torch._",
    "triton.runtime",
    "triton._",
    "triton.compiler",
    "triton.backends",
    "torch.multiprocessing",
    "torch.distributed",
    "numpy.ctypeslib",
)
BANNED_CALLS = frozenset(
    {
        "eval",
        "exec",
        "compile",
        "open",
        "__import__",
        "globals",
        "locals",
        "vars",
        "getattr",
        "setattr",
        "delattr",
        "breakpoint",
        "input",
        "exit",
        "quit",
        "help",
        "memoryview",
    }
)
BANNED_NAMES = frozenset({"__builtins__", "__loader__", "__spec__", "__file__", "__import__"})
FRAME_ATTRIBUTES = frozenset(
    {
        "f_back",
        "f_locals",
        "f_globals",
        "f_code",
        "f_builtins",
        "gi_frame",
        "tb_frame",
        "cr_frame",
        "ag_frame",
        "tb_next",
        "co_code",
    }
)
# Launch paths around the hooked `run`: compiled-kernel caches and the launcher objects behind them.
TRITON_INTERNALS = frozenset(
    {
        "run",
        "warmup",
        "cache",
        "device_caches",
        "launcher",
        "pre_run_hooks",
        "add_pre_run_hook",
        "kernel_cache",
        "_call_hook",
    }
)

# strict policy: what the forward path may call in torch (allocation and shape/device queries).
TORCH_ALLOWED = frozenset(
    {
        "torch.empty",
        "torch.empty_like",
        "torch.empty_strided",
        "torch.zeros",
        "torch.zeros_like",
        "torch.ones",
        "torch.ones_like",
        "torch.full",
        "torch.full_like",
        "torch.Size",
        "torch.device",
        "torch.finfo",
        "torch.iinfo",
        "torch.is_tensor",
        "torch.get_default_dtype",
        "torch.promote_types",
        "torch.result_type",
        "torch.broadcast_shapes",
        "torch.no_grad",
        "torch.inference_mode",
    }
)
TORCH_ALLOWED_PREFIXES = ("torch.cuda.",)
# Tensor methods that compute (in-place `name_` variants included); views, shape queries and allocation pass.
TENSOR_COMPUTE_METHODS = frozenset(
    {
        "abs",
        "add",
        "addmm",
        "addcmul",
        "addcdiv",
        "all",
        "any",
        "amax",
        "amin",
        "argmax",
        "argmin",
        "baddbmm",
        "bmm",
        "ceil",
        "clamp",
        "clamp_min",
        "clamp_max",
        "clip",
        "clone",
        "copy",
        "cos",
        "cosh",
        "cumsum",
        "cumprod",
        "div",
        "divide",
        "dot",
        "eq",
        "erf",
        "exp",
        "exp2",
        "expm1",
        "floor",
        "fmod",
        "gather",
        "ge",
        "gelu",
        "gt",
        "hardtanh",
        "index_add",
        "index_copy",
        "index_fill",
        "index_put",
        "index_select",
        "le",
        "lerp",
        "log",
        "log2",
        "log10",
        "log1p",
        "log_softmax",
        "logsumexp",
        "lt",
        "masked_fill",
        "masked_scatter",
        "masked_select",
        "matmul",
        "max",
        "maximum",
        "mean",
        "median",
        "min",
        "minimum",
        "mm",
        "mul",
        "multiply",
        "mv",
        "nan_to_num",
        "ne",
        "neg",
        "norm",
        "pow",
        "prod",
        "reciprocal",
        "relu",
        "remainder",
        "round",
        "rsqrt",
        "scatter",
        "scatter_add",
        "scatter_reduce",
        "sigmoid",
        "sign",
        "silu",
        "sin",
        "sinh",
        "softmax",
        "softplus",
        "sort",
        "sqrt",
        "square",
        "std",
        "sub",
        "subtract",
        "sum",
        "tan",
        "tanh",
        "topk",
        "tril",
        "triu",
        "true_divide",
        "trunc",
        "var",
        "where",
        "to",
        "float",
        "half",
        "double",
        "bfloat16",
        "type",
        "cpu",
        "cuda",
        "numpy",
        "tolist",
        "apply",
        "map",
        "logical_and",
        "logical_or",
        "logical_not",
        "bitwise_and",
        "bitwise_or",
        "cross",
        "outer",
        "kron",
        "flip",
        "roll",
        "repeat",
        "repeat_interleave",
        "tile",
        "cat",
        "stack",
        "pad",
        "unfold",
        "fill_diagonal",
    }
)
NN_CONTAINERS = frozenset(
    {"Parameter", "ParameterList", "ParameterDict", "Module", "ModuleList", "ModuleDict", "Buffer"}
)


@dataclass(frozen=True)
class Violation:
    rule: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.rule} (line {self.line}): {self.message}"


class SourceError(ValueError):
    """The text cannot be a module of the expected kind (empty, not UTF-8, syntax error, missing class)."""


def decode_source(data: bytes, what: str) -> str:
    """Bytes of a file to text, with a one-line reason for anything that cannot be a Python module."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SourceError(f"{what} is not UTF-8 text (byte {e.start})") from None
    if "\x00" in text:
        raise SourceError(f"{what} contains NUL bytes")
    return text


def parse(text: str, what: str) -> ast.Module:
    if not text.strip():
        raise SourceError(f"{what} is empty")
    try:
        return ast.parse(text)
    except SyntaxError as e:
        raise SourceError(f"{what} has a syntax error at line {e.lineno}: {e.msg}") from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise SourceError(f"{what} cannot be parsed: {e}") from None


def check_problem(text: str) -> None:
    """A usable KernelBench problem defines `class Model`, `get_inputs` and `get_init_inputs` at module level."""
    tree = parse(text, "the problem")
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    missing = [name for name in ("Model", "get_inputs", "get_init_inputs") if name not in defined]
    if missing:
        raise SourceError(
            f"the problem does not define {', '.join(missing)} (KernelBench format needs "
            "class Model, get_inputs() and get_init_inputs())"
        )


def _root(node: ast.AST) -> Optional[ast.AST]:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


class _Aliases:
    """Names bound by imports, resolved to dotted paths (`F` -> torch.nn.functional)."""

    def __init__(self, tree: ast.Module):
        self.paths: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.paths[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.paths[a.asname or a.name] = f"{node.module}.{a.name}"

    def resolve(self, node: ast.AST) -> Optional[str]:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.paths:
            return ".".join([self.paths[node.id], *reversed(parts)])
        return None


def _is_jit_decorator(dec: ast.AST, aliases: _Aliases) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    return aliases.resolve(target) in ("triton.jit",)


def _statement_key(node: ast.stmt) -> str:
    return ast.dump(node, include_attributes=False)


@dataclass(frozen=True)
class UserCode:
    """What of a problem an answer may repeat as the user's own code: its top-level statements (imports,
    constants, helper functions and classes; not its entry points, which no candidate may reuse), and its Model's
    forward, which a converted answer keeps as the path for inputs it was not verified at."""

    statements: frozenset = frozenset()
    forward: str = ""


def _method_key(fn: ast.FunctionDef) -> str:
    """A method's arguments and body, whatever its name."""
    return ast.dump(ast.Module([*fn.body], []), include_attributes=False) + ast.dump(fn.args, include_attributes=False)


def user_code(problem: Optional[str]) -> UserCode:
    if not problem:
        return UserCode()
    try:
        tree = ast.parse(problem)
    except SyntaxError:
        return UserCode()
    entry = {"Model", "get_inputs", "get_init_inputs"}
    statements = frozenset(_statement_key(n) for n in tree.body if not (entry & _defined_names(n)))
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    methods = model.body if model else []
    forward = next((n for n in methods if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    return UserCode(statements, _method_key(forward) if forward else "")


def _defined_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    return set()


class _Checker:
    def __init__(self, tree: ast.Module, policy: str, user: UserCode = UserCode()):
        self.tree, self.policy, self.user = tree, policy, user
        self.aliases = _Aliases(tree)
        self.violations: list[Violation] = []
        self.kernels = {
            n.name
            for n in tree.body
            if isinstance(n, ast.FunctionDef) and any(_is_jit_decorator(d, self.aliases) for d in n.decorator_list)
        }
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name not in self.kernels}
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def add(self, rule: str, node: ast.AST, message: str) -> None:
        self.violations.append(Violation(rule, getattr(node, "lineno", 0), message))

    # -- safety rules, over the whole module (kernels included) --
    def safety(self) -> None:
        """Every statement but those the candidate repeats verbatim from the problem: the user's imports and
        module-level code run as the problem's do (in the same sandbox); they may still not name the Model."""
        for statement in self.tree.body:
            if _statement_key(statement) in self.user.statements:
                for node in ast.walk(statement):
                    if isinstance(node, ast.Name) and node.id == "Model":
                        self.add("reference_model", node, "the problem's Model must not be used")
            else:
                self._safety(statement)

    def _safety(self, statement: ast.stmt) -> None:
        for node in ast.walk(statement):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self._import(node)
            elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
                self.add("try_except", node, "try/except is not allowed (it hides fallbacks to PyTorch)")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BANNED_CALLS:
                self.add("banned_call", node, f"{node.func.id}() is not allowed")
            elif isinstance(node, ast.Name):
                if node.id in BANNED_NAMES:
                    self.add("banned_name", node, f"{node.id} is not allowed")
                elif node.id == "Model":
                    self.add("reference_model", node, "the problem's Model must not be used")
            elif isinstance(node, ast.Attribute):
                self._attribute(node)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                for t in targets:
                    for sub in ast.walk(t):
                        if isinstance(sub, ast.Attribute) and not (
                            isinstance(_root(sub), ast.Name) and _root(sub).id == "self"
                        ):
                            self.add(
                                "attribute_assignment",
                                sub,
                                "only attributes of self may be assigned "
                                f"(assigning {ast.unparse(sub)} could tamper with torch, triton or timers)",
                            )
                            break
            elif isinstance(node, ast.Global):
                self.add("global_statement", node, "global state is not allowed (it can cache outputs)")

    def _import(self, node: ast.AST) -> None:
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        if isinstance(node, ast.ImportFrom) and node.level:
            self.add("import_not_allowed", node, "relative imports are not allowed")
            return
        for m in modules:
            # `from a import b` may name a submodule: judge a.b, not just a.
            full = [f"{m}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else [m]
            for name in full:
                top = name.split(".")[0]
                if any(part.startswith("_") and part != "__future__" for part in name.split(".")):
                    self.add("banned_module", node, f"import of private module {name} is not allowed")
                elif top in BANNED_MODULES:
                    self.add("banned_module", node, f"import of {name} is not allowed")
                elif not any(name == p or name.startswith(p + ".") for p in ALLOWED_MODULE_PREFIXES):
                    self.add("import_not_allowed", node, f"import of {name} is outside the allow-list")
                elif any(name.startswith(b) or name + "." == b for b in BANNED_SUBMODULES):
                    self.add("banned_module", node, f"import of {name} is not allowed")

    def _aten_op(self, node: ast.Attribute) -> bool:
        """`torch.ops.aten._to_copy`: an ATen operator whose name starts with "_" is a public operator all the same
        (captured programs keep such calls in PyTorch); the policy rules still judge calling it."""
        return self.aliases.resolve(node.value) == "torch.ops.aten"

    def _attribute(self, node: ast.Attribute) -> None:
        attr, root = node.attr, _root(node)
        on_self = isinstance(root, ast.Name) and root.id == "self"
        if attr.startswith("__") and attr.endswith("__") and attr != "__init__":
            self.add("dunder_attribute", node, f"access to {attr} is not allowed")
        elif attr in FRAME_ATTRIBUTES:
            self.add("frame_access", node, f"access to frame attribute {attr} is not allowed")
        elif attr.startswith("_") and not attr.startswith("__") and not on_self and not self._aten_op(node):
            self.add("private_attribute", node, f"access to private attribute {ast.unparse(node)} is not allowed")
        elif attr in TRITON_INTERNALS and not on_self:
            self.add("triton_internal", node, f"{ast.unparse(node)}: launch kernels only as kernel[grid](...)")
        else:
            path = self.aliases.resolve(node)
            if path and any(path.startswith(b) for b in BANNED_SUBMODULES):
                self.add("banned_module", node, f"{path} is not allowed")

    # -- contract and policy rules, over the forward path --
    def forward_path(self) -> tuple[list[ast.AST], Optional[ast.ClassDef]]:
        """Function bodies reachable from ModelNew.forward (and __call__): methods via self.m(), module-level
        functions by name, every method of a helper class the path (or ModelNew.__init__) refers to."""
        cls = self.classes.get("ModelNew")
        if cls is None:
            return [], None
        methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
        todo = [(cls.name, methods[m]) for m in ("forward", "__call__") if m in methods]
        init = methods.get("__init__")
        seen: set[int] = set()
        out = []
        referenced_classes = {n.id for n in ast.walk(init) if isinstance(n, ast.Name)} if init else set()
        while todo:
            owner, fn = todo.pop()
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            out.append(fn)
            owner_methods = (
                {n.name: n for n in self.classes[owner].body if isinstance(n, ast.FunctionDef)}
                if owner in self.classes
                else {}
            )
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                    and node.attr in owner_methods
                ):
                    if not self._users_forward(owner, owner_methods[node.attr]):
                        todo.append((owner, owner_methods[node.attr]))
                elif isinstance(node, ast.Name) and node.id in self.functions:
                    todo.append((None, self.functions[node.id]))
                elif isinstance(node, ast.Name):
                    referenced_classes.add(node.id)
            for name in list(referenced_classes):
                if name in self.classes and name != cls.name:
                    todo.extend((name, n) for n in self.classes[name].body if isinstance(n, ast.FunctionDef))
        return out, cls

    def _users_forward(self, owner: Optional[str], fn: ast.FunctionDef) -> bool:
        """A method of ModelNew that is the user's Model.forward verbatim: the path a converted answer takes for
        inputs it was not verified at. The policy rules judge the kernels' path; the runtime checks see that it
        is the path verification takes (kernels launched, no PyTorch compute under the strict policy)."""
        return owner == "ModelNew" and bool(self.user.forward) and _method_key(fn) == self.user.forward

    def contract_and_policy(self) -> None:
        if not self.kernels:
            self.add("no_triton_kernel", self.tree, "no @triton.jit kernel is defined")
        path, cls = self.forward_path()
        if cls is None:
            return
        launches = [
            n
            for fn in path
            for n in ast.walk(fn)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Subscript)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id in self.kernels
        ]
        if self.kernels and not launches:
            self.add("no_launch_from_forward", cls, "no kernel[grid](...) launch is reachable from ModelNew.forward")
        if self.policy == "strict":
            layers = self._layer_attributes()
            for fn in path:
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call):
                        self._strict_call(node, layers)

    def _layer_attributes(self) -> set[str]:
        """self.<name> bound to a torch.nn layer in any __init__: calling it on the forward path is PyTorch compute."""
        names = set()
        for cls in self.classes.values():
            for fn in cls.body:
                if not (isinstance(fn, ast.FunctionDef) and fn.name == "__init__"):
                    continue
                for node in ast.walk(fn):
                    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                        path = self.aliases.resolve(node.value.func) or ""
                        if path.startswith("torch.nn.") and path.rsplit(".", 1)[-1] not in NN_CONTAINERS:
                            names |= {t.attr for t in node.targets if isinstance(t, ast.Attribute)}
        return names

    def _strict_call(self, node: ast.Call, layers: set[str]) -> None:
        func = node.func
        path = self.aliases.resolve(func)
        text = ast.unparse(func)
        if path and path.startswith("torch.nn.functional."):
            self.add("functional_call", node, f"{text}(): torch.nn.functional on the forward path (policy strict)")
        elif path and path.startswith("torch.nn.") and path.rsplit(".", 1)[-1] not in NN_CONTAINERS:
            self.add("nn_layer", node, f"{text}(): a torch.nn layer on the forward path (policy strict)")
        elif (
            path
            and path.startswith("torch.")
            and path not in TORCH_ALLOWED
            and not path.startswith(TORCH_ALLOWED_PREFIXES)
            and path.split(".")[1][:1].islower()
        ):
            self.add("torch_compute", node, f"{text}(): PyTorch compute on the forward path (policy strict)")
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Attribute)
            and isinstance(func.value.value, ast.Name)
            and func.value.value.id == "self"
            and func.value.attr in layers
            and func.attr in ("forward", "__call__")
        ):
            self.add("nn_layer", node, f"{text}(): a torch.nn layer on the forward path (policy strict)")
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
            and func.attr in layers
        ):
            self.add("nn_layer", node, f"{text}(): a torch.nn layer on the forward path (policy strict)")
        elif isinstance(func, ast.Attribute) and path is None and func.attr.rstrip("_") in TENSOR_COMPUTE_METHODS:
            self.add("tensor_method", node, f"{text}(): tensor compute method on the forward path (policy strict)")


def check_candidate(text: str, policy: str = "strict", problem: Optional[str] = None) -> list[Violation]:
    """All rule violations of a candidate's source ([] = passes). Raises SourceError when it is no ModelNew module.
    `problem`: the problem's source; the top-level statements the candidate repeats from it verbatim are the user's
    own code (a converted answer keeps the user's imports and helpers) and pass the safety rules as the problem
    does. The policy rules still judge everything the forward reaches."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    tree = parse(text, "the candidate")
    model_new = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"]
    if not model_new:
        raise SourceError("the candidate does not define class ModelNew at module level")
    if not any(isinstance(n, ast.FunctionDef) and n.name == "forward" for n in model_new[0].body):
        raise SourceError("class ModelNew has no forward method")
    checker = _Checker(tree, policy, user_code(problem))
    checker.safety()
    checker.contract_and_policy()
    return sorted(set(checker.violations), key=lambda v: (v.line, v.rule))


def summarize(violations: Iterable[Violation], limit: int = 3) -> str:
    violations = list(violations)
    text = "; ".join(str(v) for v in violations[:limit])
    return text + (f"; and {len(violations) - limit} more" if len(violations) > limit else "")
