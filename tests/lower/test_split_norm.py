"""split_norm: norms over few long rows (GroupNorm with few groups, BatchNorm's channels, ...) as partial statistics
per (row, split) and a normalisation by (row, split), against PyTorch in the Triton interpreter. The lowering takes it
only for rows long enough to need it on a GPU (wrappers.few_long_rows), so the tests call the wrapper directly or
make few_long_rows say yes to lower small programs through it."""

import pytest
import torch
import torch.nn.functional as F
import test_lowering
from test_lowering import FUSED, _handmade, _import, check_lowering, model_pair

from drtriton_ray.lower import tuning, wrappers
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.ir import Program

tiled = test_lowering.tiled  # the fixture: the interpreter's tiles, a GPU's, compiled on a GPU

# (mode, groups, shape, reference): layouts of each kind: one segment per row (layer, RMS, instance norm), a
# segment per channel (group norm: long and short ones, several per tile), a segment per image (batch norm, over
# (N, C, S) and (N, C))
CASES = [
    (0, 1, (3, 7000), lambda x, w, b: F.layer_norm(x, (7000,), w, b)),
    (0, 1, (2, 20000), lambda x, w, b: F.layer_norm(x, (20000,), w, b)),  # several splits under a GPU's tiles too
    (0, 1, (2, 30, 200), lambda x, w, b: F.layer_norm(x, (30, 200), w, b)),
    (1, 1, (3, 7000), lambda x, w, b: F.rms_norm(x, (7000,), w)),
    (2, 2, (2, 8, 40, 50), lambda x, w, b: F.group_norm(x, 2, w, b)),
    (2, 3, (2, 300, 5), lambda x, w, b: F.group_norm(x, 3, w, b)),
    (3, 1, (2, 3, 60, 70), lambda x, w, b: F.instance_norm(x)),
    (4, 1, (6, 4, 900), lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True)),
    (4, 1, (5000, 3), lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True)),
]


def _weights(mode, shape):
    if mode <= 1:
        w, b = torch.randn(shape[1:]), torch.randn(shape[1:])
    else:
        w, b = torch.randn(shape[1]), torch.randn(shape[1])
    return (None, None) if mode == 3 else (w, None) if mode == 1 else (w, b)


def _error(got, want):
    """The verifier's measure: |got - want| over |want| plus the output's root mean square."""
    return ((got.double() - want).abs() / (want.abs() + want.pow(2).mean().sqrt())).max().item()


def _drawn(shape, distribution):
    """x of a test distribution: the verifier's (normal, x1e4, 1e4 + 10 * normal), or a mean that drifts along the
    row (a ramp to 1e3, channels 100 apart): the statistics kernel's shift, its first tile's mean, then lies far from
    the mean of the rest of its share, where shifted sums of squares would cancel if anything does."""
    x = torch.randn(shape)
    if distribution == "large":
        return x * 1e4
    if distribution == "offset":
        return 1e4 + 10 * x
    if distribution == "ramp":
        return x + torch.linspace(0, 1e3, x.numel()).view(shape)
    if distribution == "channels":
        return x + 100 * torch.arange(shape[1]).view(1, -1, *([1] * (len(shape) - 2)))
    return x


@pytest.mark.parametrize("distribution", ["normal", "large", "offset", "ramp", "channels"])
def test_split_norm_matches_torch(tiled, distribution):
    """Every mode and layout, under the interpreter's and a GPU's tiles, with several splits a row: within float32
    rounding of a float64 reference, also on the verifier's stress inputs (x1e4, and 1e4 + 10 * normal, where a
    variance from a sum of squares would cancel) and on drifting means (_drawn). A stress case may err as far as
    float32 inputs do at that offset (|x| 1e4: 1e-3 rounding against a spread of 10), a quarter of the verifier's
    1e-3 tolerance at most."""
    torch.manual_seed(0)
    splits = []
    for mode, groups, shape, reference in CASES:
        x = _drawn(shape, distribution)
        w, b = _weights(mode, shape)
        splits.append(tiled.split_norm_setup(shape, x, w, b, mode, groups)[1][1])
        got = tiled.split_norm(x, w, b, mode, groups)
        want = reference(*(t.double() if t is not None else None for t in (x, w, b)))
        assert _error(got.cpu(), want.cpu()) < (2.5e-4 if distribution == "offset" else 1e-5), (mode, shape)
    assert max(splits) > 1, splits


@pytest.fixture
def split_everywhere(monkeypatch):
    """Every norm lowered through split_norm."""
    monkeypatch.setattr(wrappers, "few_long_rows", lambda rows, length: True)


