"""`convert(source, ...)`: a PyTorch program (KernelBench format) in, a verified Triton `ModelNew` module out, by
DRTriton's test-time search (drtriton_ray/search). The CLI (`drtriton convert`) and the service call it too.

    from drtriton_ray.convert import convert
    result = convert(open("problem.py").read(), device="cpu", budget_s=300)
    open("solution.py", "w").write(result.module_source)
    print(result.report.reason, result.report.speedup_vs_eager)

The keywords are `ConversionSettings`' fields (drtriton_ray/search/settings.py: defaults and help); `convert_with`
takes the settings as one object. The user's code runs only inside verifier workers (capture and verification),
never in the caller's process. This module is the public door: the code lives in drtriton_ray/search/convert.py.
"""

from drtriton_ray.search.convert import ConversionError, check_request, convert, convert_with, load_policy
from drtriton_ray.search.search import ConversionReport, ConversionResult, Progress
from drtriton_ray.search.settings import DEFAULTS, ConversionSettings, default_engine, default_sources

__all__ = [
    "DEFAULTS",
    "ConversionError",
    "ConversionReport",
    "ConversionResult",
    "ConversionSettings",
    "Progress",
    "check_request",
    "convert",
    "convert_with",
    "default_engine",
    "default_sources",
    "load_policy",
]
