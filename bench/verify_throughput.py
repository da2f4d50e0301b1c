"""Verifier throughput and timing stability.

The same N candidates are verified three ways in one run: a fresh process per candidate, one at a time (what a
harness without a pool pays, KernelBench's mp.Pool(1) per evaluation: import torch and triton, initialise the
device, compile every kernel anew), a persistent pool of one worker, and a persistent pool of W workers sharing
the GPU (they compile and check concurrently and take turns to time); `--modes gpus` adds one such pool per GPU
(what one Verifier actor per GPU holds), the candidates dealt out among them. It prints candidates/s for each, the
ratios, where the seconds go (worker start-up, the reference job, each phase of a task), and on a GPU the share
of wall time the GPU spends running kernels: NVML's utilisation counter (the share of each sample period in which
a kernel ran), sampled every 50 ms in this process for the whole mode; `--profile` adds the torch profiler's
kernel time per task (it costs seconds per task, so it is off by default).

Each mode starts with an empty reference-time cache, so each pays for one reference measurement (eager and
torch.compile) per problem. Timing stability: one candidate verified `--repeats` times in a one-worker pool
(the spread of its median: (max - min) / median), the spread of each candidate variant's median across the
W-worker run (timed while other workers check), and the reference's eager/compile times across the modes.

    python bench/verify_throughput.py                      # CPU: Triton interpreter, 8 candidates
    python bench/verify_throughput.py --device cuda -n 32  # GPU: adds timing, spreads and the busy share
    python bench/verify_throughput.py --device cuda -n 128 --problems 4 --distinct --modes poolW,gpus   # 1 vs all GPUs
    python bench/verify_throughput.py --device cuda --timing-study   # timing methods compared, in-process

Self-contained (problem and candidates below): needs only torch, triton, numpy, pyarrow, rich — the GPU machine has
no Ray, pydantic or OR-Tools. Candidates differ in BLOCK, so each one's kernel is compiled anew.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from dataclasses import replace

from rich.console import Console
from rich.table import Table

from drtriton_ray.verify import Limits, Task, WorkerPool

PROBLEM = """import torch
import torch.nn as nn

SHAPE = {shape}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return torch.relu(x * y + x{extra})


def get_inputs():
    return [torch.randn(SHAPE), torch.randn(SHAPE)]


def get_init_inputs():
    return []
"""

CANDIDATE = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fused_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):{tag}
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x * y + x{extra}, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        fused_kernel[(triton.cdiv(n, {block}),)](x, y, out, n, BLOCK={block})
        return out
"""


