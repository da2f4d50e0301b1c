"""The Api deployment: FastAPI ingress for submit-then-poll conversions (docs/serve.md), the page and its files.

The Api only reads and writes job files and hands job ids to the Search deployment: the user's program is
checked statically (`check_problem`, an AST walk) and never imported here. Every bad input gets a 4xx with a one-line
`{"detail": ...}`; a full queue or a client over its share gets 429 with `Retry-After`."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from pydantic import ValidationError
from ray import serve

from drtriton_ray.serve.config import ServeSettings, SubmitRequest, conversion_settings, limit_problems
from drtriton_ray.serve.jobs import ACTIVE, JobStore, final_progress, public, summary
from drtriton_ray.serve.verifier import retryable

log = logging.getLogger("ray.serve")
STATIC = Path(__file__).resolve().parent / "static"
BEAT_S = 5.0  # a driver's heartbeat while it waits for the Search

SAMPLE = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A residual feed-forward block: LayerNorm, Linear, GELU, Linear, and the residual add."""

    def __init__(self, hidden=64, inner=128):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, inner)
        self.down = nn.Linear(inner, hidden)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return [64, 128]
'''

app = FastAPI(
    title="drtriton-ray conversion service",
    description="PyTorch programs (KernelBench format) in, verified Triton modules out, by test-time search.",
    version="1",
)


def validation_detail(e: ValidationError) -> str:
    """pydantic's complaints as one line, each named by its field."""
    parts = []
    for x in e.errors():
        where = ".".join(str(p) for p in x["loc"]) or "body"
        parts.append(f"{where}: {x['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def parse_submit(body: bytes, settings: ServeSettings) -> SubmitRequest:
    """The request, or an HTTPException saying what is wrong with it."""
    from drtriton_ray.verify.static import SourceError, check_problem

    if len(body) > 2 * settings.max_source_bytes + 4096:  # JSON escaping at most doubles the text, roughly
        raise HTTPException(
            413, f"the request is {len(body)} bytes; sources are limited to {settings.max_source_bytes}"
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HTTPException(400, f"the body is not UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise HTTPException(400, f"the body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    try:
        req = SubmitRequest.model_validate(data)
    except ValidationError as e:
        raise HTTPException(422, validation_detail(e)) from None
    if not req.source.strip():
        raise HTTPException(422, "source is empty: send a PyTorch program in KernelBench format")
    size = len(req.source.encode("utf-8"))
    if size > settings.max_source_bytes:
        raise HTTPException(413, f"source is {size} bytes; the limit is {settings.max_source_bytes}")
    problems = limit_problems(req.options, settings)
    if problems:
        raise HTTPException(422, "; ".join(problems))
    try:
        check_problem(req.source)
    except SourceError as e:
        raise HTTPException(422, str(e)) from None
    return req


def submit_schema() -> dict:
    """The request body's JSON schema with its parts inlined: the handler reads the raw body itself (to answer
    non-UTF-8 and malformed JSON clearly), so FastAPI cannot derive it for /docs."""
    schema = SubmitRequest.model_json_schema()
    defs = schema.pop("$defs", {})
    schema["properties"]["options"] = defs["ConversionOptions"]
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


SUBMIT_BODY = submit_schema()


@serve.deployment(max_ongoing_requests=200, ray_actor_options={"num_cpus": 0})
@serve.ingress(app)
class Api:
    def __init__(self, search, settings: dict):
        self.search = search
        self.settings = ServeSettings(**settings)
        self.store = JobStore(self.settings.state_dir)
        self.driving: dict[str, asyncio.Task] = {}  # job id -> the task that waits for its Search call
        self.watchdog = None
        from drtriton_ray.verify.static import check_problem  # noqa: F401  (imported now, not by the first request)

    async def check_health(self) -> None:
        """Serve calls this every few seconds: a restarted replica starts its watchdog without waiting for traffic."""
        self.ensure_watchdog()

    def ensure_watchdog(self) -> None:
        """Started from the first request or health check: the replica's event loop runs by then."""
        if self.watchdog is None or self.watchdog.done():
            self.watchdog = asyncio.get_running_loop().create_task(self.watch())

    async def watch(self) -> None:
        """Jobs nobody drives or runs (their Api or Search replica died, or the service restarted) go to a Search
        again once their heartbeat is older than `stale_s`."""
        while True:
            now = time.time()
            for job_id in self.store.active():
                if job_id not in self.driving and now - self.store.last_beat(job_id) > self.settings.stale_s:
                    log.warning("job %s: no heartbeat for %.0f s, sending it again", job_id, self.settings.stale_s)
                    self.drive(job_id)
            await asyncio.sleep(min(10.0, self.settings.stale_s / 3))

    def drive(self, job_id: str) -> None:
        self.store.beat(job_id)
        self.driving[job_id] = asyncio.get_running_loop().create_task(self.run(job_id))

    async def run(self, job_id: str) -> None:
        """Hand the job to a Search replica and wait; a replica that dies with it is replaced and the job sent again
        (the Search counts attempts and fails the job past `max_attempts`)."""
        beat = asyncio.get_running_loop().create_task(self.beat(job_id))
        try:
            for _ in range(self.settings.max_attempts + 1):
                try:
                    await self.search.run.remote(job_id)
                    return
                except retryable() as e:
                    log.warning("job %s: its Search replica died (%s); sending it again", job_id, type(e).__name__)
                    await asyncio.sleep(1.0)
                except Exception as e:  # the Search call itself failed: the job ends, the service goes on
                    log.exception("job %s: the Search call failed", job_id)
                    self.store.update(job_id, state="failed", error=f"internal error: {type(e).__name__}: {e}")
                    return
        finally:
            beat.cancel()
            self.driving.pop(job_id, None)

    async def beat(self, job_id: str) -> None:
        while True:
            self.store.beat(job_id)
            await asyncio.sleep(BEAT_S)

    def job_or_404(self, job_id: str) -> dict:
        job = self.store.load(job_id)
        if job is None:
            raise HTTPException(404, f"no conversion with id {job_id!r}")
        return job

    @app.post("/v1/conversions", status_code=202, openapi_extra=SUBMIT_BODY)
    async def submit(self, request: Request) -> JSONResponse:
        """Submit a program (JSON: `source`, optional `options`): 202 with the job's id and status URL."""
        self.ensure_watchdog()
        req = parse_submit(await request.body(), self.settings)
        client = request.headers.get("x-client") or (request.client.host if request.client else "unknown")
        options = req.options.model_dump(exclude_none=True)
        job = self.answer_from_cache(req.source, options, client)
        if job is None:  # a repeat costs no capacity: only searches are limited
            self.check_capacity(client)
            job = self.store.create(req.source, options, client)
            self.drive(job["id"])
        # the 202's state is always "queued" (the contract); a repeat is "succeeded" at its first poll
        body = {"id": job["id"], "state": "queued", "status_url": f"/v1/conversions/{job['id']}"}
        return JSONResponse(body, status_code=202)

    def answer_from_cache(self, source: str, options: dict, client: str):
        """A program searched before with these settings on this machine is answered here, at once, from the
        search's cache (a JSON read: nothing runs); None when the cache does not hold it."""
        from drtriton_ray.search.search import cached_result

        machine = "cpu-interpreter" if self.settings.device == "cpu" else self.store.machine()
        if machine is None or not self.settings.cache_dir:  # no search has learnt the GPU model yet
            return None
        result = cached_result(source, conversion_settings(options, self.settings, machine))
        if result is None:
            return None
        job = self.store.create(source, options, client)
        report = result.to_dict()["report"]
        self.store.put_result(job["id"], result.module_source, report)
        progress = final_progress(job["progress"], report)
        progress["detail"], progress["history"] = "from the cache", [{"t": 0.0, "best_speedup_vs_eager": None}]
        return self.store.update(job["id"], state="succeeded", result=summary(report), progress=progress)

    def check_capacity(self, client: str) -> None:
        active = self.store.active()
        retry = {"Retry-After": str(self.settings.retry_after_s)}
        if len(active) >= self.settings.queue_size:
            detail = f"the service is full ({len(active)} conversions queued or running): try again later"
            raise HTTPException(429, detail, headers=retry)
        mine = sum(c == client for c in active.values())
        if mine >= self.settings.per_client:
            detail = f"client {client!r} has {mine} conversions queued or running (limit {self.settings.per_client})"
            raise HTTPException(429, detail, headers=retry)

    @app.get("/v1/conversions/{job_id}")
    async def status(self, job_id: str) -> dict:
        """The job's state, progress and, once it has succeeded, a summary of the result."""
        self.ensure_watchdog()
        return public(self.job_or_404(job_id))

    @app.get("/v1/conversions/{job_id}/solution.py", response_class=PlainTextResponse)
    async def solution(self, job_id: str) -> PlainTextResponse:
        """The answer (class ModelNew, or the original program where nothing better was verified)."""
        job = self.job_or_404(job_id)
        text = self.store.solution(job_id) if job["state"] == "succeeded" else None
        if text is None:
            raise HTTPException(404, f"conversion {job_id} is {job['state']}: no solution")
        return PlainTextResponse(text, media_type="text/x-python")

    @app.get("/v1/conversions/{job_id}/report")
    async def report(self, job_id: str) -> dict:
        """The search's full JSON report (docs/convert.md)."""
        job = self.job_or_404(job_id)
        report = self.store.report(job_id) if job["state"] == "succeeded" else None
        if report is None:
            raise HTTPException(404, f"conversion {job_id} is {job['state']}: no report")
        return report

    @app.delete("/v1/conversions/{job_id}")
    async def cancel(self, job_id: str) -> dict:
        """Cancel a queued or running conversion (the search stops at its next progress event)."""
        job = self.job_or_404(job_id)
        if job["state"] in ACTIVE:
            self.store.cancel(job_id)
        elif job["state"] != "cancelled":
            raise HTTPException(409, f"conversion {job_id} has already {job['state']}")
        return public(self.job_or_404(job_id))

    @app.get("/healthz")
    async def healthz(self) -> dict:
        self.ensure_watchdog()
        return {"status": "ok", "device": self.settings.device, "active": len(self.store.active())}

    @app.get("/v1/sample", response_class=PlainTextResponse)
    async def sample(self) -> PlainTextResponse:
        """A sample program in KernelBench format, to try the service with."""
        return PlainTextResponse(SAMPLE, media_type="text/x-python")

    @app.get("/", include_in_schema=False)
    async def page(self) -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/static/{path:path}", include_in_schema=False)
    async def static(self, path: str) -> FileResponse:
        target = (STATIC / path).resolve()
        if not target.is_file() or not target.is_relative_to(STATIC):  # no escaping the folder with ../
            raise HTTPException(404, f"no file {path!r}")
        return FileResponse(target)
