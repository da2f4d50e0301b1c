"""Hand-made programs over the capture-only operators (no synthesizer draws them), each with its KernelBench
source: what the lowering test lowers and verifies."""

from drtriton_ray.ir import Node, Program, Tensor
from drtriton_ray.ir import problem_source as render_problem


def program(shapes: dict[int, tuple], roles: dict[int, str], nodes: list[Node], dtypes=None) -> Program:
    """Tensors by id (shape, role "input"/"weight"/"output", intermediate otherwise), nodes in order."""
    dtypes = dtypes or {}
    tensors = {
        t: Tensor(t, list(shape), dtypes.get(t, "float32"), roles.get(t, "intermediate"), "fan_in")
        for t, shape in shapes.items()
    }
    return Program(nodes, tensors, "float32", 0)


def math_from_positive() -> Program:
    """Log, Sqrt, Rsqrt, Reciprocal, PowScalar and Pow of |x| + 0.5 (their domain), fused into one kernel."""
    s = (4, 8, 16)
    nodes = [
        Node("Abs", [0], [2]),
        Node("AddScalar", [2], [3], {"value": 0.5}),
        Node("Log", [3], [4]),
        Node("Sqrt", [3], [5]),
        Node("Mul", [4, 5], [6]),
        Node("Rsqrt", [3], [7]),
        Node("Add", [6, 7], [8]),
        Node("Reciprocal", [3], [9]),
        Node("Sub", [8, 9], [10]),
        Node("PowScalar", [3], [11], {"exponent": 1.5}),
        Node("Add", [10, 11], [12]),
        Node("Pow", [3, 1], [13]),
        Node("Add", [12, 13], [14]),
    ]
    return program({t: s for t in range(15)}, {0: "input", 1: "input", 14: "output"}, nodes)


def math_on_reals() -> Program:
    """Scalar forms, Neg, Square, Erf, one-sided clamps, tanh GELU and an odd integer power of any sign."""
    s = (4, 8, 16)
    unary = [
        ("Neg", {}),
        ("Square", {}),
        ("Erf", {}),
        ("ClampMin", {"lo": -0.5}),
        ("ClampMax", {"hi": 0.5}),
        ("GELUTanh", {}),
        ("PowScalar", {"exponent": 3}),
        ("MulScalar", {"value": -1.5}),
        ("DivScalar", {"value": 4.0}),
        ("RSubScalar", {"value": 2.0}),
        ("SubScalar", {"value": 1.0}),
    ]
    nodes, acc, t = [], 0, 1
    for op, params in unary:
        nodes.append(Node(op, [0], [t], params))
        if acc:
            nodes.append(Node("Add", [acc, t], [t + 1]))
            acc, t = t + 1, t + 2
        else:
            acc, t = t, t + 1
    return program({k: s for k in range(t)}, {0: "input", acc: "output"}, nodes)


def masks() -> Program:
    """MaskedFill with -inf under a causal boolean mask, then softmax; WhereMask between two tensors."""
    nodes = [
        Node("MaskedFill", [0, 1], [3], {"value": "float('-inf')"}),
        Node("Softmax", [3], [4], {"dim": -1}),
        Node("WhereMask", [1, 0, 2], [5]),
    ]
    shapes = {0: (4, 8, 8), 1: (8, 8), 2: (4, 8, 8), 3: (4, 8, 8), 4: (4, 8, 8), 5: (4, 8, 8)}
    roles = {0: "input", 1: "input", 2: "input", 4: "output", 5: "output"}
    return program(shapes, roles, nodes, {1: "bool"})


def layout() -> Program:
    """LinearNoBias, then Permute, Narrow, Select, View and Expand."""
    nodes = [
        Node("LinearNoBias", [0], [2], weights=[1]),
        Node("Permute", [2], [3], {"dims": [0, 2, 1]}),
        Node("Narrow", [3], [4], {"dim": 1, "start": 2, "length": 8}),
        Node("Select", [4], [5], {"dim": 0, "index": 1}),
        Node("View", [5], [6], {"shape": [8, 8, 1]}),
        Node("Expand", [6], [7], {"shape": [8, 8, 3]}),
        Node("ReLU", [7], [8]),
    ]
    shapes = {0: (4, 8, 16), 1: (12, 16), 2: (4, 8, 12), 3: (4, 12, 8), 4: (4, 8, 8), 5: (8, 8)}
    shapes.update({6: (8, 8, 1), 7: (8, 8, 3), 8: (8, 8, 3)})
    return program(shapes, {0: "input", 1: "weight", 8: "output"}, nodes)