def make_tasks(n: int, device: str, profile: bool, problems: int = 1, distinct: bool = False) -> list[Task]:
    """n candidates over `problems` problems (problem p adds p to x*y+x, so each has its own reference). Without
    `distinct` there are at most 4 variants a problem, and a pool verifies identical tasks once; with it, every
    kernel carries its own comment, so each candidate is a new kernel to compile and verify (as model answers are)."""
    gpu = device.startswith("cuda")
    shape = "(4096, 4096)" if gpu else "(61, 257)"
    blocks = [256, 512, 1024, 2048] if gpu else [4096, 8192, 16384, 32768]
    tasks = []
    for i in range(n):
        p = i % problems
        extra = f" + {p}.0" if p else ""
        tasks.append(
            Task(
                PROBLEM.format(shape=shape, extra=extra),
                CANDIDATE.format(
                    block=blocks[(i // problems) % len(blocks)],
                    extra=extra,
                    tag=f"  # candidate {i}" if distinct else "",
                ),
                name=f"c{i}-p{p}-b{blocks[(i // problems) % len(blocks)]}",
                profile_gpu=gpu and profile,
            )
        )
    return tasks


class BusySampler:
    """Mean of NVML's GPU utilisation (share of time a kernel ran) over the block, sampled every 50 ms, averaged
    over the first `gpus` GPUs."""

    def __init__(self, enabled: bool, gpus: int = 1):
        self.samples: list[float] = []
        self.handles = []
        if enabled:
            try:
                import pynvml

                pynvml.nvmlInit()
                self.nvml = pynvml
                self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(gpus)]
            except Exception:  # no NVML: no busy share
                self.handles = []

    def __enter__(self):
        self.stop = threading.Event()
        if self.handles:
            self.thread = threading.Thread(target=self._loop, daemon=True)
            self.thread.start()
        return self

    def _loop(self):
        while not self.stop.wait(0.05):
            try:
                rates = [self.nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self.handles]
                self.samples.append(sum(rates) / len(rates))
            except Exception:
                return

    def __exit__(self, *exc):
        self.stop.set()
        if self.handles:
            self.thread.join(1)

    @property
    def share(self):
        return sum(self.samples) / len(self.samples) / 100 if self.samples else None


def pinned_pool(device: str, workers: int, fresh: bool, gpu: int | None, launchers: str) -> WorkerPool:
    """A pool of `workers`; with `gpu`, its workers see that GPU alone (they inherit CUDA_VISIBLE_DEVICES when they
    are spawned, as a Ray actor's GPU is pinned), as one Verifier actor per GPU holds its pool, with `launchers` as
    its launcher store."""
    name = "fresh" if fresh else f"pool{workers}" if gpu is None else f"gpu{gpu}"
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    try:
        return WorkerPool(
            device,
            size=workers,
            max_tasks_per_worker=1 if fresh else 1 << 30,
            limits=Limits(task_timeout_s=600),
            name=name,
            launcher_store=launchers,
        )
    finally:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        if before is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


def run(
    tasks: list[Task],
    device: str,
    workers: int,
    fresh: bool,
    gpus: int | None = None,
    warm: list[Task] = (),
    launchers: str | None = None,
) -> dict:
    """Wall time from pool creation (worker start-up included) to the last verdict; serving_s from the moment every
    worker is ready. `gpus`: a pool a GPU, the candidates dealt out in turn, every pool verifying its share at once.
    `warm`: tasks every pool verifies first, unmeasured (its logs reset after them): serving_s, the GPU's busy share
    and the logs then cover `tasks` alone, as a long-lived pool would serve them. `launchers`: the pools' launcher
    store; None: an empty one for each pool, as on a host that never ran a pool (the host's shared store would carry
    one measured pool's launchers into the next)."""
    busy = BusySampler(device.startswith("cuda"), gpus or 1)
    with contextlib.ExitStack() as stack:
        if not warm:
            stack.enter_context(busy)
        t0 = time.perf_counter()
        pools = [
            pinned_pool(device, workers, fresh, g, launchers or stack.enter_context(tempfile.TemporaryDirectory()))
            for g in (range(gpus) if gpus else [None])
        ]
        try:
            if not fresh:
                for pool in pools:
                    pool.wait_ready()
            if warm:
                deal(pools, warm)
                for pool in pools:
                    pool.reset_stats()
                stack.enter_context(busy)
            ready = time.perf_counter()
            shares = deal(pools, tasks)
        finally:
            wall = time.perf_counter() - t0
            stores = [p.launchers.summary() for p in pools if p.launchers is not None]
            store_stats = {
                "reported": sum(st["reported"] for st in stores),
                "built": sum(st["built"] for st in stores),
                "errors": [e for st in stores for e in st["errors"]][:3],
            }
            for pool in pools:
                pool.close()
    return {
        "wall": wall,
        "serving_s": wall - (ready - t0),
        "verdicts": [v for share in shares for v in share],
        "startup": [s for p in pools for s in p.startup_log],
        "reference": [r for p in pools for r in p.reference_log],
        "busy": busy.share,
        "section": {k: sum(p.section_seconds[k] for p in pools) for k in pools[0].section_seconds},
        "job_s": sum(p.job_seconds for p in pools),
        "loop": {k: sum(p.loop_seconds[k] for p in pools) for k in pools[0].loop_seconds},
        "holds": {k: [h for p in pools for h in p.section_holds[k]] for k in pools[0].section_holds},
        "by_label": merge_labels(p.section_by_label for p in pools),
        "jobs": [j for p in pools for j in p.job_log],
        "worker_s": sum(p.size * (wall - (ready - t0)) for p in pools),
        "launchers": store_stats,  # the pools' launcher stores (verify/launchers.py)
    }


def deal(pools: list[WorkerPool], tasks: list[Task]) -> list[list]:
    """The tasks dealt out in turn to the pools, all verifying their shares at once: each pool's verdicts."""
    with ThreadPoolExecutor(len(pools)) as ex:
        return list(ex.map(lambda k: pools[k].map(tasks[k :: len(pools)]), range(len(pools))))


def merge_labels(tables) -> dict:
    out: dict = {}
    for table in tables:
        for label, (n, seconds, longest) in table.items():
            row = out.setdefault(label, [0, 0.0, 0.0])
            row[0], row[1], row[2] = row[0] + n, row[1] + seconds, max(row[2], longest)
    return out


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) if values else float("nan")


