"""conv_small_kernel, the rank-1 FMA convolution for small reductions (few input channels x taps): against PyTorch
in the Triton interpreter under the interpreter's and a GPU's tiles (and compiled on a GPU where there is one); the
emitter's choice between it and conv_kernel; the probe script's CPU smoke run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import test_lowering
from test_lowering import _handmade, check_lowering

from drtriton_ray.lower import lowerings, tuning, wrappers
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.ir import Program

tiled = test_lowering.tiled  # the fixture: the interpreter's tiles, a GPU's, compiled on a GPU
ROOT = Path(__file__).resolve().parents[2]

# (spatial dims, transposed, groups, in channels, out channels, size, kernel, stride, padding, dilation, batch)
CASES = [
    (2, False, 1, 1, 20, (1, 40), 6, 1, 3, 1, 5),  # a one-row input under 6x6, padding 3: kernel rows skipped
    (2, False, 1, 1, 9, (30, 7), 7, 1, 3, 1, 1),  # one image, 7x7: blocks over several rows
    (2, False, 1, 1, 5, (2, 9), 6, 1, 3, 1, 40),  # many images of two rows
    (1, False, 1, 1, 3, (700,), 5, 2, 2, 1, 2),  # positions over several GPU blocks, stride
    (1, False, 2, 6, 34, (33,), 3, 1, 2, 2, 3),  # groups, dilation, output channels over several blocks
    (3, False, 1, 2, 4, (5, 4, 6), 3, 2, 1, 1, 2),
    (2, False, 3, 3, 6, (9, 8), 3, 1, 1, 1, 2),  # depthwise: one channel per group
    (1, True, 1, 1, 32, (20,), 7, 3, 0, 1, 2),  # a taps step of 3: phases reached by 2 or 3 taps
    (2, True, 1, 2, 3, (4, 5), 3, 3, 0, 2, 2),  # stride 3, dilation 2
    (2, True, 2, 4, 6, (5, 5), 4, 2, 1, 1, 1),
    (3, True, 1, 1, 8, (2, 3, 2), 4, 1, 2, 1, 2),
    (3, True, 1, 2, 8, (1, 1, 1), 4, 2, 2, 1, 1),  # a 1x1x1 output: fewer phases than the stride
]


def _conv(case):
    *conv, batch = case
    return test_lowering.torch_conv(tuple(conv), batch)


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_conv_small_matches_torch(tiled, case):
    torch.manual_seed(0)
    x, w, b, want = _conv(case)
    _, transposed, groups, _, _, _, _, stride, padding, dilation, _ = case
    got = tiled.conv_small(x, w, b, tuple(want.shape), stride, padding, dilation, groups, transposed)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_conv_small_tile_configs():
    """Configs the tuner tries (lower/tuning.py's candidates) keep the values: other tiles and warps, as a GPU runs
    them (the wrappers told they run compiled, the interpreter running them)."""
    torch.manual_seed(0)
    x, w, b, want = _conv(CASES[3])
    compiled = wrappers.compiled
    wrappers.compiled = lambda t: True
    try:
        for config in tuning.candidates("conv_small_kernel", None):
            got = wrappers.conv_small(x, w, b, tuple(want.shape), 2, 2, 1, 1, False, config)
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    finally:
        wrappers.compiled = compiled


def test_small_reduction_choice():
    """The emitter's kernel per conv (tuning.resolved): few channels x taps take conv_small_kernel, many input
    channels conv_kernel; a config's SMALL decides, a config without it was tuned for conv_kernel."""
    conv2d = {"stride": 1, "padding": 3, "dilation": 1, "groups": 1}
    one = [[32, 1, 1, 455], [8177, 1, 6, 6]]
    assert tuning.resolved("Conv2d", conv2d, one, [32, 8177, 2, 456], None) == {"SMALL": True}
    many = [[16, 64, 56, 56], [128, 64, 3, 3]]
    assert tuning.resolved("Conv2d", conv2d, many, [16, 128, 56, 56], None) == {"SMALL": False}
    assert tuning.resolved("Conv2d", conv2d, many, [16, 128, 56, 56], {"SMALL": True}) == {"SMALL": True}
    assert tuning.resolved("Conv2d", conv2d, one, [32, 8177, 2, 456], {"BLOCK_P": 128}) == {
        "BLOCK_P": 128,
        "SMALL": False,
    }
    # a transposed conv's taps per phase: stride 3 reaches each phase with every third of 7 taps
    transposed = {"stride": 3, "padding": 0, "dilation": 1, "groups": 1}
    assert lowerings.phase_taps(transposed, [8, 32, 7], True) == 3
    assert tuning.resolved("ConvTranspose1d", transposed, [[2, 8, 20], [8, 32, 7]], [2, 32, 62], None)["SMALL"]
    assert tuning.resolved("Sum", {"dim": 0}, [[3, 4]], [4], {"BLOCK_R": 8}) == {"BLOCK_R": 8}


def _program(op, cin, cout, size, k, epilogue):
    n = len(size)
    params = {"stride": 1, "padding": k // 2, "dilation": 1, "groups": 1}
    out = (2, cout, *[s + 2 * (k // 2) - k + 1 for s in size])
    nodes = [(op, [0], 1, params, [2, 3])] + ([("ReLU", [1], 4, {}, [])] if epilogue else [])
    shapes = {0: (2, cin, *size), 1: out, 2: (cout, cin, *[k] * n), 3: (cout,)} | ({4: out} if epilogue else {})
    return _handmade(nodes, shapes, [4 if epilogue else 1], weights=(2, 3))


@pytest.mark.parametrize(
    "op, cin, epilogue, small",
    [("Conv2d", 1, False, True), ("Conv2d", 1, True, True), ("Conv1d", 2, True, True), ("Conv2d", 32, True, False)],
)
def test_emitted_conv(op, cin, epilogue, small, tmp_path):
    """A lowered conv carries the one kernel the emitter chose (conv_small_kernel, or conv_kernel, and their
    wrappers), alone or fused with an epilogue, and gives PyTorch's values."""
    size = (3, 11) if op == "Conv2d" else (40,)
    rec = _program(op, cin, 5, size, 3, epilogue)
    src = lower_program(Program.from_json(rec.dag), rec.source, gpu=None)
    assert ("def conv_small_kernel(" in src or "def conv_small_setup(" in src) == small
    assert ("def conv_kernel(" in src or "def conv_setup(" in src) != small
    assert ("# fused: " in src) == epilogue
    check_lowering(rec, tmp_path)


@pytest.mark.slow  # a GPU bench's smoke run on CPU
def test_conv_probe_smoke(tmp_path):
    """bench/conv_probe.py --smoke: every variant of its tiny shapes in the interpreter, within the verifier's
    float32 tolerance."""
    out = tmp_path / "probe.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, str(ROOT / "bench" / "conv_probe.py"), "--smoke", "--out", str(out)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert {r["variant"] for r in rows} >= {"cudnn", "gemm", "small"}
    assert all("error" not in r and r["tol"] <= 1 for r in rows), [r for r in rows if r.get("error")]
    assert sum(1 for r in rows if r.get("chosen")) == len({r["shape"] for r in rows})


HOPPER = """
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from drtriton_ray.lower.kernels import conv_small_kernel as fn

for transposed in (False, True):
    consts = {"TRANSPOSED": transposed, "BLOCK_CO": 16, "BLOCK_P": 512}
    ones = ("D", "OD", "KD", "SD", "DD", "QD", "RD", "JD", "TD") + (() if transposed else ("RH", "RW"))
    consts.update(dict.fromkeys(ones, 1))
    signature = {a: "constexpr" if a in consts else "*fp32" if a.endswith("_ptr") else "i32" for a in fn.arg_names}
    constexprs = {(fn.arg_names.index(a),): v for a, v in consts.items()}
    kernel = triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 90, 32))
    print(transposed, kernel.asm["ptx"].count("fma.rn.f32"), len(kernel.asm["cubin"]))
"""


def test_conv_small_compiles_for_hopper():
    """Triton's compiler for an H100 (sm_90: PTX and cubin, no GPU needed) takes the kernel, direct and transposed,
    with a 2-d conv's arguments specialized to 1 as a launch specializes them: what the interpreter accepts, the
    compiler may not. Compiled in a process of its own: here the kernels are the interpreter's."""
    stdout = test_lowering.compile_for_hopper(HOPPER)
    for line in stdout.split("\n")[:2]:
        transposed, fmas, cubin = line.split()
        assert int(fmas) >= 16 and int(cubin) > 0, line  # the rank-1 update: FMAs, no dot