SPLIT_FUSED = {  # name: (nodes, shapes, outputs, weights); one kernel pair each
    "clamp-group-norm-hardswish": (
        [
            ("Clamp", [0], 1, {"lo": -0.5, "hi": 0.5}, []),
            ("GroupNorm", [1], 2, {"num_groups": 2}, [3, 4]),
            ("Hardswish", [2], 5, {}, []),
        ],
        {0: (2, 4, 30, 40), 1: (2, 4, 30, 40), 2: (2, 4, 30, 40), 3: (4,), 4: (4,), 5: (2, 4, 30, 40)},
        [5],
        (3, 4),
    ),
    "broadcast-prologue-rms-norm": (  # a prologue leaf read through broadcast strides, in both kernels
        [("Mul", [0, 1], 2, {}, []), ("RMSNorm", [2], 3, {"k": 2}, [4])],
        {0: (3, 20, 50), 1: (20, 1), 2: (3, 20, 50), 3: (3, 20, 50), 4: (20, 50)},
        [3],
        (4,),
    ),
    "instance-norm-epilogue": (  # no prologue: the library's statistics kernel, the fused normalisation
        [("InstanceNorm", [0], 1, {}, []), ("Mul", [1, 2], 3, {}, [])],
        {0: (2, 3, 30, 40), 1: (2, 3, 30, 40), 2: (3, 1, 1), 3: (2, 3, 30, 40)},
        [3],
        (),
    ),
}


@pytest.mark.parametrize("name", sorted(SPLIT_FUSED) + ["batch-norm-both-sides", "layer-norm-residual"])
def test_split_norm_fuses_both_sides(name, tmp_path, split_everywhere):
    """A prologue is computed where either kernel loads x (the statistics kernel is specialized too), an epilogue
    where the second stores; PyTorch's values."""
    nodes, shapes, outputs, weights = SPLIT_FUSED[name] if name in SPLIT_FUSED else FUSED[name][:4]
    rec = _handmade(nodes, shapes, outputs, weights)
    src = lower_program(Program.from_json(rec.dag), rec.source)
    assert "split_norm_setup(" in src and "row_norm_kernel" not in src and "batch_norm_kernel" not in src
    prologue = not nodes[0][0].endswith("Norm")
    assert src.count("_stats_kernel[grid](*pro,") == prologue
    assert src.count("norm_stats_kernel[grid](x0,") == (not prologue)
    check_lowering(rec, tmp_path)


