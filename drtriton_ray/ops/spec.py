"""What an operator is: arity, ranks, CP-SAT constraints, FLOP model, PyTorch rendering, dtypes."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Callable

from drtriton_ray.ops.cp import ShapeModel, TensorVar

FLOAT_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Flag:
    """A boolean param (rendered True/False, not 1/0)."""

    var: object


@dataclass(frozen=True)
class Derived:
    """A param computed from the solution (a view's shape, a permutation): `fn(value)`, where `value(var)` is a
    solved variable's value."""

    fn: Callable[[Callable], object]


# What values an input slot takes (OpSpec.domains). The verifier redraws every floating input from signed,
# wide distributions, so the synthesizer keeps a restricted slot in its domain inside the program (synth/wiring.py).
DOMAINS = (
    "real",  # any floating tensor
    "positive",  # > 0 (log, sqrt, rsqrt, reciprocal, fractional and negative powers)
    "bounded",  # in [-1.5, 1.5] (an exponent: larger ones overflow on the verifier's large inputs)
    "mask",  # a boolean tensor (masked_fill, where)
    "classes",  # int64 class indices into the last dim of the operator's first input (cross-entropy targets)
)
FRESH_INPUT_DOMAINS = ("mask", "classes")  # a slot that reads a fresh program input, never a computed tensor


@dataclass
class Built:
    """What `OpSpec.constrain` adds to a model for one node."""

    flops: object  # linear expression over model vars
    flops_hi: int  # an upper bound on it (the domain of the coarse FLOP var)
    params: dict[str, object] = field(default_factory=dict)  # solved structural params (exprs)
    weights: list[tuple[str, TensorVar, str]] = field(default_factory=list)  # (role, tensor, init)
    choices: list = field(default_factory=list)  # free booleans the synthesizer fixes by a coin flip (CP-SAT: all 0)


@dataclass(frozen=True)
class OpSpec:
    """One operator of the space.

    `template` is the PyTorch expression, formatted with the input names as {0}, {1}, ..., the
    weight references as {w0}, {w1}, ... and every param by name. `in_ranks` (ranks any input may
    have) and `out_ranks` (input ranks, one per input -> possible output ranks) are a coarse
    rank relation used to wire DAGs and to enumerate composable pairs; the exact rules live in
    `constrain`, which the synthesizer hands to CP-SAT.
    """

    name: str
    arity: int
    family: str
    template: str
    constrain: Callable[[ShapeModel, list[TensorVar], TensorVar], Built]
    in_ranks: frozenset[int]
    out_ranks: Callable[[tuple[int, ...]], set[int]]
    dtypes: tuple[str, ...] = FLOAT_DTYPES
    out_kind: str = "float"  # "index" outputs (ArgMax) are never fed to another operator
    sample: Callable[[random.Random], dict] | None = None  # non-structural params, e.g. slopes
    # Linear FLOP model, when there is one: flops = per_elem * size of the output ("out") or of
    # the first input ("in"). None for contractions (matmul, conv, pool). With keeps_size, the
    # output has as many elements as the first input. Used for a quick upper bound on FLOPs.
    per_elem: int | None = None
    flops_on: str = "out"
    keeps_size: bool = False
    domains: tuple[str, ...] = ()  # per input slot, one of DOMAINS; slots past the tuple are "real"
    scalar_out: bool = False  # the output may be 0-d (a loss), below the profile's element minimum

    def domain(self, slot: int) -> str:
        return self.domains[slot] if slot < len(self.domains) else "real"

    def draw_params(self, rng: random.Random) -> dict:
        return self.sample(rng) if self.sample else {}

    def rank_combos(self, input_ranks: list[set[int]], out_ranks: set[int]):
        """Every (input ranks, output rank) the relation allows within the given sets."""
        for combo in itertools.product(*(sorted(r & self.in_ranks) for r in input_ranks)):
            for o in self.out_ranks(combo) & out_ranks:
                yield combo, o

    def render(self, inputs: list[str], weights: list[str], params: dict) -> str:
        """The PyTorch expression; a norm's `eps`, where a program has its own, as the call's last argument."""
        text = self.template.format(*inputs, **{f"w{i}": w for i, w in enumerate(weights)}, **params)
        return text[:-1] + f", eps={params['eps']!r})" if params.get("eps") is not None else text

    def describe(self) -> dict:
        return {
            "name": self.name,
            "arity": self.arity,
            "family": self.family,
            "dtypes": list(self.dtypes),
            "out_kind": self.out_kind,
            "in_ranks": sorted(self.in_ranks),
            "torch": self.template,
            "domains": [self.domain(k) for k in range(self.arity)],
        }