def rows() -> Program:
    """LogSumExp over the last dim and over the first (a column), added; the cross-entropy of the rows against class
    indices with -1 among them (ignored), per row and as a mean (Hugging Face's loss)."""
    nodes = [
        Node("LogSumExp", [0], [1], {"dim": -1, "keepdim": True}),
        Node("LogSumExp", [0], [2], {"dim": 0, "keepdim": True}),
        Node("Add", [1, 2], [3]),
        Node("CrossEntropy", [3, 4], [5], {"ignore_index": -1, "reduction": "none"}),
        Node("CrossEntropy", [0, 4], [6], {"ignore_index": -1, "reduction": "mean"}),
    ]
    shapes = {0: (6, 40), 1: (6, 1), 2: (1, 40), 3: (6, 40), 4: (6,), 5: (6,), 6: ()}
    p = program(shapes, {0: "input", 4: "input", 5: "output", 6: "output"}, nodes, {4: "int64"})
    p.tensors[4].init = "int:0:40:-1"
    return p


def mixed_precision() -> Program:
    """bfloat16 as Hugging Face computes it: an RMSNorm in float32 cast back before the weight (one kernel), then a
    softmax in float32 cast back (Cast)."""
    nodes = [
        Node("Cast", [0], [2], {"dtype": "float32"}),
        Node("Square", [2], [3]),
        Node("Mean", [3], [4], {"dim": -1, "keepdim": True}),
        Node("AddScalar", [4], [5], {"value": 1e-6}),
        Node("Rsqrt", [5], [6]),
        Node("Mul", [2, 6], [7]),
        Node("Cast", [7], [8], {"dtype": "bfloat16"}),
        Node("Mul", [1, 8], [9]),
        Node("Cast", [9], [10], {"dtype": "float32"}),
        Node("Softmax", [10], [11], {"dim": -1}),
        Node("Cast", [11], [12], {"dtype": "bfloat16"}),
    ]
    shapes = {t: (4, 8, 64) for t in range(13)} | {1: (64,), 4: (4, 8, 1), 5: (4, 8, 1), 6: (4, 8, 1)}
    narrow = {0, 1, 8, 9, 12}
    dtypes = {t: "bfloat16" if t in narrow else "float32" for t in shapes}
    p = program(shapes, {0: "input", 1: "input", 12: "output"}, nodes, dtypes)
    p.dtype = "bfloat16"
    return p


def slices() -> Program:
    """Narrow and Select read in place (views, no copy) by the kernels of the elementwise operators that read them:
    SwiGLU's halves of one tensor as a softmax's prologue, one half again in its epilogue, a column (strided last dim)
    squared, rows (a contiguous slice) negated as a sum's prologue, two concatenated (copied from their strides); a
    slice that is an output stays a copy."""
    nodes = [
        Node("Narrow", [0], [1], {"dim": 2, "start": 0, "length": 16}),
        Node("Narrow", [0], [2], {"dim": 2, "start": 16, "length": 16}),
        Node("Swish", [1], [3]),
        Node("Mul", [3, 2], [4]),
        Node("Softmax", [4], [5], {"dim": -1}),
        Node("Mul", [5, 1], [6]),
        Node("Select", [0], [7], {"dim": 2, "index": 3}),
        Node("Square", [7], [8]),
        Node("Narrow", [0], [9], {"dim": 0, "start": 1, "length": 2}),
        Node("Neg", [9], [10]),
        Node("Sum", [10], [11], {"dim": 0, "keepdim": False}),
        Node("Narrow", [0], [12], {"dim": 1, "start": 2, "length": 4}),
        Node("Narrow", [0], [13], {"dim": 2, "start": 8, "length": 8}),
        Node("Cat", [13, 2], [14], {"dim": 2}),
    ]
    shapes = {0: (4, 8, 32), 7: (4, 8), 8: (4, 8), 9: (2, 8, 32), 10: (2, 8, 32), 11: (8, 32), 12: (4, 4, 32)}
    shapes |= {t: (4, 8, 16) for t in range(1, 7)} | {13: (4, 8, 8), 14: (4, 8, 24)}
    return program(shapes, {0: "input", 6: "output", 8: "output", 11: "output", 12: "output", 14: "output"}, nodes)


def problem_source(p: Program) -> str:
    """The KernelBench problem; a boolean input is drawn as the causal mask (the renderer draws floats)."""
    source = render_problem(p)
    for t in p.inputs:
        if p.tensors[t].dtype == "bool":
            draw = f"torch.randn(TENSOR_{t}_SHAPE, dtype=DTYPE)"
            source = source.replace(draw, f"torch.triu(torch.ones(TENSOR_{t}_SHAPE, dtype=torch.bool), diagonal=1)")
    return source


PROGRAMS = {
    "math_from_positive": math_from_positive,
    "math_on_reals": math_on_reals,
    "masks": masks,
    "layout": layout,
    "rows": rows,
    "mixed_precision": mixed_precision,
    "slices": slices,
}
