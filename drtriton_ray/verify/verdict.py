"""The verdict record: one typed result per verified candidate, to JSON and to Arrow.

Imports nothing beyond the standard library at module level so the parent, the worker and the CLI can all
use it (pyarrow is imported only when a table is asked for)."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Optional

SPEEDUP_FLAG = 10.0  # above this a speedup is flagged for review (KernelBench)


def speedup(ref_ms: Optional[float], cand_ms: Optional[float]) -> Optional[float]:
    if ref_ms is None or not cand_ms:
        return None
    return ref_ms / cand_ms


class Status(str, enum.Enum):
    """Verdict categories. Every check that can reject has its own, so a reward or a report can tell them apart."""

    CORRECT = "correct"
    BAD_PROBLEM = "bad_problem"  # the problem itself is unusable (CLI exit 2)
    INVALID_SOURCE = "invalid_source"  # empty, not UTF-8, syntax error, no ModelNew
    STATIC_REJECTED = "static_rejected"  # an AST rule; the reason names it
    TAMPERING = "tampering"  # a captured grader function or hook was replaced at run time
    RUNTIME_ERROR = "runtime_error"  # the candidate raised (import, construction or forward)
    NO_LAUNCH = "no_launch"  # a forward call launched no Triton kernel
    TORCH_COMPUTE = "torch_compute"  # strict policy: PyTorch computed on the forward path (dispatch audit)
    OUTPUT_TYPE = "output_type"  # not a plain torch.Tensor (subclass, list, None...)
    OUTPUT_COUNT = "output_count"  # a different number of outputs than the reference
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    DEVICE_MISMATCH = "device_mismatch"
    VALUE_MISMATCH = "value_mismatch"
    INPUT_MUTATED = "input_mutated"
    NOT_FAITHFUL = "not_faithful"  # output still matched with every Triton kernel made a no-op
    TIMEOUT = "timeout"  # per-task wall clock or CPU-time limit; the worker was replaced
    RESOURCE_LIMIT = "resource_limit"  # memory watchdog; the worker was replaced
    CRASH = "crash"  # the worker died (signal, os._exit); it was replaced
    DEVICE_ERROR = "device_error"  # CUDA error: the context is poisoned, the worker was replaced
    VERIFIER_LIMIT = "verifier_limit"  # the reference itself ran out of memory: nothing could be judged
    MISSING = "missing"  # eval: no solution file for a problem


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str = ""


@dataclass
class Verdict:
    status: str
    reason: str = ""
    checks: list[CheckResult] = field(default_factory=list)
    max_abs_error: Optional[float] = None
    max_rel_error: Optional[float] = None
    candidate_ms: Optional[float] = None
    eager_ms: Optional[float] = None
    compile_ms: Optional[float] = None
    speedup_vs_eager: Optional[float] = None
    speedup_vs_compile: Optional[float] = None
    speedup_flagged: bool = False  # > 10x: implausible, review before trusting
    gpu_kernel_ms: Optional[float] = None  # device time spent in kernels during the task (GPU only)
    # one timed call's least memory traffic (verify.checks.bytes_moved): with candidate_ms, the bandwidth reached
    bytes_moved: Optional[int] = None
    gpu_peak_gib: Optional[float] = None  # the worker's peak reserved device memory during the task (GPU only)
    gpu_held_gib: Optional[float] = None  # what it still reserved after handing its cache back (GPU only)
    worker: str = ""
    device: str = ""
    duration_s: float = 0.0
    seed: Optional[int] = None
    name: str = ""  # the problem's name where known (eval, service batches)
    # seconds per phase in the worker (problem, import, construct, compile, checks, faithfulness, timing,
    # gate_wait: waiting for the GPU's shared/exclusive section; exclusive_held: the part of the phases' seconds
    # spent holding it exclusive; trial:inputs, trial:candidate, trial:reference, trial:compare: the parts of
    # checks); where the ~seconds per candidate go
    phases: dict = field(default_factory=dict)
    # the shapes the candidate was checked at beyond the problem's own (Task.shapes): {"values", "ok", "reason"},
    # and "skipped" (ok, reason says why) where the problem itself has no answer there; general: right at all of
    # them (None: no other shape asked). `correct` is about the problem's own shape.
    shapes: list = field(default_factory=list)
    general: Optional[bool] = None

    def set_reference(self, eager_ms: Optional[float], compile_ms: Optional[float]) -> None:
        """Reference times (measured once per problem and GPU model) and the speedups they give."""
        self.eager_ms, self.compile_ms = eager_ms, compile_ms
        self.speedup_vs_eager = speedup(eager_ms, self.candidate_ms)
        self.speedup_vs_compile = speedup(compile_ms, self.candidate_ms)
        self.speedup_flagged = max(self.speedup_vs_eager or 0, self.speedup_vs_compile or 0) > SPEEDUP_FLAG

    @property
    def correct(self) -> bool:
        return self.status == Status.CORRECT.value

    def to_dict(self) -> dict:
        d = asdict(self)
        d["correct"] = self.correct
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict) -> "Verdict":
        names = {f.name for f in fields(cls)}
        kept = {k: v for k, v in d.items() if k in names}
        kept["checks"] = [CheckResult(**c) for c in d.get("checks", [])]
        return cls(**kept)


def arrow_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("name", pa.string()),
            ("status", pa.string()),
            ("correct", pa.bool_()),
            ("reason", pa.string()),
            ("checks", pa.list_(pa.struct([("name", pa.string()), ("passed", pa.bool_()), ("detail", pa.string())]))),
            ("max_abs_error", pa.float64()),
            ("max_rel_error", pa.float64()),
            ("candidate_ms", pa.float64()),
            ("eager_ms", pa.float64()),
            ("compile_ms", pa.float64()),
            ("speedup_vs_eager", pa.float64()),
            ("speedup_vs_compile", pa.float64()),
            ("speedup_flagged", pa.bool_()),
            ("gpu_kernel_ms", pa.float64()),
            ("gpu_peak_gib", pa.float64()),
            ("gpu_held_gib", pa.float64()),
            ("worker", pa.string()),
            ("device", pa.string()),
            ("duration_s", pa.float64()),
            ("seed", pa.int64()),
            ("phases", pa.map_(pa.string(), pa.float64())),
        ]
    )


def to_arrow(verdicts: list[Verdict]):
    import pyarrow as pa

    schema = arrow_schema()
    rows = [v.to_dict() for v in verdicts]
    return pa.Table.from_pylist([{k: r[k] for k in schema.names} for r in rows], schema=schema)