def section_share(seconds: dict) -> dict:
    """The GPU section's occupancy (pool.SectionArbiter.seconds) as shares of the time it was clocked."""
    total = sum(seconds.values()) or 1.0
    return {k: v / total for k, v in seconds.items()}


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def report_modes(console: Console, results: dict, n: int) -> dict:
    table = Table(title=f"{n} candidates: throughput")
    for col in (
        "mode",
        "wall s",
        "candidates/s",
        "serving candidates/s",
        "correct",
        "GPU busy (NVML)",
        "kernel share (profiler)",
        "workers started",
        "start-up s (mean)",
        "reference jobs s",
        "GPU section: exclusive / draining / shared / idle",
        "workers busy",
        "jobs' own share",
    ):
        table.add_column(col)
    summary = {}
    for mode, r in results.items():
        vs, wall = r["verdicts"], r["wall"]
        kernel_ms = [v.gpu_kernel_ms for v in vs if v.gpu_kernel_ms is not None]
        share = sum(kernel_ms) / 1e3 / wall if kernel_ms else None
        ref_s = sum(x["phases"].get("total", 0.0) for x in r["reference"])
        summary[mode] = {
            "wall_s": wall,
            "rate": len(vs) / wall,
            "serving_rate": len(vs) / r["serving_s"],  # from the moment every worker is ready
            "correct": sum(v.correct for v in vs),
            "gpu_busy_nvml": r["busy"],
            "kernel_share_profiler": share,
            "workers_started": len(r["startup"]),
            "startup_s": mean(s["spawn_to_ready"] for s in r["startup"]),
            "reference_s": ref_s,
            "section_share": section_share(r["section"]),
            # jobs in flight over the workers' serving seconds; the workers' own task and reference seconds over the
            # jobs' (the rest: dispatch, the parent's static checks of the task, the answer's trip back)
            "workers_busy": r["job_s"] / r["worker_s"] if r.get("worker_s") else None,
            "jobs_own_share": (sum(v.duration_s for v in vs) + ref_s) / r["job_s"] if r.get("job_s") else None,
        }
        s = summary[mode]
        table.add_row(
            mode,
            f"{wall:.1f}",
            f"{s['rate']:.3f}",
            f"{s['serving_rate']:.3f}",
            f"{s['correct']}/{len(vs)}",
            "n/a" if r["busy"] is None else f"{r['busy']:.1%}",
            "n/a" if share is None else f"{share:.1%}",
            str(s["workers_started"]),
            f"{s['startup_s']:.1f}",
            f"{ref_s:.1f}",
            " / ".join(f"{v:.0%}" for v in s["section_share"].values()),
            "n/a" if s["workers_busy"] is None else f"{s['workers_busy']:.0%}",
            "n/a" if s["jobs_own_share"] is None else f"{s['jobs_own_share']:.0%}",
        )
    console.print(table)
    console.print(job_table(results, summary))
    console.print(hold_table(results, summary))
    # where the seconds go: worker start-up parts and the task phases, per candidate, averaged (a row each)
    phases = sorted({k for r in results.values() for v in r["verdicts"] for k in v.phases})
    starts = sorted({k for r in results.values() for s in r["startup"] for k in s})
    t2 = Table(title="seconds per candidate (mean): worker start-up parts, task phases; reference jobs' phases")
    t2.add_column("part")
    for mode in results:
        t2.add_column(mode, justify="right")
    for k in starts:
        t2.add_row(f"start:{k}", *(f"{mean(s.get(k, 0.0) for s in r['startup']):.2f}" for r in results.values()))
    for k in phases:
        t2.add_row(k, *(f"{mean(v.phases.get(k, 0.0) for v in r['verdicts']):.3f}" for r in results.values()))
    t2.add_row("task total", *(f"{mean(v.duration_s for v in r['verdicts']):.3f}" for r in results.values()))
    refs = sorted({k for r in results.values() for x in r["reference"] for k in x["phases"]})
    for k in refs:  # a reference job's phases, per reference job (its "total" is the job's own clock)
        t2.add_row(
            f"reference job: {k}",
            *(f"{mean(x['phases'].get(k, 0.0) for x in r['reference']):.3f}" for r in results.values()),
        )
    for mode, r in results.items():
        vs = r["verdicts"]
        summary[mode]["phases"] = {k: mean(v.phases.get(k, 0.0) for v in vs) for k in phases}
        summary[mode]["startup_parts"] = {k: mean(s.get(k, 0.0) for s in r["startup"]) for k in starts}
    console.print(t2)
    return summary