def test_split_norm_alone_and_gpu_tiles(tmp_path, split_everywhere, monkeypatch):
    """An unfused norm's forward line calls split_norm; the solution under a GPU's tiles gives PyTorch's values."""
    nodes = [("GroupNorm", [0], 1, {"num_groups": 2}, [2, 3])]
    rec = _handmade(nodes, {0: (2, 4, 30, 40), 1: (2, 4, 30, 40), 2: (4,), 3: (4,)}, [1], (2, 3))
    src = lower_program(Program.from_json(rec.dag), rec.source)
    assert "tensor_1 = split_norm(tensor_0, self.weight_2, self.weight_3, 2, 2)" in src
    check_lowering(rec, tmp_path)
    for name in ("clamp-group-norm-hardswish", "broadcast-prologue-rms-norm"):
        rec = _handmade(*SPLIT_FUSED[name])
        src = lower_program(Program.from_json(rec.dag), rec.source)
        gpu_tiles = src.replace("def compiled(t):\n    ", "def compiled(t):\n    return True\n    ")
        mod = _import(gpu_tiles, tmp_path / f"gpu_tiles_{name.replace('-', '_')}.py")
        model, new, inputs = model_pair(rec.source, mod)
        with torch.no_grad():
            torch.testing.assert_close(new(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)


def test_split_norm_choice_and_tuning_key():
    """Few long rows (under two per SM of a 132-SM GPU, 16384 values or more) take split_norm, whose tuning entries
    have their own key; many rows keep a program per row."""
    assert tuning.kernel_dims("GroupNorm", {"num_groups": 2}, [[2, 64, 512, 512]], []) == ("split_norm", (4, 2**23))
    assert tuning.kernel_dims("BatchNorm", {}, [[16, 128, 64, 64]], [])[0] == "split_norm"
    assert tuning.kernel_dims("LayerNorm", {"k": 1}, [[4096, 4096]], [])[0] == "row_norm_kernel"
    assert tuning.kernel_dims("BatchNorm", {}, [[16, 128, 8]], [])[0] == "batch_norm_kernel"
    assert tuning.kernel_dims("InstanceNorm", {}, [[16, 64, 128, 128]], [])[0] == "row_norm_kernel"


def test_split_norm_tuning_candidates_keep_values(tmp_path, split_everywhere, monkeypatch):
    """bench/tune_lowering.py's candidates for split_norm, applied as on a GPU (interpreted), keep the values."""
    from drtriton_ray.eval import tune as tune_lowering

    monkeypatch.setattr(wrappers, "compiled", lambda t: True)
    rec = _handmade(*SPLIT_FUSED["clamp-group-norm-hardswish"])
    p = Program.from_json(rec.dag)
    k = next(i for i, n in enumerate(p.nodes) if n.op == "GroupNorm")
    node = p.nodes[k]
    kd = tuning.kernel_dims(node.op, node.params, [p.tensors[t].shape for t in node.inputs], [])
    assert kd[0] == "split_norm"
    call = tune_lowering.launcher(p, k, tmp_path)
    best, times = tune_lowering.tune_one(
        call, tune_lowering.environment(p, k, "cpu"), *kd, timer=lambda fn: fn() is None or 1.0
    )
    assert best is None and all(t == 1.0 for t in times.values()), times
    assert len(times) == len(tuning.candidates(*kd)) + 1


@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_split_group_norm_affine_or_not(tiled, affine):
    """A group norm over few long groups without weights, with a weight only, with both: PyTorch's values (the
    normalisation's HAS_W and HAS_B branches), a group's channels split over several programs."""
    torch.manual_seed(0)
    shape = (2, 6, 100, 100)
    x = _drawn(shape, "channels")
    w = torch.randn(6) if affine != "none" else None
    b = torch.randn(6) if affine == "both" else None
    assert tiled.split_norm_setup(shape, x, w, b, 2, 2)[1][1] > 1
    got = tiled.split_norm(x, w, b, 2, 2)
    want = F.group_norm(x.double(), 2, *(t.double() if t is not None else None for t in (w, b)))
    assert _error(got.cpu(), want.cpu()) < 1e-5


LEVEL2 = {  # the level-2 programs with few long rows (seed 7, paper profile), in small: split_norm without forcing
    "clamp-group-norm": (  # l2-s7-000033: GroupNorm(1) over (8, 7296, 1, 8192, 1); here 2 groups of 32768
        [("Clamp", [0], 1, {"lo": -0.622, "hi": 0.489}, []), ("GroupNorm", [1], 2, {"num_groups": 1}, [3, 4])],
        {0: (2, 64, 1, 512, 1), 1: (2, 64, 1, 512, 1), 2: (2, 64, 1, 512, 1), 3: (64,), 4: (64,)},
        [2],
        (3, 4),
    ),
    "batch-norm-abs": (  # l2-s7-000040: BatchNorm over (2048, 32, 1, 1, 8192); here 4 channels of 32768
        [("BatchNorm", [0], 1, {}, [3, 4]), ("Abs", [1], 2, {}, [])],
        {0: (8, 4, 1, 1, 4096), 1: (8, 4, 1, 1, 4096), 2: (8, 4, 1, 1, 4096), 3: (4,), 4: (4,)},
        [2],
        (3, 4),
    ),
    "group-norm-hardswish": (  # l2-s7-000038: GroupNorm(1) over (6, 7949, 1, 1, 8192); here 3 groups of 20480
        [("GroupNorm", [0], 1, {"num_groups": 1}, [3, 4]), ("Hardswish", [1], 2, {}, [])],
        {0: (3, 40, 1, 1, 512), 1: (3, 40, 1, 1, 512), 2: (3, 40, 1, 1, 512), 3: (40,), 4: (40,)},
        [2],
        (3, 4),
    ),
}


@pytest.mark.parametrize("name", sorted(LEVEL2))
def test_split_norm_level2_programs(name, tmp_path):
    """The level-2 norms that were slower than torch.compile, in small: lowered through split_norm by the shape alone
    (few long rows), the elementwise op fused into both kernels or the second; PyTorch's values under the
    interpreter's tiles (check_lowering, the verifier's static rules too) and a GPU's, in train and eval mode (the
    batch norm's statistics are the batch's in both: training=True)."""
    rec = _handmade(*LEVEL2[name])
    src = lower_program(Program.from_json(rec.dag), rec.source)
    assert "split_norm_setup(" in src and "row_norm_kernel" not in src and "batch_norm_kernel" not in src
    check_lowering(rec, tmp_path)
    gpu_tiles = src.replace("def compiled(t):\n    ", "def compiled(t):\n    return True\n    ")
    model, new, inputs = model_pair(rec.source, _import(gpu_tiles, tmp_path / f"gpu_{name.replace('-', '_')}.py"))
    with torch.no_grad():
        for mode in ("train", "eval"):
            model.train(mode == "train")
            new.train(mode == "train")
            torch.testing.assert_close(new(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)
