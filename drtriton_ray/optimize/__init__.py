"""A whole model made faster, drop-in: `optimize(model, example_inputs)` converts each group of its blocks once and
swaps the verified, shape-general answers in as torch custom ops; `load(DIR)` rebuilds the optimized model from the
base model's folder. Modules: record (candidate blocks, their calls), problem (a group's KernelBench problem), swap
(custom ops, swapped classes), run (the whole pass and its report), store (DIR: answers, manifest, report), cli."""

from drtriton_ray.optimize.run import OptimizeReport, OptimizeResult, optimize
from drtriton_ray.optimize.store import apply, load
from drtriton_ray.optimize.swap import SwapError

__all__ = ["OptimizeReport", "OptimizeResult", "SwapError", "apply", "load", "optimize"]