def hold_table(results: dict, summary: dict) -> Table:
    """The GPU section's holds as the parent saw them (grant to release, ms): how many, how long; then the phases
    that held it longest in all (a long shared hold keeps every worker that waits to time waiting)."""
    table = Table(title="GPU section holds, grant to release (ms)")
    for col in ("mode", "kind / phase", "holds", "per candidate", "mean", "median", "p90", "max", "total s"):
        table.add_column(col, justify="right")
    for mode, r in results.items():
        n = max(1, len(r["verdicts"]))
        for kind, holds in (r.get("holds") or {}).items():
            if not holds:
                continue
            ms = sorted(1e3 * h for h in holds)
            row = {
                "holds": len(ms),
                "mean": statistics.mean(ms),
                "median": ms[len(ms) // 2],
                "p90": ms[int(0.9 * (len(ms) - 1))],
                "max": ms[-1],
                "total_s": sum(ms) / 1e3,
            }
            summary[mode].setdefault("holds", {})[kind] = row
            cells = [f"{row[k]:.2f}" for k in ("mean", "median", "p90", "max", "total_s")]
            table.add_row(mode, kind, str(len(ms)), f"{len(ms) / n:.1f}", *cells)
        top = sorted((r.get("by_label") or {}).items(), key=lambda kv: -kv[1][1])[:8]
        summary[mode]["holds_by_label"] = {k: {"holds": c, "s": t, "max_ms": 1e3 * m} for k, (c, t, m) in top}
        for label, (count, seconds, longest) in top:
            cells = [f"{1e3 * seconds / count:.2f}", "", "", f"{1e3 * longest:.2f}", f"{seconds:.2f}"]
            table.add_row(mode, label, str(count), f"{count / n:.1f}", *cells)
    return table


def job_table(results: dict, summary: dict) -> Table:
    """A candidate's job, from the parent's send to its receipt of the answer, in parts (mean seconds): the worker's
    own work, its waits for the GPU section (held back by the arbiter; the rest, messages and the parent's loop),
    after the task (memory handed back, device check), and the remainder (dispatch, the answer's trip, the parent
    busy elsewhere); reference jobs (how many, their mean seconds and remainder); the share of the parent loop's
    time at work and in the static gate."""
    table = Table(title="a candidate's job seconds (mean), reference jobs, and the parent's loop")
    columns = ("mode", "job", "own work", "section: queued", "section: messages", "after task", "rest")
    for col in columns + ("reference jobs: n / s / rest", "loop busy", "loop static"):
        table.add_column(col, justify="right")
    for mode, r in results.items():
        vs, loop, jobs = r["verdicts"], r.get("loop") or {}, r.get("jobs") or []
        refs = [j for j in jobs if j["kind"] == "reference"]
        job = mean(j["seconds"] for j in jobs if j["kind"] == "task")
        wait = mean(v.phases.get("gate_wait", 0.0) for v in vs)
        queued = mean(v.phases.get("gate_queued", 0.0) for v in vs)
        after = mean(v.phases.get("after_task", 0.0) for v in vs)
        own = mean(v.duration_s for v in vs) - wait
        busy = (loop.get("map", 0.0) - loop.get("waiting", 0.0)) / loop["map"] if loop.get("map") else None
        static = loop.get("static", 0.0) / loop["map"] if loop.get("map") else None
        parts = {
            "job": job,
            "own": own,
            "queued": queued,
            "messages": wait - queued,
            "after": after,
            "rest": job - own - wait - after,
            "reference_jobs": len(refs),
            "reference_s": mean(j["seconds"] for j in refs),
            "reference_rest": mean(j["seconds"] - j["own"] for j in refs),
            "loop_busy": busy,
            "loop_static": static,
        }
        summary[mode]["job_parts"] = parts
        cells = [f"{parts[k]:.3f}" for k in ("job", "own", "queued", "messages", "after", "rest")]
        cells.append(f"{len(refs)} / {parts['reference_s']:.2f} / {parts['reference_rest']:.2f}")
        cells += ["n/a" if x is None else f"{x:.0%}" for x in (busy, static)]
        table.add_row(mode, *cells)
    return table


def timing_report(console: Console, results: dict, repeats: list[float], workers_mode: str) -> dict:
    out = {}
    if repeats:
        out["repeat_ms"] = repeats
        out["repeat_spread"] = spread(repeats)
        console.print(
            f"one candidate verified {len(repeats)} times (one-worker pool), median ms: "
            f"{', '.join(f'{m:.4f}' for m in repeats)}; spread (max - min) / median = "
            f"{out['repeat_spread']:.2%}"
        )
    groups = defaultdict(list)
    for v in results[workers_mode]["verdicts"]:
        if v.candidate_ms is not None:
            groups[v.name.split("-", 1)[1]].append(v.candidate_ms)
    if groups:
        table = Table(title=f"candidate medians across the {workers_mode} run (timed while other workers check)")
        for col in ("variant", "n", "median ms", "spread"):
            table.add_column(col)
        for name, ms in sorted(groups.items()):
            table.add_row(name, str(len(ms)), f"{statistics.median(ms):.4f}", f"{spread(ms):.2%}")
        console.print(table)
        out["variants"] = {k: {"ms": v, "spread": spread(v)} for k, v in groups.items()}
    refs = defaultdict(lambda: defaultdict(list))
    for mode, r in results.items():
        for x in r["reference"]:
            if x.get("eager_ms") is not None:
                refs[x["key"][0][:8]]["eager_ms"].append(x["eager_ms"])
                refs[x["key"][0][:8]]["compile_ms"].append(x["compile_ms"])
    for problem, d in refs.items():
        console.print(
            f"reference {problem}: eager ms {', '.join(f'{m:.4f}' for m in d['eager_ms'])} "
            f"(spread {spread(d['eager_ms']):.2%}); torch.compile ms "
            f"{', '.join(f'{m:.4f}' for m in d['compile_ms'])} (spread {spread(d['compile_ms']):.2%}) "
            f"[one measurement per mode, each in its own pool]"
        )
        out.setdefault("reference", {})[problem] = {k: list(v) for k, v in d.items()}
    return out


# -- timing study: the methods timing.measure offers, compared in this process on a few kernels --


def candidate_module(block: int):
    """The bench's candidate imported into this process, from a file (Triton reads kernel source through inspect).
    Only the parent imports it: spawned verifier workers re-import this module before they set TRITON_INTERPRET."""
    import importlib.util
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="verify-throughput-")) / "bench_candidate.py"
    path.write_text(CANDIDATE.format(block=block, extra="", tag=""))
    spec = importlib.util.spec_from_file_location("bench_candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timing_study(console: Console, repeats: int, idle_s: float, trials: int) -> dict:
    import torch
    from drtriton_ray.verify import timing

    triton_fused = candidate_module(block=1024).ModelNew()

    def eager(x, y):
        return torch.relu(x * y + x)

    def inputs(*shape):
        base = [torch.randn(*shape, device="cuda"), torch.randn(*shape, device="cuda")]
        return lambda: [b * (1 + 0.01 * torch.randn_like(b)) for b in base]

    kernels = [
        ("Triton fused, 4096x4096 (the bench's candidate)", triton_fused, inputs(4096, 4096)),
        ("eager relu(x*y+x), 4096x4096 (its reference)", eager, inputs(4096, 4096)),
        ("Triton fused, 1024x1024 (L2-resident, ~10 us)", triton_fused, inputs(1024, 1024)),
        ("torch.mm 2048x2048", lambda a, b: a @ b, inputs(2048, 2048)),
    ]
    methods = [
        ("1 call/trial, 10 warm-up calls (before)", dict(calls=1, warmup_ms=0.0)),
        ("window, no lead call", dict(lead=False)),
        ("window + lead call (now)", dict()),
    ]
    clock = _sm_clock()
    table = Table(
        title=f"timing methods: median ms over {repeats} repeats ({trials} trials each, GPU idle "
        f"{idle_s:g} s between repeats)"
    )
    for col in ("kernel", "method", "calls/trial", "medians ms", "spread", "IQR/median"):
        table.add_column(col)
    out = {"sm_clock_idle_mhz": clock}
    for kname, fn, make in kernels:
        for mname, kw in methods:
            runs = []
            for _ in range(repeats):
                time.sleep(idle_s)
                runs.append(timing.measure(fn, make, trials, 10, **kw))
            meds = [r.median_ms for r in runs]
            iqr = mean(r.iqr_ms / r.median_ms for r in runs)
            table.add_row(
                kname,
                mname,
                str(runs[0].calls),
                " ".join(f"{m:.4f}" for m in meds),
                f"{spread(meds):.2%}",
                f"{iqr:.1%}",
            )
            out[f"{kname} | {mname}"] = {
                "medians_ms": meds,
                "spread": spread(meds),
                "calls": runs[0].calls,
                "iqr_rel": iqr,
            }
    out["sm_clock_after_mhz"] = _sm_clock()
    console.print(table)
    console.print(f"SM clock (NVML): {clock} MHz before the study, {out['sm_clock_after_mhz']} MHz after")
    return out


def _sm_clock():
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    except Exception:  # NVML missing: the study runs without clock readings
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--count", type=int, default=8, help="candidates")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument(
        "--workers", type=int, default=None, help="workers of the shared pool (default 4 on a GPU, 2 on CPU)"
    )
    ap.add_argument("--problems", type=int, default=1, help="distinct problems the candidates are spread over")
    ap.add_argument(
        "--modes",
        default="fresh,pool1,poolW",
        help="comma-separated subset of fresh,pool1,poolW,gpus (GPU: a pool a GPU)",
    )
    ap.add_argument("--distinct", action="store_true", help="every candidate a kernel of its own (no copies)")
    ap.add_argument("--gpus", type=int, default=None, help="GPUs of the gpus mode (default: every visible one)")
    ap.add_argument("--repeats", type=int, default=5, help="GPU: verify one candidate this many times (spread)")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="GPU: torch profiler per task as well (kernel time; slows every task by seconds)",
    )
    ap.add_argument("--timing-study", action="store_true", help="GPU: compare timing methods in-process, then stop")
    ap.add_argument("--idle", type=float, default=0.5, help="timing study: seconds the GPU idles between repeats")
    ap.add_argument("--trials", type=int, default=50, help="timing study: trials per measurement")
    ap.add_argument("--json", default=None, help="write every number to this file")
    args = ap.parse_args()
    console = Console(width=200)
    gpu = args.device.startswith("cuda")
    record: dict = {"args": vars(args)}
    if args.timing_study:
        record["study"] = timing_study(console, args.repeats, args.idle, args.trials)
        _dump(args.json, record)
        return
    workers = args.workers or (4 if gpu else 2)
    tasks = make_tasks(args.count, args.device, gpu and args.profile, args.problems, args.distinct)
    wanted = args.modes.split(",")
    results = {}
    for mode, size, fresh in (("poolW", workers, False), ("pool1", 1, False), ("fresh", 1, True)):
        if mode in wanted:
            label = {
                "fresh": "fresh process per candidate",
                "pool1": "pool, 1 worker",
                "poolW": f"pool, {workers} workers",
            }[mode]
            results[label] = run(tasks, args.device, size, fresh)
            r = results[label]
            console.print(
                f"[{label}] {r['wall']:.1f} s, {len(tasks) / r['wall']:.3f} candidates/s, "
                f"{sum(v.correct for v in r['verdicts'])}/{len(tasks)} correct",
                highlight=False,
            )
    if "gpus" in wanted:
        import torch

        gpus = args.gpus or torch.cuda.device_count()
        label = f"{gpus} GPUs, a pool of {workers} workers each"
        results[label] = r = run(tasks, args.device, workers, False, gpus)
        console.print(f"[{label}] {r['wall']:.1f} s, {len(tasks) / r['wall']:.3f} candidates/s", highlight=False)
    summary = report_modes(console, results, len(tasks))
    one_gpu, many = f"pool, {workers} workers", [k for k in summary if "GPUs, a pool" in k]
    if one_gpu in summary and many:
        ratio = summary[many[0]]["rate"] / summary[one_gpu]["rate"]
        serving = summary[many[0]]["serving_rate"] / summary[one_gpu]["serving_rate"]
        record["gpus_over_one"] = {"wall": ratio, "serving": serving}
        console.print(
            f"{many[0]} / one GPU ({one_gpu}): {ratio:.2f}x (wall), {serving:.2f}x (once the workers are ready)",
            highlight=False,
        )
    record["modes"] = summary
    fresh_label = "fresh process per candidate"
    if fresh_label in summary:
        for label, s in summary.items():
            if label != fresh_label:
                ratio = s["rate"] / summary[fresh_label]["rate"]
                record.setdefault("ratios", {})[label] = ratio
                console.print(f"{label} / fresh: {ratio:.2f}x", highlight=False)
    if gpu:
        repeats = []
        if args.repeats:
            once = replace(tasks[0], profile_gpu=False)  # the profiler's per-launch cost is not the kernel's
            with WorkerPool(args.device, size=1, limits=Limits(task_timeout_s=600), name="repeat") as pool:
                repeats = [v.candidate_ms for v in pool.verify([once] * args.repeats)]
        workers_label = next(
            (k for k in results if k.startswith("pool, ") and "1 worker" not in k), next(iter(results))
        )
        record["timing"] = timing_report(console, results, repeats, workers_label)
    _dump(args.json, record)


def _dump(path, record) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(record, f, indent=1, default=str)


if __name__ == "__main__":
    main()
