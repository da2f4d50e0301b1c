"""Synthesis settings: size profiles and the one config a sampler is built from."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from drtriton_ray.ops import REGISTRY, SYNTH_NAMES
from drtriton_ray.ops.cp import Bounds


class SizeProfile(BaseModel):
    """Per-tensor element bounds, a largest dim, a total-FLOP band and a memory cap (elements)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    min_elems: int = Field(ge=1)
    max_elems: int = Field(ge=1)
    max_dim: int = Field(ge=2)
    min_flops: int = Field(ge=0)
    max_flops: int = Field(ge=1)
    max_total_elems: int = Field(ge=1)

    @model_validator(mode="after")
    def _consistent(self):
        problems = []
        if self.min_elems > self.max_elems:
            problems.append(f"min_elems {self.min_elems} > max_elems {self.max_elems}")
        if self.min_flops > self.max_flops:
            problems.append(f"min_flops {self.min_flops} > max_flops {self.max_flops}")
        if self.max_total_elems < 2 * self.min_elems:
            problems.append(
                f"max_total_elems {self.max_total_elems} cannot hold an input and an output "
                f"of min_elems {self.min_elems}"
            )
        if problems:
            raise ValueError("size bounds nothing can meet: " + "; ".join(problems))
        return self

    def bounds(self) -> Bounds:
        return Bounds(**self.model_dump())


PROFILES: dict[str, SizeProfile] = {
    # DRTriton's: tensors of 2^5..2^30 elements, dims <= 8192, 2^34..2^35 FLOPs, <= 4*2^30 elements.
    "paper": SizeProfile(
        min_elems=2**5, max_elems=2**30, max_dim=8192, min_flops=2**34, max_flops=2**35, max_total_elems=2**32
    ),
    # Small enough for the Triton interpreter on CPU to check a candidate in seconds.
    "small": SizeProfile(
        min_elems=2**3, max_elems=2**16, max_dim=1024, min_flops=0, max_flops=2**28, max_total_elems=2**19
    ),
}

DType = Literal["float32", "bfloat16", "float16"]


class SynthConfig(BaseModel):
    """Everything that decides the programs a sampler emits (with the seed and the index)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    level: int = Field(ge=1, description="number of compute operators per program")
    profile: str | SizeProfile = "small"
    dtype: DType = "float32"
    fanout_prob: float = Field(
        0.3,
        ge=0.0,
        le=1.0,
        description="chance an input is drawn from every "
        "existing tensor (allowing one tensor to feed several operators)",
    )
    ops: tuple[str, ...] | None = Field(None, description="restrict the operator space to these names")
    validate_programs: bool = Field(True, alias="validate", description="run each program once in PyTorch")
    conditioning_trials: int = Field(
        2,
        ge=0,
        description="with validate: input seeds per verifier distribution on "
        "which a float32 program must match its own float64 result (0: no check)",
    )
    device: str = "cpu"
    solver_seconds: float = Field(5.0, gt=0, description="CP-SAT deterministic time limit per solve")
    max_attempts: int = Field(24, ge=1)

    @model_validator(mode="after")
    def _check(self):
        if isinstance(self.profile, str) and self.profile not in PROFILES:
            raise ValueError(f"unknown size profile {self.profile!r}; known: {', '.join(PROFILES)}")
        if self.ops is not None:
            unknown = [o for o in self.ops if o not in REGISTRY]
            if unknown:
                raise ValueError(f"unknown operator(s) {', '.join(unknown)}; known: {', '.join(sorted(REGISTRY))}")
            if not self.ops:
                raise ValueError("the operator list is empty")
            bad = [o for o in self.ops if self.dtype not in REGISTRY[o].dtypes]
            if bad:
                raise ValueError(f"operator(s) {', '.join(bad)} do not support dtype {self.dtype}")
        return self

    @property
    def size_profile(self) -> SizeProfile:
        return PROFILES[self.profile] if isinstance(self.profile, str) else self.profile

    @property
    def profile_name(self) -> str:
        return self.profile if isinstance(self.profile, str) else "custom"

    def op_space(self) -> list[str]:
        """The operators to draw: those named, else every operator of the registry."""
        names = list(self.ops) if self.ops is not None else SYNTH_NAMES
        return [n for n in names if self.dtype in REGISTRY[n].dtypes]
