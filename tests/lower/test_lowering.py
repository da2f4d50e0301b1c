"""The reference lowering against PyTorch, in the Triton interpreter: every operator, and whole
level-2 and level-5 programs (fused elementwise groups, fan-out, several outputs)."""

import importlib.util

import pytest
import torch

from drtriton_ray.lower.emit import lower_program
from drtriton_ray.lower.grouping import fusion_groups
from drtriton_ray.ops import SYNTH_NAMES
from drtriton_ray.ir import Program
from drtriton_ray.synth import Sampler, SynthConfig
from drtriton_ray.ir import load_problem
from drtriton_ray.verify.static import check_candidate


def _import(source: str, path):
    """Import the candidate from a file, as the verifier does (Triton reads kernel source)."""
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def model_pair(source: str, module, seed: int = 0):
    """(the problem's Model, the candidate module's ModelNew, inputs), both built under the same seed."""
    ref = load_problem(source)
    torch.manual_seed(seed)
    model = ref.Model()
    torch.manual_seed(seed)
    return model, module.ModelNew(), ref.get_inputs()


def check_lowering(rec, tmp_path, input_seed: int = 1234):
    prog = Program.from_json(rec.dag)
    code = lower_program(prog, rec.source)
    assert not check_candidate(code, "strict")  # the verifier's parent-side rules, as the gate applies them
    cand = _import(code, tmp_path / f"cand_{rec.id.replace('-', '_')}.py")
    ref = load_problem(rec.source)
    torch.manual_seed(rec.seed)
    model = ref.Model()
    torch.manual_seed(rec.seed)
    new = cand.ModelNew()
    torch.manual_seed(input_seed)
    inputs = ref.get_inputs()
    with torch.no_grad():
        want, got = model(*inputs), new(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert type(g) is torch.Tensor and g.shape == w.shape and g.dtype == w.dtype
        if w.dtype == torch.int64:
            assert torch.equal(w, g)
        else:
            tol = 1e-3 if w.dtype == torch.float32 else 2e-2
            torch.testing.assert_close(g, w, atol=tol, rtol=tol)


@pytest.mark.parametrize("name", sorted(SYNTH_NAMES))
def test_every_operator_lowers(name, tmp_path):
    check_lowering(Sampler(SynthConfig(level=1, profile="small", ops=(name,)), seed=31).sample(0), tmp_path)


def test_level2_programs(tmp_path):
    sampler = Sampler(SynthConfig(level=2, profile="small"), seed=32)
    for i in range(12):
        check_lowering(sampler.sample(i), tmp_path)


def test_level5_programs_fuse_elementwise(tmp_path):
    elementwise = ("Add", "Mul", "ReLU", "GELU", "Sigmoid", "Where", "Lerp", "Sum", "Softmax", "Matmul")
    sampler = Sampler(SynthConfig(level=5, profile="small", ops=elementwise), seed=33)
    fused = 0
    for i in range(8):
        rec = sampler.sample(i)
        fused += any(len(g) > 1 for g in fusion_groups(Program.from_json(rec.dag)))
        check_lowering(rec, tmp_path)
    assert fused >= 2, "elementwise chains should fuse into one kernel"


def test_half_precision(tmp_path):
    sampler = Sampler(
        SynthConfig(level=2, profile="small", dtype="float16", ops=("Add", "ReLU", "Softmax", "Sum", "LayerNorm")),
        seed=34,
    )
    for i in range(4):
        check_lowering(sampler.sample(i), tmp_path)


def test_lowering_from_source_alone(tmp_path):
    """`drtriton lower PROBLEM.py`: the DAG is recovered from the problem text and one run."""
    from drtriton_ray.lower.emit import lower_source
    from drtriton_ray.lower.parse import UnsupportedProblem, program_from_source

    sampler = Sampler(SynthConfig(level=5, profile="small"), seed=35)
    for i in range(6):
        rec = sampler.sample(i)
        parsed, original = program_from_source(rec.source), Program.from_json(rec.dag)
        assert [(n.op, n.inputs, n.outputs, n.weights) for n in parsed.nodes] == [
            (n.op, n.inputs, n.outputs, n.weights) for n in original.nodes
        ]
        assert {k: (t.shape, t.role) for k, t in parsed.tensors.items()} == {
            k: (t.shape, t.role) for k, t in original.tensors.items()
        }
        assert lower_source(rec.source) == lower_program(original, rec.source)
    with pytest.raises(UnsupportedProblem, match="no operator of the registry"):
        program_from_source(
            rec.source.replace("return tensor_", "tensor_99 = torch.fft.fft(tensor_0)\n        return tensor_", 1)
        )
    with pytest.raises(UnsupportedProblem, match="does not load"):
        program_from_source("def broken(:\n")


def test_lower_cli(tmp_path):
    from typer.testing import CliRunner

    from drtriton_ray.cli import app

    runner = CliRunner()
    rec = Sampler(SynthConfig(level=2, profile="small"), seed=36).sample(0)
    problem = tmp_path / "problem.py"
    problem.write_text(rec.source)
    r = runner.invoke(app, ["lower", str(problem), "--out", str(tmp_path / "solution.py")])
    assert r.exit_code == 0, r.output
    assert "class ModelNew(nn.Module)" in (tmp_path / "solution.py").read_text()
    bad = {
        "empty.py": b"",
        "latin1.py": "x = 'caf\xe9'".encode("latin-1"),
        "nomodel.py": b"x = 1\n",
        "syntax.py": b"class Model(:\n",
    }
    for name, content in bad.items():
        (tmp_path / name).write_bytes(content)
        r = runner.invoke(app, ["lower", str(tmp_path / name)])
        assert r.exit_code == 2 and "error:" in r.output and "Traceback" not in r.output, (name, r.output)
    r = runner.invoke(app, ["lower", str(tmp_path / "missing.py")])
    assert r.exit_code == 2 and "cannot read" in r.output


CONVS = [  # (spatial dims, transposed, groups, in channels, out channels, size, kernel, stride, padding, dilation)
    (1, False, 1, 3, 5, 11, 3, 2, 1, 1),
    (2, False, 2, 4, 6, 7, 3, 1, 2, 2),
    (3, False, 1, 2, 17, 5, 2, 3, 0, 1),
    (1, True, 1, 3, 4, 6, 4, 3, 2, 2),
    (2, True, 3, 3, 6, 5, 3, 2, 1, 1),
    (3, True, 1, 7, 17, 3, 3, 2, 1, 1),
    (3, True, 1, 1, 8, 2, 4, 1, 2, 1),
    (2, True, 1, 2, 3, 4, 3, 3, 0, 2),
    (3, True, 1, 2, 8, 1, 4, 2, 2, 1),  # a 1x1x1 output: fewer phases than the stride
    # few channels, below tl.dot's 16 (l5-s7-000005/30 on an H100: a broadcast product there was off)
    (1, True, 1, 1, 32, 9, 1, 3, 0, 1),
    (1, True, 1, 1, 32, 20, 7, 3, 0, 1),
    (1, False, 1, 2, 32, 12, 1, 1, 0, 1),
    (2, False, 4, 4, 4, 6, 3, 1, 1, 1),  # depthwise: one channel per group
]


@pytest.fixture(
    params=[False, True, pytest.param("cuda", marks=pytest.mark.gpu)], ids=["interpreter-tiles", "gpu-tiles", "cuda"]
)
def tiled(request, monkeypatch):
    """The lowering's wrappers under the interpreter's tile choices or a GPU's (small tiles, tl.dot only from 16
    rows), both run by the interpreter, or compiled on the GPU itself (tensors made there, the reference without
    TF32 as the verifier's): what Triton's compiler does to a kernel only shows there."""
    from drtriton_ray.lower import wrappers
    from drtriton_ray.synth.validate import full_float32

    if request.param != "cuda":
        monkeypatch.setattr(wrappers, "compiled", lambda t: request.param)
        yield wrappers
        return
    with full_float32():
        torch.set_default_device("cuda")
        try:
            yield wrappers
        finally:
            torch.set_default_device(None)


def torch_conv(case, batch=2):
    """(input, weight, bias, PyTorch's output) of a conv case (n, transposed, groups, cin, cout, size, k, stride,
    padding, dilation): random values, `size` one side or every spatial size."""
    import torch.nn.functional as F

    n, transposed, groups, cin, cout, size, k, stride, padding, dilation = case
    x = torch.randn(batch, cin, *([size] * n if isinstance(size, int) else size))
    b = torch.randn(cout)
    if transposed:
        w = torch.randn(cin, cout // groups, *[k] * n)
        want = getattr(F, f"conv_transpose{n}d")(
            x, w, b, stride=stride, padding=padding, groups=groups, dilation=dilation, output_padding=stride - 1
        )
    else:
        w = torch.randn(cout, cin // groups, *[k] * n)
        want = getattr(F, f"conv{n}d")(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    return x, w, b, want


def test_conv_kernel_matches_torch(tiled):
    """Direct and transposed convs (strides, dilation, groups, output_padding), under every tiling."""

    wrappers = tiled
    torch.manual_seed(0)
    for case in CONVS:
        n, transposed, groups, cin, cout, size, k, stride, padding, dilation = case
        x, w, b, want = torch_conv(case)
        got = wrappers.conv(x, w, b, tuple(want.shape), stride, padding, dilation, groups, transposed)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_tiled_kernels_match_torch(tiled):
    """Reductions, along-dim operators, row norms, batch norm, batched matmul and pooling over shapes with many
    short rows or columns (several per program) and long ones (loops), under every tiling."""
    import torch.nn.functional as F

    w = tiled
    torch.manual_seed(0)
    close = lambda got, want: torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)  # noqa: E731
    for shape, dim in (((300, 3, 5), 1), ((7, 5000), 1), ((2000, 6), 0), ((3, 70, 2, 9), 2)):
        x = torch.randn(shape)
        for op, f in enumerate((torch.sum, torch.mean, torch.amax, torch.amin)):
            close(w.reduce_dim(x, dim, False, op), f(x, dim))
        assert torch.equal(w.reduce_dim(x, dim, True, 4), x.argmax(dim, keepdim=True))
        close(w.reduce_dim(x, dim, False, 6), x.var(dim))
        close(w.reduce_dim(x, dim, False, 7), x.norm(dim=dim))
        # (7, 5000): a long column, along_loop_kernel's online softmax and carried scans
        along = w.along_dim_long if w.long_column(*w.split_at(shape, dim)[1:]) else w.along_dim
        close(along(x, dim, 0), x.softmax(dim))
        close(along(x, dim, 1), x.log_softmax(dim))
        close(along(x, dim, 2), x.cumsum(dim))
        close(along(x, dim, 3), x.cummax(dim).values)
        close(along(x, dim, 4), x.cummin(dim).values)
    for rows, length in ((3000, 5), (3, 6000)):
        x, g, b = torch.randn(rows, length), torch.randn(length), torch.randn(length)
        close(w.layer_norm(x, g, b), F.layer_norm(x, (length,), g, b))
        close(w.rms_norm(x, g), F.rms_norm(x, (length,), g))
    x = torch.randn(6, 12, 5, 7)
    g, b = torch.randn(12), torch.randn(12)
    close(w.group_norm(x, 4, g, b), F.group_norm(x, 4, g, b))
    close(w.instance_norm(x), F.instance_norm(x))
    for shape in ((6, 12, 35), (700, 9), (2, 3000, 2)):
        x = torch.randn(shape)
        g, b = torch.randn(shape[1]), torch.randn(shape[1])
        close(w.batch_norm(x, g, b), F.batch_norm(x, None, None, g, b, training=True))
    for a, m in ((torch.randn(5, 1, 33, 70), torch.randn(3, 70, 20)), (torch.randn(2, 130, 40), torch.randn(40, 100))):
        close(w.matmul(a, m), torch.matmul(a, m))
    x = torch.randn(2, 3, 9, 8, 7)
    for k, s, p in ((3, 2, 1), (2, 1, 0)):
        close(w.pool(x, tuple(F.max_pool3d(x, k, s, p).shape), k, s, p, True), F.max_pool3d(x, k, s, p))
        close(w.pool(x, tuple(F.avg_pool3d(x, k, s, p).shape), k, s, p, False), F.avg_pool3d(x, k, s, p))


def test_matmul_folds_batches_into_rows(monkeypatch):
    """Trailing batch dims over which B is one matrix and A's rows run on become rows of one product (a paper-profile
    Matmul's 2511 products of 2 rows are one of 5022); where B differs or A's rows do not run on (a transposed or
    broadcast A) the batch stays. Every case gives torch.matmul's values."""
    from drtriton_ray.lower import wrappers

    launched = []
    launch = wrappers.matmul_args

    def spy(a, b, bias, out, batch, m, n, k, sa, sb, config=None):
        launched.append((tuple(batch), m))
        return launch(a, b, bias, out, batch, m, n, k, sa, sb, config)

    monkeypatch.setattr(wrappers, "matmul_args", spy)
    torch.manual_seed(0)
    cases = [  # a, b, (batch, rows) launched
        (torch.randn(3, 7, 2, 5), torch.randn(1, 5, 6), ((), 42)),
        (torch.randn(7, 2, 5), torch.randn(4, 1, 5, 6), ((4,), 14)),  # A broadcasts over 4, B over 7
        (torch.randn(3, 7, 1, 5), torch.randn(5, 6), ((), 21)),  # m = 1
        (torch.randn(7, 5, 2).transpose(1, 2), torch.randn(5, 6), ((7,), 2)),  # A's rows do not run on
        (torch.randn(7, 2, 5), torch.randn(7, 5, 6), ((7,), 2)),  # a different B per batch
        (torch.randn(1, 2, 5), torch.randn(3, 5, 6), ((3,), 2)),  # A broadcast over the batch
    ]
    for a, b, want in cases:
        torch.testing.assert_close(wrappers.matmul(a, b), torch.matmul(a, b), atol=1e-4, rtol=1e-4)
        assert launched[-1] == want, (a.shape, b.shape, launched[-1])


def _with_library(kernel_source: str) -> str:
    """A generated kernel as a module: the header and the library helpers it calls."""
    from drtriton_ray.lower.emit import HEADER
    from drtriton_ray.lower.library import library_source

    return HEADER + "\n" + library_source([kernel_source]) + "\n\n" + kernel_source


def test_elementwise_precision_near_zero(tmp_path):
    """Relative error against PyTorch (float64) over magnitudes 1e-9..1e3 of both signs: tanh, expm1, log1p and
    lerp are computed without the cancellation the naive formulas suffer near zero."""
    import torch.nn.functional as F

    from drtriton_ray.lower.elementwise import EXPRESSIONS, fused_kernel_source

    ops = {
        "Tanh": torch.tanh,
        "ELU": lambda x: F.elu(x, 0.7),
        "SELU": F.selu,
        "Softplus": F.softplus,
        "LogSigmoid": F.logsigmoid,
        "Mish": F.mish,
        "Lerp": lambda x: torch.lerp(x, x / 1024, 1 + 1 / 1024),
    }  # 2^-20 x, from start all cancellation
    mag = torch.logspace(-9, 3, 2000, dtype=torch.float64)
    x = torch.cat([mag, -mag]).float()
    args = ("v0", "v0 / 1024.0", "v0 * 0.0 + 1.0009765625")  # x; lerp's end and weight
    src = _with_library(
        "\n\n".join(
            fused_kernel_source(f"k_{name}", [True], [f"t1 = {EXPRESSIONS[name].format(*args, alpha=0.7)}"], "t1")
            for name in ops
        )
    )
    mod = _import(src, tmp_path / "ew_precision.py")
    for name, f in ops.items():
        out = torch.empty_like(x)
        getattr(mod, f"k_{name}")[(x.numel() // 1000,)](out, x, x.numel(), BLOCK=1024, WIDE=False)
        want = f(x).double() if name == "Lerp" else f(x.double())  # PyTorch's float32 lerp: the same formula
        rel = (out.double() - want).abs() / want.abs().clamp_min(1e-30)
        assert float(rel.max()) < 1e-5, (name, float(rel.max()), float(x[rel.argmax()]))


def test_fused_kernel_dense_and_broadcast_inputs(tmp_path):
    """A dense input is read at the flat index, a broadcast one through its strides (the only case that unravels
    the index); both index widths give PyTorch's result."""
    from drtriton_ray.lower.elementwise import fused_kernel_source
    from drtriton_ray.lower.wrappers import elementwise_args

    src = _with_library(fused_kernel_source("k_mix", [True, False], ["t2 = v0 * v1 + v0"], "t2"))
    mod = _import(src, tmp_path / "ew_mix.py")
    a, b = torch.randn(3, 5, 7), torch.randn(5, 1)
    out, grid, args, meta = elementwise_args((3, 5, 7), torch.float32, [True, False], a, b)
    assert not meta["WIDE"] and len(args) == 1 + 2 + 5 + 5  # out, inputs, n and 4 dims, the broadcast input's strides
    assert meta["BLOCK_C"] == 8 and meta["BLOCK_R"] == 128  # rows of 7 columns (b steps through dim 1 alone)
    for w in (False, True):
        out.zero_()
        mod.k_mix[grid](*args, **{**meta, "WIDE": w})
        assert torch.allclose(out, a * b + a), w


def test_broadcast_dims_coalesce(tmp_path):
    """Dims that every broadcast input steps through alike merge, so the kernel divides as little as it can: a bias
    over the leading dim of (151, 301, 20, 594) (a paper-profile Add) leaves one division, a per-channel one two.
    Whatever the merging, the kernel's values are PyTorch's, with non-contiguous inputs and size-1 dims too."""
    from drtriton_ray.lower.elementwise import fused_kernel_source
    from drtriton_ray.lower.wrappers import coalesced_dims, elementwise_args

    def dims(shape, *inputs):
        return coalesced_dims(shape, [torch.empty(t).expand(shape).stride() for t in inputs])

    assert dims((151, 301, 20, 594), (301, 20, 594), (151, 1, 1, 1)) == (
        (1, 1, 1, 301 * 20 * 594),
        [(0, 0, 0, 0, 1), (1, 0, 0, 0, 0)],
    )
    assert dims((8, 16, 5, 7), (1, 16, 1, 1)) == ((1, 1, 16, 35), [(0, 0, 0, 1, 0)])
    assert dims((4, 1, 6), (4, 1, 1)) == ((1, 1, 1, 6), [(1, 0, 0, 0, 0)])
    assert dims((1, 1), (1, 1)) == ((1, 1, 1, 1), [(0, 0, 0, 0, 0)])

    src = _with_library(fused_kernel_source("k_three", [False, False, True], ["t3 = v0 * v1 - v2"], "t3"))
    mod = _import(src, tmp_path / "ew_three.py")
    torch.manual_seed(0)
    cases = [
        ((2, 3, 4, 5), torch.randn(3, 4, 5), torch.randn(2, 1, 1, 1)),
        (
            (2, 3, 4, 5),
            torch.randn(5, 4).t()[None, :, None, :].expand(1, 4, 3, 5)[..., 0, :].reshape(1, 4, 5).expand(3, 4, 5),
            torch.randn(2, 3, 1, 5),
        ),
        ((6, 1, 7), torch.randn(6, 1, 1), torch.randn(1, 1, 7)),
        ((1, 7), torch.randn(7), torch.randn(1, 1)),  # every dim merges: the flat index is the columns
        ((2, 3, 2, 3, 4), torch.randn(3, 1, 3, 1), torch.randn(2, 1, 2, 1, 4).transpose(0, 2)),
    ]
    for shape, a, b in cases:
        c = torch.randn(shape)
        for block in (1024, 4):  # columns wider than the tile, and rows of one column block each
            out, grid, args, meta = elementwise_args(
                shape, torch.float32, [False, False, True], a, b, c, config={"BLOCK": block}
            )
            mod.k_three[grid](*args, **meta)
            assert torch.allclose(out, a * b - c), (shape, block)


def test_cumsum_accumulates_like_torch():
    """A float64 running sum: the same values as PyTorch's CPU cumsum, which accumulates in double."""
    from drtriton_ray.lower.wrappers import along_dim

    torch.manual_seed(0)
    x = torch.randn(3, 4096, 5) * torch.logspace(-2, 3, 4096)[None, :, None]
    assert torch.equal(along_dim(x, 1, 2), torch.cumsum(x, 1))


def _handmade(nodes, shapes, outputs, weights=()):
    """A program from (op, inputs, output, params, weights) tuples and every tensor's shape (inputs: those no node
    produces), as a record check_lowering takes: rendered as the synthesizer renders, seed 0."""
    from types import SimpleNamespace

    from drtriton_ray.ir import Node, Tensor
    from drtriton_ray.ir import problem_source

    produced = {out for _, _, out, _, _ in nodes}
    role = {t: "output" if t in outputs else "intermediate" if t in produced else "input" for t in shapes}
    role.update({w: "weight" for w in weights})
    tensors = {t: Tensor(t, list(s), "float32", role[t], "one" if t in weights else "") for t, s in shapes.items()}
    prog = Program([Node(op, ins, [out], params, ws) for op, ins, out, params, ws in nodes], tensors, "float32", 0)
    return SimpleNamespace(dag=prog.to_json(), source=problem_source(prog), seed=0, id="handmade")


FUSED = {  # name: (nodes, shapes, outputs, weights, kernels after fusion, kernels before)
    "elementwise-softmax-elementwise": (
        [
            ("Tanh", [0], 1, {}, []),
            ("Softmax", [1], 2, {"dim": -1}, []),
            ("Mul", [2, 3], 4, {}, []),
            ("ReLU", [4], 5, {}, []),
        ],
        {0: (6, 50), 1: (6, 50), 2: (6, 50), 3: (6, 1), 4: (6, 50), 5: (6, 50)},
        [5],
        (),
        1,
        3,
    ),
    "matmul-bias-relu": (
        [("Matmul", [0, 1], 2, {}, []), ("Add", [2, 3], 4, {}, []), ("ReLU", [4], 5, {}, [])],
        {0: (3, 20, 30), 1: (30, 40), 2: (3, 20, 40), 3: (40,), 4: (3, 20, 40), 5: (3, 20, 40)},
        [5],
        (),
        1,
        2,
    ),
    "linear-gelu": (
        [("Linear", [0], 1, {}, [2, 3]), ("GELU", [1], 4, {}, [])],
        {0: (5, 7, 24), 1: (5, 7, 18), 2: (18, 24), 3: (18,), 4: (5, 7, 18)},
        [4],
        (2, 3),
        1,
        2,
    ),
    "layer-norm-residual": (
        [("LayerNorm", [0], 1, {"k": 1}, [2, 3]), ("Add", [1, 0], 4, {}, [])],
        {0: (4, 9, 33), 1: (4, 9, 33), 2: (33,), 3: (33,), 4: (4, 9, 33)},
        [4],
        (2, 3),
        1,
        2,
    ),
    "reduce-prologue-epilogue": (
        [
            ("Sub", [0, 1], 2, {}, []),
            ("Exp", [2], 3, {}, []),
            ("Sum", [3], 4, {"dim": 1, "keepdim": False}, []),
            ("Tanh", [4], 5, {}, []),
        ],
        {0: (5, 40, 7), 1: (1, 7), 2: (5, 40, 7), 3: (5, 40, 7), 4: (5, 7), 5: (5, 7)},
        [5],
        (),
        1,
        3,
    ),
    "var-prologue": (
        [("Abs", [0], 1, {}, []), ("Var", [1], 2, {"dim": -1, "keepdim": True}, [])],
        {0: (9, 300), 1: (9, 300), 2: (9, 1)},
        [2],
        (),
        1,
        2,
    ),
    "argmax-prologue": (
        [("Mul", [0, 1], 2, {}, []), ("ArgMax", [2], 3, {"dim": 0, "keepdim": False}, [])],
        {0: (30, 11), 1: (30, 1), 2: (30, 11), 3: (11,)},
        [3],
        (),
        1,
        2,
    ),
    "fan-out-inside-epilogue": (  # the softmax feeds two nodes of one group: still one kernel
        [("Softmax", [0], 1, {"dim": 0}, []), ("Mul", [1, 0], 2, {}, []), ("Add", [1, 2], 3, {}, [])],
        {0: (12, 10), 1: (12, 10), 2: (12, 10), 3: (12, 10)},
        [3],
        (),
        1,
        2,
    ),
    "program-output-is-written": (  # an output is stored even where its consumer could fuse
        [("Softmax", [0], 1, {"dim": -1}, []), ("ReLU", [1], 2, {}, [])],
        {0: (4, 10), 1: (4, 10), 2: (4, 10)},
        [1, 2],
        (),
        2,
        2,
    ),
    "broadcast-epilogue-is-a-prologue": (  # Sum's [1, 10] against [4, 10]: not its epilogue, the Max's prologue
        [
            ("Sum", [0], 1, {"dim": 0, "keepdim": True}, []),
            ("Add", [1, 0], 2, {}, []),
            ("Max", [2], 3, {"dim": -1, "keepdim": False}, []),
        ],
        {0: (4, 10), 1: (1, 10), 2: (4, 10), 3: (4,)},
        [3],
        (),
        2,
        3,
    ),
    "batch-norm-both-sides": (
        [("Sigmoid", [0], 1, {}, []), ("BatchNorm", [1], 2, {}, [3, 4]), ("Sub", [2, 0], 5, {}, [])],
        {0: (6, 4, 15), 1: (6, 4, 15), 2: (6, 4, 15), 3: (4,), 4: (4,), 5: (6, 4, 15)},
        [5],
        (3, 4),
        1,
        3,
    ),
    "group-norm-cumsum-chain": (
        [
            ("GroupNorm", [0], 1, {"num_groups": 2}, [2, 3]),
            ("Swish", [1], 4, {}, []),
            ("CumSum", [4], 5, {"dim": 1}, []),
            ("Clamp", [5], 6, {"lo": -0.5, "hi": 0.5}, []),
        ],
        {0: (3, 4, 5, 6), 1: (3, 4, 5, 6), 2: (4,), 3: (4,), 4: (3, 4, 5, 6), 5: (3, 4, 5, 6), 6: (3, 4, 5, 6)},
        [6],
        (2, 3),
        2,
        4,
    ),
    "long-softmax-both-sides": (  # along_loop_kernel: columns of 9000, online softmax
        [("Sin", [0], 1, {}, []), ("LogSoftmax", [1], 2, {"dim": 1}, []), ("Mul", [2, 3], 4, {}, [])],
        {0: (2, 9000, 2), 1: (2, 9000, 2), 2: (2, 9000, 2), 3: (2, 1, 2), 4: (2, 9000, 2)},
        [4],
        (),
        1,
        3,
    ),
    "conv-bias-relu": (
        [
            ("Conv2d", [0], 1, {"stride": 1, "padding": 1, "dilation": 1, "groups": 1}, [2, 3]),
            ("Add", [1, 4], 5, {}, []),
            ("ReLU", [5], 6, {}, []),
        ],
        {0: (2, 3, 6, 6), 1: (2, 5, 6, 6), 2: (5, 3, 3, 3), 3: (5,), 4: (5, 1, 1), 5: (2, 5, 6, 6), 6: (2, 5, 6, 6)},
        [6],
        (2, 3),
        1,
        2,
    ),
    "pool-epilogue": (
        [("MaxPool2d", [0], 1, {"kernel": 2, "stride": 2, "padding": 0}, []), ("Mul", [1, 1], 2, {}, [])],
        {0: (2, 3, 8, 8), 1: (2, 3, 4, 4), 2: (2, 3, 4, 4)},
        [2],
        (),
        1,
        2,
    ),
}


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fragment_fusion(name, tmp_path):
    """Prologues and epilogues: the expected number of kernels (forward lines: one launch each) before and after
    fusion, intermediates inside a fragment never allocated, and PyTorch's values."""
    import ast

    from drtriton_ray.lower.grouping import kernel_groups

    nodes, shapes, outputs, weights, after, before = FUSED[name]
    rec = _handmade(nodes, shapes, outputs, weights)
    prog = Program.from_json(rec.dag)
    assert (len(kernel_groups(prog)), len(kernel_groups(prog, fuse=False))) == (after, before)
    src = lower_program(prog, rec.source)
    model = next(n for n in ast.parse(src).body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    forward = next(f for f in model.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
    assert sum(isinstance(s, ast.Assign) for s in forward.body) == after
    assert src.count("# fused: ") == sum(
        1 for f in kernel_groups(prog) if f.anchor is not None and (f.prologue or f.epilogue)
    )
    check_lowering(rec, tmp_path)


def test_fused_kernels_under_gpu_tiles(tmp_path):
    """The fused variants under a GPU's tile choices (several loop steps, several rows or columns a program): the
    solution's `compiled` made to say True, its kernels still interpreted."""
    for name in (
        "reduce-prologue-epilogue",
        "layer-norm-residual",
        "matmul-bias-relu",
        "batch-norm-both-sides",
        "long-softmax-both-sides",
    ):
        nodes, shapes, outputs, weights, _, _ = FUSED[name]
        rec = _handmade(nodes, shapes, outputs, weights)
        src = lower_program(Program.from_json(rec.dag), rec.source)
        mod = _import(
            src.replace("def compiled(t):\n    ", "def compiled(t):\n    return True\n    "),
            tmp_path / f"gpu_tiles_{name.replace('-', '_')}.py",
        )
        ref = load_problem(rec.source)
        torch.manual_seed(0)
        model, new = ref.Model(), None
        torch.manual_seed(0)
        new = mod.ModelNew()
        inputs = ref.get_inputs()
        with torch.no_grad():
            torch.testing.assert_close(new(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)


def test_tuned_configs_are_baked_in(tmp_path, monkeypatch):
    """A tuning-table entry for the target GPU becomes a literal argument of the launch it matches; the wrappers
    apply it only compiled, so the interpreter's result is unchanged."""
    import json

    from drtriton_ray.lower import tuning

    nodes, shapes, outputs, weights, _, _ = FUSED["reduce-prologue-epilogue"]
    rec = _handmade(nodes, shapes, outputs, weights)
    prog = Program.from_json(rec.dag)
    kernel, dims = tuning.kernel_dims("Sum", {"dim": 1}, [[5, 40, 7]], [5, 7])
    assert (kernel, dims) == ("reduce_kernel", (35, 40))
    table = tmp_path / "tuning.json"
    table.write_text(
        json.dumps({"gpus": {"Fake GPU": {kernel: {tuning.bucket(dims): {"BLOCK_R": 16, "num_warps": 2}}}}})
    )
    monkeypatch.setattr(tuning, "TABLE", table)
    monkeypatch.setattr(tuning.config_for, "__defaults__", (None, str(table)))
    src = lower_program(prog, rec.source, gpu="Fake GPU")
    assert "config={'BLOCK_R': 16, 'num_warps': 2}" in src
    assert "config={" not in lower_program(prog, rec.source, gpu=None)
    assert tuning.bucket((35, 40)) == "64x64" and tuning.bucket((1, 0)) == "1x1"


# every tuned kernel's operator; those whose candidates take 10-25 s in the interpreter run with `make test-slow`
TUNED_OPS = ["Matmul", "Linear", "Sum", "LayerNorm", "GroupNorm", "BatchNorm", "GELU"] + [
    pytest.param(op, marks=pytest.mark.slow) for op in ("Softmax", "Conv2d", "MaxPool2d")
]


@pytest.mark.parametrize("op", TUNED_OPS)
def test_tuning_candidates_keep_values(op, tmp_path, monkeypatch):
    """bench/tune_lowering.py's pieces on CPU: every candidate configuration of each tuned kernel, applied as on a GPU
    (the wrappers told they run compiled, the interpreter running them), gives the default's values; the launch is
    the emitter's own call with `config=`."""
    from drtriton_ray.eval import tune as tune_lowering
    from drtriton_ray.lower import tuning, wrappers
    from drtriton_ray.lower.elementwise import is_elementwise

    monkeypatch.setattr(wrappers, "compiled", lambda t: True)
    rec = Sampler(SynthConfig(level=1, profile="small", ops=(op,)), seed=7).sample(0)
    p = Program.from_json(rec.dag)
    node, out = p.nodes[0], p.tensors[p.nodes[0].outputs[0]]
    shapes = [p.tensors[t].shape for t in node.inputs + node.weights]
    kd = ("elementwise", (out.numel,)) if is_elementwise(op) else tuning.kernel_dims(op, node.params, shapes, out.shape)
    call = tune_lowering.launcher(p, 0, tmp_path)
    best, times = tune_lowering.tune_one(
        call, tune_lowering.environment(p, 0, "cpu"), *kd, timer=lambda fn: fn() is None or 1.0
    )
    assert best is None and len(times) == len(tuning.candidates(*kd)) + 1, op
    assert all(t == 1.0 for t in times.values()), (op, times)


def test_strided_copy_tiles():
    """The strided copy walks tiles of rows x columns: transposes (32-wide tiles), permutations, slices of cat and
    copies whose innermost dim is wider than a tile or a single column give PyTorch's values; an empty one launches
    nothing."""
    from drtriton_ray.lower.wrappers import contiguous_copy

    torch.manual_seed(0)
    views = [
        torch.randn(37, 53).t(),
        torch.randn(2, 3, 5, 7).permute(3, 1, 0, 2),
        torch.randn(4, 2500)[:, 7:2400],
        torch.randn(6, 1, 9).transpose(0, 2),
        torch.randn(7, 3, 5, 1).transpose(-2, -1),  # a size-1 dim moved: one contiguous run
        torch.randn(0, 5).t(),
    ]
    for view in views:
        assert torch.equal(contiguous_copy(view), view.contiguous()), view.shape


def compile_for_hopper(script: str, *args: str) -> str:
    """The stdout of `script` run in a process of its own without the interpreter (Triton's compiler for an H100,
    sm_90: no GPU needed; here the kernels are the interpreter's); skips where this Triton has no CUDA backend."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(root)}
    r = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode and ("ptxas" in r.stderr or "GPUTarget" in r.stderr or "backend" in r.stderr):
        pytest.skip("no Triton CUDA backend here: " + r.stderr[-300:])
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_family_rows_subset():
    """bench/lowering.py's per-family table: a program counts in each non-elementwise family it has, and in the
    subset row (issue 29's elementwise/norm programs) only when it has no other family."""
    from drtriton_ray.eval import gate as bench

    def prog(name, vs_compile):
        return {
            "level": 2,
            "name": f"id {name}",
            "status": "correct",
            "kernels": 1,
            "speedup_vs_eager": 2.0,
            "speedup_vs_compile": vs_compile,
        }

    rows = bench.family_rows([prog("Exp+LayerNorm", 2.0), prog("ReLU+Tanh", 0.5), prog("Conv2d+ReLU", 4.0)])
    subset = rows[(2, bench.SUBSET)]
    assert subset["programs"] == 2 and subset["compile"] == pytest.approx(1.0)
    assert rows[(2, "conv/transposed conv")]["programs"] == 1 and (2, "pooling") not in rows
    assert rows[(2, "elementwise")]["programs"] == 1
