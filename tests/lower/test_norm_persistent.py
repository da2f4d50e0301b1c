"""row_norm_persistent_kernel: a layer or RMS norm over many rows of 4097 to 8192 values, each block of rows whole in
registers, persistent programs that load their next block before normalising this one; against PyTorch in the Triton
interpreter, under the interpreter's tiles and a GPU's (a GPU of 2 SMs, so that each program loops over several
blocks and its last prefetch reaches past the rows), alone and fused."""

import pytest
import torch
import torch.nn.functional as F
from test_lowering import _handmade, _import, check_lowering, model_pair

from drtriton_ray.lower import tuning, wrappers
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.ir import Program
from drtriton_ray.verify.static import check_candidate


@pytest.fixture(params=[False, True], ids=["interpreter-tiles", "gpu-tiles"])
def tiles(request, monkeypatch):
    """The wrappers under the interpreter's tiles, or a GPU's on a GPU of 2 SMs (4 programs: several blocks each)."""
    monkeypatch.setattr(wrappers, "compiled", lambda t: request.param)
    monkeypatch.setattr(wrappers, "sm_count", lambda t: 2)
    return request.param


def _error(got, want):
    """The verifier's measure: |got - want| over |want| plus the output's root mean square."""
    return ((got.double() - want).abs() / (want.abs() + want.pow(2).mean().sqrt())).max().item()


