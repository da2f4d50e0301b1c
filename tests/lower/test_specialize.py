"""lower/specialize.py: a solution's library branches folded to the constants the solution passes."""

import ast

from drtriton_ray.lower.specialize import constants, specialize

MODULE = '''
def kernel(x, OP, MODE=0, config=None):
    """Doc."""
    y = x
    # the mode's own comment stays
    if OP == 0:
        y = y + 1  # add
    elif OP == 1 or OP == 2:
        y = y * 2
    elif x > 3:
        y = y - 3
    else:
        y = -y
    if MODE:
        y = y + 10
    z = 5 if OP in (4, 5) else 6
    w = config if config else 0
    return y + z + w


def wrapper(x, op):
    return kernel(x, op)


class Model:
    def forward(self, x):
        return wrapper(x, 0) + wrapper(x + 1, 0)
'''


def run(source: str, *args):
    space: dict = {}
    exec(compile(source, "<test>", "exec"), space)
    return space


def test_branches_fold_to_the_constants_every_call_passes():
    out = specialize(MODULE)
    ast.parse(out)
    assert constants(ast.parse(MODULE))["wrapper"] == {"op": 0}
    assert constants(ast.parse(MODULE))["kernel"] == {"OP": 0, "MODE": 0}  # a default counts where none is passed
    body = out[out.index("def kernel") : out.index("def wrapper")]
    assert "if OP" not in body and "elif" not in body and "MODE" not in body.split(":", 1)[1]
    assert "y = y + 1  # add" in body and "# the mode's own comment stays" in body  # the library's text, as written
    assert "z = 6" in body and "w = config if config else 0" in body  # `config` stays open (the search sets it)
    for x in (-2.0, 1.0, 7.0):
        assert run(out)["kernel"](x, 0) == run(MODULE)["kernel"](x, 0)


def test_a_parameter_some_call_passes_otherwise_stays_open():
    two = MODULE.replace("wrapper(x + 1, 0)", "wrapper(x + 1, 1)")
    assert constants(ast.parse(two))["kernel"] == {"MODE": 0}
    body = specialize(two)
    assert "elif OP == 1 or OP == 2:" in body
    starred = MODULE.replace("return kernel(x, op)", "return kernel(x, *[op])")
    assert "OP" not in constants(ast.parse(starred))["kernel"]
    splat = MODULE.replace("return kernel(x, op)", "return kernel(x, op, **{'MODE': 1})")
    assert constants(ast.parse(splat))["kernel"] == {"OP": 0}  # named: OP; MODE may come from the splat
    assigned = MODULE.replace('    """Doc."""', '    """Doc."""\n    OP = OP + 1')
    assert "OP" not in constants(ast.parse(assigned))["kernel"]
    escaped = MODULE.replace("return kernel(x, op)", "f = kernel\n    return f(x, op)")
    assert constants(ast.parse(escaped))["kernel"] == {}
    assert specialize(escaped).count("if OP == 0:") == 1


def test_an_undecided_test_keeps_its_chain_and_an_emptied_block_gets_pass():
    source = """
def f(x, A):
    if x > 0:
        if A == 1:
            x = 2
    elif A == 0:
        x = 3
    elif x < -5:
        x = 4
    return x


def g(x):
    return f(x, 0)
"""
    out = specialize(source)
    body = out[out.index("def f") : out.index("def g")]
    assert "if x > 0:\n        pass\n    else:\n        x = 3\n" in body, body
    assert "x < -5" not in body
    for x in (-9, -1, 0, 4):
        assert run(out)["f"](x, 0) == run(source)["f"](x, 0)


def test_a_lowered_sum_carries_only_its_reduction():
    from drtriton_ray.lower.emit import lower_source
    from drtriton_ray.synth import Sampler, SynthConfig

    rec = Sampler(SynthConfig(level=1, profile="small", ops=("Sum",)), seed=7).sample(0)
    out = lower_source(rec.source)
    kernel = out[out.index("def reduce_kernel") : out.index("def reduce_lanes")]
    assert "OP ==" not in kernel and "tl.maximum" not in kernel and "acc += x" in kernel
    assert "def tuned(meta, config, t):" in out and "if config and compiled(t)" in out
