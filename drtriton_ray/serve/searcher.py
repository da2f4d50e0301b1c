"""The Search deployment: one conversion per call (`convert_with`: check the request, `search`)
with the Verifier deployment as its verifier and the Policy deployment as its model. The job's file is the only
state: the call takes a job id, reads the source and options there, writes progress, the answer, its report and
the final state back, and appends verified winners to the flywheel dataset.

`search` is synchronous and blocks on verifier handles (`.result()`), so it runs in a worker thread, never on the
replica's event loop. The user's program stays text here: capture and verification run in the Verifier replicas'
sandboxed workers. With a `model` configured, the model and refine sources ask the Policy deployment
(drtriton_ray/serve/policy.py), which holds the engine."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from ray import serve

from drtriton_ray.serve import flywheel
from drtriton_ray.serve.config import ServeSettings, conversion_settings
from drtriton_ray.serve.jobs import ACTIVE, JobStore, ProgressTracker, final_progress, summary
from drtriton_ray.serve.policy import RemotePolicy
from drtriton_ray.serve.verifier import RemoteVerifier, VerifierUnavailable

log = logging.getLogger("ray.serve")
BEAT_S = 2.0  # how often a running job's heartbeat file is touched
WRITE_EVERY_S = 0.5  # progress is written at most this often (stage changes always)


class Cancelled(Exception):
    """DELETE marked the job: the search stops at its next progress event."""


@serve.deployment(max_ongoing_requests=2, ray_actor_options={"num_cpus": 0})
class Search:
    def __init__(self, verifier, settings: dict, policy=None):
        self.settings = ServeSettings(**settings)
        self.store = JobStore(self.settings.state_dir)
        self.handle, self.policy = verifier, policy
        self.known_machine = None if self.settings.device == "cuda" else "cpu-interpreter"
        self.running: set[str] = set()
        threading.Thread(target=self.beat_forever, daemon=True, name="job-heartbeat").start()

    def beat_forever(self) -> None:
        """While this replica runs a job, its heartbeat stays fresh: the Api re-sends only jobs nobody runs."""
        while True:
            for job_id in list(self.running):
                self.store.beat(job_id)
            time.sleep(BEAT_S)

    async def run(self, job_id: str) -> str:
        """Run the job to its end; returns its final state."""
        return await asyncio.to_thread(self.run_job, job_id)

    def run_job(self, job_id: str) -> str:
        job = self.store.load(job_id)
        if job is None or job["state"] not in ACTIVE or job_id in self.running:
            return job["state"] if job else "missing"
        if job["attempts"] >= self.settings.max_attempts:
            error = f"the search was started {job['attempts']} times and never finished (its replica died)"
            self.store.update(job_id, state="failed", error=error)
            return "failed"
        self.running.add(job_id)
        try:
            job = self.store.update(job_id, state="running", attempts=job["attempts"] + 1)
            return self.convert(job)
        finally:
            self.running.discard(job_id)

    def machine(self, verifier: RemoteVerifier) -> str:
        """The cache's machine key: the Verifier replicas' GPU model (this replica may have no GPU), asked once."""
        if self.known_machine is None:
            self.known_machine = verifier.machine()
            self.store.set_machine(self.known_machine)
        return self.known_machine

    def convert(self, job: dict) -> str:
        """The conversion (check the request, search) with the service's verifier and policy handles."""
        from drtriton_ray.capture.errors import CaptureError
        from drtriton_ray.models.load import ModelError
        from drtriton_ray.search.convert import ConversionError, convert_with

        job_id = job["id"]
        watch = Watch(self.store, job)
        # one adapter per job: its count of calls sent again is this job's (kept in the job file, not shown)
        verifier = watch.verifier = RemoteVerifier(self.handle, retries=self.settings.verifier_retries)
        policy = RemotePolicy(self.policy, self.settings.verifier_retries) if self.policy is not None else None
        try:
            settings = conversion_settings(job["options"], self.settings, self.machine(verifier))
            result = convert_with(job["source"], settings, verifier, watch.progress, policy)
        except Cancelled:
            return "cancelled"
        except (ConversionError, CaptureError, VerifierUnavailable, ModelError) as e:
            return self.fail(job_id, watch, str(e))
        except Exception as e:  # a bug of ours must fail the job, not the replica: the next request still runs
            log.exception("conversion %s failed", job_id)
            return self.fail(job_id, watch, f"internal error: {type(e).__name__}: {e}")
        return self.succeed(job, watch, result)

    def fail(self, job_id: str, watch: "Watch", error: str) -> str:
        if self.store.cancelled(job_id):
            return "cancelled"
        resent = watch.verifier.resent
        self.store.update(job_id, state="failed", error=error, progress=watch.tracker.state, verifier_resent=resent)
        return "failed"

    def succeed(self, job: dict, watch: "Watch", result) -> str:
        job_id, report = job["id"], result.to_dict()["report"]
        self.store.put_result(job_id, result.module_source, report)
        rows = flywheel.fragment_rows(job_id, watch.records, report["device"])
        if not report["kept_original"] and not report["from_cache"]:  # a repeat adds nothing new
            rows.append(flywheel.module_row(job_id, job["source"], result.module_source, report))
        try:
            flywheel.append(self.settings.dataset_dir, job_id, rows)
        except OSError as e:  # a full or read-only dataset folder must not cost the user the answer
            log.warning("flywheel: cannot write %s: %s", self.settings.dataset_dir, e)
        progress = final_progress(watch.tracker.state, report)
        resent = watch.verifier.resent
        self.store.update(
            job_id, state="succeeded", result=summary(report), progress=progress, error=None, verifier_resent=resent
        )
        return "succeeded"


class Watch:
    """The search's progress callback for one job: stops it when cancelled, folds events into the job's progress
    and writes them (throttled), and keeps the final event's verified winners for the flywheel."""

    def __init__(self, store: JobStore, job: dict):
        self.store, self.job_id = store, job["id"]
        self.tracker = ProgressTracker(job["created_at"], job["progress"])
        self.records: list[dict] = []
        self.verifier = None
        self.written, self.stage = 0.0, None

    def progress(self, p) -> None:
        if self.store.cancelled(self.job_id):
            raise Cancelled()
        state = self.tracker.fold(p)
        if p.records:
            self.records = p.records
        now = time.monotonic()
        if p.stage != self.stage or now - self.written >= WRITE_EVERY_S:
            self.stage, self.written = p.stage, now
            self.store.update(self.job_id, progress=state)
