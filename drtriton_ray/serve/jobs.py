"""Jobs: one JSON file per conversion under the configured state folder, written atomically (tmp + rename).

Why files and not a detached Ray actor: every Api and Search replica reads the same folder, nothing has to be
alive to keep a job (a restarted replica, or the whole cluster restarted, finds every job where it was), and one
slow writer cannot stall every request as a single actor would. On a cluster the folder is on storage every node
sees (the KubeRay manifest mounts a volume there).

Layout under ROOT: `jobs/ID.json` (state, progress, options, the source), `results/ID.py` and `results/ID.json`
(the answer and its report), `active/ID` (one marker per queued or running job: counting them is a listdir),
`cancel/ID` (set by DELETE; the search stops at its next progress event), `beat/ID` (its mtime: the last sign of
life from whoever drives or runs the job)."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Optional

STATES = ("queued", "running", "succeeded", "failed", "cancelled")
ACTIVE = ("queued", "running")
HISTORY_MAX = 200  # progress history points kept per job (the page draws them)


def empty_progress() -> dict:
    return {
        "stage": "queued",
        "detail": "",
        "fragments_done": 0,
        "fragments_total": 0,
        "candidates": {},
        "verified": 0,
        "best_speedup_vs_eager": None,
        "best_speedup_vs_compile": None,
        "history": [],
    }


def write_atomic(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class JobStore:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        for sub in ("jobs", "results", "active", "cancel", "beat"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def _job(self, job_id: str) -> Path:
        return self.root / "jobs" / f"{job_id}.json"

    @staticmethod
    def valid_id(job_id: str) -> bool:
        """Ids are 32 hex digits: anything else (a path, dots) never reaches the file system."""
        return len(job_id) == 32 and all(c in "0123456789abcdef" for c in job_id)

    def create(self, source: str, options: dict, client: str) -> dict:
        now = time.time()
        job = {
            "id": uuid.uuid4().hex,
            "state": "queued",
            "progress": empty_progress(),
            "result": None,
            "error": None,
            "created_at": now,
            "updated_at": now,
            "client": client,
            "options": options,
            "source": source,
            "attempts": 0,
        }
        self.save(job)
        (self.root / "active" / job["id"]).write_text(client, encoding="utf-8")
        self.beat(job["id"])
        return job

    def load(self, job_id: str) -> Optional[dict]:
        if not self.valid_id(job_id):
            return None
        try:
            job = json.loads(self._job(job_id).read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        if self.cancelled(job_id) and job["state"] in ACTIVE:  # the marker wins over a runner's late write
            job["state"] = "cancelled"
        return job

    def save(self, job: dict) -> None:
        job["updated_at"] = time.time()
        write_atomic(self._job(job["id"]), json.dumps(job))
        if job["state"] not in ACTIVE:
            (self.root / "active" / job["id"]).unlink(missing_ok=True)

    def update(self, job_id: str, **fields) -> Optional[dict]:
        """Read, change, write. Only one process writes a job's file at a time (its runner, else its driver), so
        this needs no lock; cancellation goes through its own marker."""
        job = self.load(job_id)
        if job is None:
            return None
        if job["state"] == "cancelled" and fields.get("state") in ACTIVE:
            fields.pop("state")
        job.update(fields)
        self.save(job)
        return job

    def cancel(self, job_id: str) -> None:
        (self.root / "cancel" / job_id).touch()
        self.update(job_id, state="cancelled", error=None)

    def cancelled(self, job_id: str) -> bool:
        return (self.root / "cancel" / job_id).exists()

    def beat(self, job_id: str) -> None:
        (self.root / "beat" / job_id).touch()

    def last_beat(self, job_id: str) -> float:
        try:
            return (self.root / "beat" / job_id).stat().st_mtime
        except FileNotFoundError:
            return 0.0

    def active(self) -> dict[str, str]:
        """Queued or running jobs: id -> client."""
        found = {}
        for p in (self.root / "active").iterdir():
            try:
                found[p.name] = p.read_text(encoding="utf-8")
            except FileNotFoundError:  # finished meanwhile
                pass
        return found

    def set_machine(self, machine: str) -> None:
        """The Verifier replicas' machine key (GPU model), learnt by a Search replica: the Api keys its cache
        look-ups with it."""
        write_atomic(self.root / "machine", machine)

    def machine(self) -> Optional[str]:
        try:
            return (self.root / "machine").read_text(encoding="utf-8") or None
        except FileNotFoundError:
            return None

    def put_result(self, job_id: str, module_source: str, report: dict) -> None:
        write_atomic(self.root / "results" / f"{job_id}.py", module_source)
        write_atomic(self.root / "results" / f"{job_id}.json", json.dumps(report, indent=1))

    def solution(self, job_id: str) -> Optional[str]:
        try:
            return (self.root / "results" / f"{job_id}.py").read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def report(self, job_id: str) -> Optional[dict]:
        try:
            return json.loads((self.root / "results" / f"{job_id}.json").read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None


def summary(report: dict) -> dict:
    """The job's `result`: what the page shows of the search's report."""
    return {
        "kept_original": report["kept_original"],
        "reason": report["reason"],
        "speedup_vs_eager": report["speedup_vs_eager"],
        "speedup_vs_compile": report["speedup_vs_compile"],
        "policy": (report["end_to_end"] or {}).get("policy"),
        "from_cache": report["from_cache"],
    }


def final_progress(progress: dict, report: dict) -> dict:
    """The progress object once the job succeeded: the answer's own numbers."""
    progress["stage"], progress["verified"] = "done", report["verified"]
    progress["best_speedup_vs_compile"] = report["speedup_vs_compile"]
    if report["speedup_vs_eager"] is not None:
        progress["best_speedup_vs_eager"] = report["speedup_vs_eager"]
    return progress


PUBLIC = ("id", "state", "progress", "result", "error", "created_at", "updated_at")


def public(job: dict) -> dict:
    """What GET /v1/conversions/{id} shows: no source, no client, no internals."""
    return {k: job[k] for k in PUBLIC}


class ProgressTracker:
    """The search's progress events folded into the job's `progress` object, with a history of the best fragment
    speedup over time (seconds since the job was created)."""

    def __init__(self, created_at: float, progress: Optional[dict] = None):
        self.created_at = created_at
        self.state = progress or empty_progress()

    def fold(self, p) -> dict:
        s = self.state
        s["stage"], s["detail"] = p.stage, p.detail
        if p.verified is not None:
            s["verified"] = p.verified
        if p.candidates is not None:
            s["candidates"] = dict(p.candidates)
        if p.fragments_total is not None:
            s["fragments_done"], s["fragments_total"] = p.fragments_done or 0, p.fragments_total
        if p.best_speedup_vs_eager is not None:
            s["best_speedup_vs_eager"] = p.best_speedup_vs_eager
        history = s["history"]
        point = {"t": round(time.time() - self.created_at, 3), "best_speedup_vs_eager": s["best_speedup_vs_eager"]}
        if not history or history[-1]["best_speedup_vs_eager"] != point["best_speedup_vs_eager"] or p.stage == "done":
            history.append(point)
            del history[:-HISTORY_MAX]
        return s
