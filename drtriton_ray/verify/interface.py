"""The one verifier interface. Batches of typed requests in, answers in the same order out:

- `verify(tasks)`: a `Task` each (problem, candidate, policy, other shapes, timing settings) -> a `Verdict` each;
- `capture(sources, dynamic)`: a user's program each -> {"graph": ir.Graph JSON} or {"error": one line}, captured
  where user code may run (a sandboxed worker);
- `inductor_code(requests)`: a fragment's problem and its varying dims each -> torch.compile's code for it on the
  verifier's device (capture/inductor.compiled_code) or {"error": one line}: the search's `inductor` source;
- `time_reference(source)`: a program's eager and torch.compile times on the verifier's GPU, or None.

Implemented by the local worker pool (`WorkerPool`), the Ray service over pools on every GPU (`VerifyService`) and
the Serve deployment's handle (`serve.verifier.RemoteVerifier`); the CLI, the search, RL and the service's Search
take any of them."""

from __future__ import annotations

from typing import Optional, Protocol, Sequence

from drtriton_ray.verify.task import Task
from drtriton_ray.verify.verdict import Verdict


class Verifier(Protocol):
    def verify(self, tasks: list[Task]) -> list[Verdict]: ...

    def capture(self, sources: list[str], dynamic: Optional[Sequence[str]] = ()) -> list[dict]: ...

    def inductor_code(self, requests: list[tuple[str, list]]) -> list[dict]: ...

    def time_reference(self, source: str) -> Optional[dict]: ...
