"""The GPU machine has no Ray, pydantic, OR-Tools or FastAPI: everything but service.py must import without them."""

import subprocess
import sys

BLOCKED = ("ray", "pydantic", "ortools", "fastapi")
MODULES = (
    "pool",
    "static",
    "task",
    "verdict",
    "metrics",
    "compare",
    "inputs",
    "hooks",
    "launchers",
    "timing",
    "checks",
    "worker",
    "warmup",
    "cli",
)


def test_verify_core_imports_without_ray_pydantic_ortools_fastapi():
    code = (
        f"import sys\nfor name in {BLOCKED!r}:\n    sys.modules[name] = None\n"
        + "".join(f"import drtriton_ray.verify.{m}\n" for m in MODULES)
        + f"assert not any(m.split('.')[0] in {BLOCKED!r} for m in sys.modules if sys.modules[m] is not None)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
