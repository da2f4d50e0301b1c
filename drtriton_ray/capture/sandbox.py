"""Capture where user code may run: in a verifier worker (its sandbox, limits and watchdogs), never in the caller's
process. The caller passes any verifier with `capture(sources) -> [dict]`: a local `WorkerPool` or the Ray
`VerifyService`."""

from __future__ import annotations

from typing import Optional, Protocol, Sequence

from drtriton_ray.capture.errors import CaptureError
from drtriton_ray.ir import Graph


class Capturer(Protocol):
    def capture(self, sources: list[str], dynamic: Optional[Sequence[str]] = ()) -> list[dict]: ...


def capture_program(source: str, verifier: Capturer, dynamic: Optional[Sequence[str]] = ()) -> Graph:
    """The program's Graph, captured in a sandboxed worker; CaptureError with the worker's one-line reason.
    `dynamic`: the size constants that may vary (capture/dims.py: None infers them, () none)."""
    if not isinstance(source, str) or not source.strip():
        raise CaptureError("the program is empty")
    (result,) = verifier.capture([source], dynamic)
    if "error" in result:
        raise CaptureError(result["error"])
    return Graph.from_json(result["graph"])