@pytest.mark.parametrize("distribution", ["normal", "large", "offset"])
@pytest.mark.parametrize("shape", [(37, 5000), (3, 11, 8192), (5, 6000)])
def test_persistent_norm_matches_torch(tiles, shape, distribution):
    """Layer norm with and without a bias, RMS norm: within float32 rounding of a float64 reference, also on the
    verifier's stress inputs (x1e4, 1e4 + 10 * normal: the variance is taken around the mean, from registers). At the
    offset, float32 inputs and a float32 mean of 5000 values near 1e4 err up to 2.8e-4 (row_norm_kernel as much,
    PyTorch's own float32 layer norm 2.2e-4): half the verifier's 1e-3 bounds it."""
    torch.manual_seed(0)
    length = shape[-1]
    x = torch.randn(shape)
    x = x * 1e4 if distribution == "large" else 1e4 + 10 * x if distribution == "offset" else x
    w, b = torch.randn(length), torch.randn(length)
    bound = 5e-4 if distribution == "offset" else 1e-5
    _, grid, _, meta = wrappers.row_norm_persistent_setup(x.shape, x, w, b, 0)
    if tiles:  # several blocks a program, the last prefetch past the rows
        assert grid[0] == min(4, -(-x.numel() // length // meta["BLOCK_ROWS"]))
    double = (x.double(), (length,), w.double())
    assert _error(wrappers.row_norm_persistent(x, w, b, 0), F.layer_norm(*double, b.double())) < bound
    assert _error(wrappers.row_norm_persistent(x, w, None, 0), F.layer_norm(*double)) < bound
    rms = F.rms_norm(*double, eps=torch.finfo(torch.float32).eps)
    assert _error(wrappers.row_norm_persistent(x, w, None, 1), rms) < bound


CASES = {  # name: (nodes, shapes, outputs, weights); one kernel each
    "layer-norm-cos": (  # l2-s7-000057 in small: an epilogue of transcendental cost
        [("LayerNorm", [0], 1, {"k": 1}, [3, 4]), ("Cos", [1], 2, {}, [])],
        {0: (5, 3, 6000), 1: (5, 3, 6000), 2: (5, 3, 6000), 3: (6000,), 4: (6000,)},
        [2],
        (3, 4),
    ),
    "hardsigmoid-layer-norm": (  # l2-s7-000007 in small: a prologue, computed where each block (and the next) loads
        [("Hardsigmoid", [0], 1, {}, []), ("LayerNorm", [1], 2, {"k": 1}, [3, 4])],
        {0: (3, 7, 7503), 1: (3, 7, 7503), 2: (3, 7, 7503), 3: (7503,), 4: (7503,)},
        [2],
        (3, 4),
    ),
    "broadcast-rms-norm-residual": (  # a broadcast prologue leaf and an epilogue leaf, two normalised dims
        [
            ("Mul", [0, 1], 2, {}, []),
            ("RMSNorm", [2], 3, {"k": 2}, [4]),
            ("Add", [3, 5], 6, {}, []),
        ],
        {**{t: (9, 2, 4000) for t in (0, 2, 3, 5, 6)}, 1: (9, 1, 1), 4: (2, 4000)},
        [6],
        (4,),
    ),
}


def _gpu_module(src: str, path):
    """The solution as on a 2-SM GPU (its wrappers' compiled tiles and grid), run by the interpreter."""
    src = src.replace("def compiled(t):\n    ", "def compiled(t):\n    return True\n    ")
    return _import(src.replace("def sm_count(t):\n    ", "def sm_count(t):\n    return 2\n    "), path)


@pytest.mark.parametrize("name", sorted(CASES))
def test_persistent_norm_fuses_both_sides(name, tmp_path):
    """The prologue is computed where a block and its successor load, the epilogue where a block stores; PyTorch's
    values under the interpreter's tiles (check_lowering, the verifier's static rules too) and a 2-SM GPU's."""
    rec = _handmade(*CASES[name])
    src = lower_program(Program.from_json(rec.dag), rec.source)
    assert "row_norm_persistent_setup(" in src and "row_norm_kernel" not in src
    check_lowering(rec, tmp_path)
    model, new, inputs = model_pair(rec.source, _gpu_module(src, tmp_path / f"gpu_{name.replace('-', '_')}.py"))
    with torch.no_grad():
        torch.testing.assert_close(new(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)


def test_persistent_norm_alone(tmp_path):
    """An unfused layer norm's forward line calls row_norm_persistent; PyTorch's values."""
    nodes = [("LayerNorm", [0], 1, {"k": 1}, [2, 3])]
    rec = _handmade(nodes, {0: (4, 5, 8192), 1: (4, 5, 8192), 2: (8192,), 3: (8192,)}, [1], (2, 3))
    src = lower_program(Program.from_json(rec.dag), rec.source)
    assert "tensor_1 = row_norm_persistent(tensor_0, self.weight_2, self.weight_3, 0)" in src
    check_lowering(rec, tmp_path)
    model, new, inputs = model_pair(rec.source, _gpu_module(src, tmp_path / "gpu_alone.py"))
    with torch.no_grad():
        torch.testing.assert_close(new(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)


def test_persistent_norm_choice_and_launch(monkeypatch):
    """Layer and RMS norms of many rows of 4097 to 8192 values take the persistent kernel (its own tuning key); shorter
    and longer rows, group and instance norms keep row_norm_kernel. On a GPU: a row a block at 16 warps, 2 programs
    per SM (l2-s7-000057's (7949, 6, 8192): 264 programs of about 180 rows), int64 indices where the last prefetch's
    offsets pass 2^31."""
    assert tuning.kernel_dims("LayerNorm", {"k": 1}, [[7949, 6, 1, 1, 8192]], []) == (
        "row_norm_persistent_kernel",
        (47694, 8192),
    )
    assert tuning.kernel_dims("RMSNorm", {"k": 1}, [[57344, 7503]], [])[0] == "row_norm_persistent_kernel"
    assert tuning.kernel_dims("LayerNorm", {"k": 1}, [[4096, 4096]], [])[0] == "row_norm_kernel"
    assert tuning.kernel_dims("LayerNorm", {"k": 1}, [[4096, 12000]], [])[0] == "row_norm_kernel"
    assert tuning.kernel_dims("GroupNorm", {"num_groups": 8}, [[4096, 32, 256]], [])[0] == "row_norm_kernel"
    monkeypatch.setattr(wrappers, "compiled", lambda t: True)
    x, w = torch.empty(7949, 6, 1, 1, 8192, device="meta"), torch.empty(8192, device="meta")
    _, grid, _, meta = wrappers.row_norm_persistent_setup(x.shape, x, w, w, 0)
    assert grid == (264,) and (meta["BLOCK_ROWS"], meta["num_warps"], meta["WIDE"]) == (1, 16, False)
    x = torch.empty(262140, 8192, device="meta")  # 2^31 - 32768 values: the last prefetch reaches past 2^31
    assert wrappers.row_norm_persistent_setup(x.shape, x, w, w, 0)[3]["WIDE"]
    assert {"BLOCK_ROWS": 2, "num_warps": 16} in tuning.candidates("row_norm_persistent_kernel", (47694, 8192))


def test_persistent_norm_search_variants():
    """The search's per-shape tuning (search/sources.py: setup_variants) varies the persistent kernel's launch config
    where the fused wrapper calls its setup: one variant per tuning candidate."""
    from drtriton_ray.search.sources import setup_variants

    rec = _handmade(*CASES["layer-norm-cos"])
    code = lower_program(Program.from_json(rec.dag), rec.source)
    variants = setup_variants(code, 5)
    assert [note for _, note in variants] == [
        f"row_norm_persistent_kernel {c}" for c in tuning.candidates("row_norm_persistent_kernel", None)
    ]
    assert all("row_norm_persistent_setup(" in v and "config=" in v for v, _ in variants)


@pytest.mark.parametrize("norm", ["LayerNorm", "RMSNorm"])
def test_one_pass_variant_reads_rows_of_up_to_4096_values_once(norm, tmp_path):
    """lower_program(one_pass=True): a norm of 1,025 to 4,096 values a row (with a prologue and an epilogue) takes the
    persistent kernel, whose values are PyTorch's under the interpreter's tiles and a 2-SM GPU's; shorter rows and
    the default lowering keep row_norm_kernel."""
    weights = [3, 4] if norm == "LayerNorm" else [3]
    nodes = [("Tanh", [0], 1, {}, []), (norm, [1], 2, {"k": 1}, weights), ("ReLU", [2], 5, {}, [])]
    shapes = {0: (7, 3000), 1: (7, 3000), 2: (7, 3000), 3: (3000,), 4: (3000,), 5: (7, 3000)}
    rec = _handmade(nodes, shapes, [5], tuple(weights))
    prog = Program.from_json(rec.dag)
    default, one_pass = lower_program(prog, rec.source), lower_program(prog, rec.source, one_pass=True)
    assert "row_norm_setup(" in default and "row_norm_persistent_setup(" in one_pass
    assert not check_candidate(one_pass, "strict")  # the verifier's parent-side rules
    model, new, inputs = model_pair(rec.source, _gpu_module(one_pass, tmp_path / f"one_pass_{norm}.py"))
    cpu = model_pair(rec.source, _import(one_pass, tmp_path / f"cpu_{norm}.py"))[1]  # the interpreter's tiles
    with torch.no_grad():
        torch.testing.assert_close(new(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(cpu(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)
    short = _handmade(nodes, {k: (v[0], 1000) if len(v) == 2 else (1000,) for k, v in shapes.items()}, [5], weights)
    short_prog = Program.from_json(short.dag)
    assert lower_program(short_prog, short.source, one_pass=True) == lower_program(short_prog, short.source)
