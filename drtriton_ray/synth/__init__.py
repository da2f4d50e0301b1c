"""CSP-DAG program synthesis: operators wired into DAGs, shapes and params solved by CP-SAT,
rendered in KernelBench format, validated in PyTorch."""

from drtriton_ray.synth.config import PROFILES, SizeProfile, SynthConfig
from drtriton_ray.synth.sampler import ProgramRecord, Sampler, SynthesisError

__all__ = [
    "PROFILES",
    "SizeProfile",
    "SynthConfig",
    "ProgramRecord",
    "Sampler",
    "SynthesisError",
]
