"""The operator space: specs with arity, PyTorch rendering, CP-SAT constraints, FLOP model, dtypes."""

from drtriton_ray.ops.registry import DRTRITON_OPS, EXTRA_OPS, REGISTRY, SYNTH_NAMES, get_op
from drtriton_ray.ops.spec import FLOAT_DTYPES, Built, OpSpec

__all__ = ["DRTRITON_OPS", "EXTRA_OPS", "REGISTRY", "SYNTH_NAMES", "get_op", "FLOAT_DTYPES", "Built", "OpSpec"]
