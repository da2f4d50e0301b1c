"""The test-time search: capture (in a verifier worker) -> fragments -> candidates from the configured sources ->
verification in batches -> cache -> assembly -> the whole module verified and timed against the original.

Round one asks the first-turn sources (lowering, inductor, model) about every fragment the cache cannot answer;
round two the sources that build on verdicts (refine, configs). Every verification goes through the verifier in
batches of `batch` tasks (a pool spreads them over its workers, the Ray service over its actors), within the budget's
candidates and wall seconds. The answer is never slower than the original: an assembled module that fails, or on
a GPU is not faster than eager PyTorch, gives way to the user's own program, and the report says why.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

from drtriton_ray.ir.render import size_names
from drtriton_ray.models.load import ModelError
from drtriton_ray.search.assembly import (
    AssemblyError,
    Option,
    Piece,
    choose_tiling,
    moved_bytes,
    node_times,
    render_module,
)
from drtriton_ray.search.cache import Cache, Entry, device_key, judged, program_key
from drtriton_ray.search.fragments import WHOLE, Fragment, enumerate_fragments
from drtriton_ray.search.inductor import InductorSource
from drtriton_ray.search.settings import ConversionSettings
from drtriton_ray.search.sources import (
    Attempt,
    Budget,
    Candidate,
    ConfigSource,
    LoweringSource,
    ModelSource,
    PolicyModel,
    RefineSource,
    VerdictSummary,
    one_line,
)

FIRST_ROUND = ("lowering", "inductor", "model")
SECOND_ROUND = ("refine", "configs")

# Timing windows per fragment candidate (and its reference): enough to rank candidates for the tiling, a fifth of
# a full measurement, because timing holds the GPU's exclusive section and so bounds how many workers help. The
# assembled module, the answer, is timed with the verifier's full default.
FRAGMENT_TIMING_TRIALS = 10
# the whole program's candidates an answer no faster than torch.compile is checked against (Search.runners_up)
RUNNERS_UP = 2


@dataclass
class Progress:
    stage: str  # capture | fragments | propose | verify | assemble | done
    done: int = 0
    total: int = 0
    detail: str = ""
    # Filled in by the search for every event (callers that only read the four fields above can ignore them):
    # the service shows them while a conversion runs.
    verified: Optional[int] = None  # tasks sent to the verifier so far
    candidates: Optional[dict] = None  # source -> candidates judged so far (cache answers included)
    fragments_done: Optional[int] = None  # distinct fragments with a correct candidate so far
    fragments_total: Optional[int] = None  # distinct fragments searched
    best_speedup_vs_eager: Optional[float] = None  # the fastest correct fragment candidate's, where timed
    # Only on the final "done" event: each fragment's best candidate verified by this run (not the cache's):
    # {"fragment", "source" (the fragment problem), "code", "origin" (the candidate source), "outcome"}
    records: Optional[list] = None


@dataclass
class ConversionReport:
    device: str
    settings: dict
    program: dict = field(default_factory=dict)  # nodes, ops, Torch nodes, capture notes
    fragments: list[dict] = field(default_factory=list)
    candidates: dict[str, dict] = field(default_factory=dict)  # per source: asked, proposed, verified, correct...
    verdicts: dict[str, int] = field(default_factory=dict)  # status -> count over verified candidates
    # each verified candidate found wrong or broken: its fragment, source, status and the verifier's reason
    rejected: list[dict] = field(default_factory=list)
    tiling: list[dict] = field(default_factory=list)
    eval_tiling: Optional[list[dict]] = None  # the eval-mode graph's, where the program computes differently in eval
    # the assembled module's verdict summary (eager, compile and answer ms; bytes_moved a call), policy and GB/s
    end_to_end: Optional[dict] = None
    # the size constants that may vary (capture's dims) and the values the answer was verified at: the problem's
    # own first, then the others; `general`: its kernels run at all of them (else only at the problem's own sizes)
    shapes: list[dict] = field(default_factory=list)
    general: Optional[bool] = None
    # the other sizes where the program itself has no answer (it raises, or returns an empty output), each with the
    # reason: not verified there; the answer runs your forward at them
    shapes_skipped: list[dict] = field(default_factory=list)
    kept_original: bool = True
    reason: str = ""
    speedup_vs_eager: Optional[float] = None
    speedup_vs_compile: Optional[float] = None
    from_cache: bool = False
    budget_spent: bool = False  # the search stopped at its budget (seconds or candidates): more might do better
    verified: int = 0  # tasks the verifier ran, end-to-end check included
    cache_hits: int = 0
    wall_s: float = 0.0
    verify_s: float = 0.0
    generate_s: float = 0.0


@dataclass
class ConversionResult:
    module_source: str  # the answer: the assembled ModelNew module, or the original program when it was kept
    report: ConversionReport

    def to_dict(self) -> dict:
        return {"module_source": self.module_source, "report": asdict(self.report)}

    @classmethod
    def from_dict(cls, d: dict) -> "ConversionResult":
        return cls(d["module_source"], ConversionReport(**d["report"]))


def tiling_rows(graph, pieces: list[Piece], origins: dict[str, str]) -> list[dict]:
    """The report's tiling: per piece its nodes' operators and, for a Triton piece, the source of its kernels."""
    rows = [{**asdict(p), "ops": [graph.program.nodes[k].op for k in range(p.start, p.end)]} for p in pieces]
    for row in rows:
        if row["kind"] == "triton":
            row["origin"] = origins.get(row["fragment"], "")
    return rows


def task_seed(seed: int, *parts) -> int:
    """The verifier's trial seed for a task, fixed by the search's seed: the same run judges the same way."""
    digest = hashlib.sha256("/".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def build_sources(config: ConversionSettings, policy=None, verifier=None) -> tuple[dict, Optional[PolicyModel]]:
    """The configured sources by name; the model and refine sources share one PolicyModel (one engine): `policy`
    where the caller has one (the service's Policy deployment, same ids/generate interface), else loaded here.
    `verifier`: where the inductor source compiles when this process has no GPU (the service's Search)."""
    if policy is None and any(s in ("model", "refine") for s in config.sources):
        from pathlib import Path

        policy = PolicyModel(Path(config.model), config.device, config.engine, config.max_tokens, config.seed)
    makers = {
        "lowering": lambda: LoweringSource(),
        "inductor": lambda: InductorSource(config.device, None if local_gpu() else verifier),
        "model": lambda: ModelSource(policy, config.samples, config.seed),
        "refine": lambda: RefineSource(policy, config.seed),
        "configs": lambda: ConfigSource(config.variants),
    }
    return {name: makers[name]() for name in config.sources}, policy


def local_gpu() -> bool:
    """Whether this process sees a CUDA device."""
    import torch

    return torch.cuda.is_available()


class Search:
    """One conversion's state: attempts so far, the budget, the cache, the verifier."""

    def __init__(self, config: ConversionSettings, verifier, progress: Optional[Callable[[Progress], None]] = None):
        self.config, self.verifier = config, verifier
        self.callback = progress or (lambda p: None)
        self.start = time.monotonic()
        self.device = config.machine or device_key(config.device)
        self.cache = Cache(config.cache, self.device) if config.cache else None
        self.attempts: list[Attempt] = []
        self.tried: dict[str, dict[str, str]] = {}  # fragment hash -> candidate id -> status (cache's and ours)
        self.verified = 0
        self.verify_s = 0.0
        self.fragments: dict[str, Fragment] = {}  # one per hash: the one verified for all its places
        self.dims: dict[str, int] = {}  # the program's size constants that may vary (capture's dims)

    def progress(self, p: Progress) -> None:
        """The caller's callback, with the search's counts so far filled in."""
        correct = [a for a in self.attempts if a.outcome.correct]
        speedups = [a.outcome.speedup_vs_eager for a in correct if a.outcome.speedup_vs_eager is not None]
        p.verified = self.verified
        p.candidates = {}
        for a in self.attempts:
            p.candidates[a.candidate.source] = p.candidates.get(a.candidate.source, 0) + 1
        p.fragments_done = len({a.candidate.fragment for a in correct})
        p.fragments_total = len(self.fragments)
        p.best_speedup_vs_eager = max(speedups, default=None)
        self.callback(p)

    def records(self) -> list[dict]:
        """Each fragment's best candidate as verified by this run (none from the cache): the service's dataset."""
        rows = []
        for h, f in self.fragments.items():
            b = self.best(h)
            if b is not None and not b.cached:
                c = b.candidate
                rows.append(
                    {
                        "fragment": h,
                        "source": f.source,
                        "code": c.code,
                        "origin": c.source,
                        "outcome": b.outcome.to_dict(),
                    }
                )
        return rows

    def budget(self) -> Budget:
        return Budget(
            self.config.max_candidates - self.verified, self.config.budget_s - (time.monotonic() - self.start)
        )

    def load_cached(self) -> list[Fragment]:
        """Cached fragments' best candidates join the attempts; the fragments still to search are returned."""
        todo = []
        for h, f in self.fragments.items():
            entry = self.cache.get(h) if self.cache else None
            if entry is not None:
                self.tried[h] = dict(entry.tried)
            if entry is not None and entry.best is not None:
                b = entry.best
                cand = Candidate(h, b["source"], b["code"], b.get("note", ""))
                self.attempts.append(Attempt(cand, VerdictSummary(**b["outcome"]), cached=True))
            else:
                todo.append(f)
        return todo

    def run(self, candidates: list[Candidate]) -> None:
        """Verify what has not been judged before, in batches, while the budget lasts. The first batch goes to the
        verifier even when the proposing itself used up the seconds (a model's decoding can): answers already paid
        for are judged rather than thrown away; the candidate count stays a hard limit."""
        fresh, seen = [], set()
        for c in candidates:
            if c.id not in seen and c.id not in self.tried.get(c.fragment, {}):
                seen.add(c.id)
                fresh.append(c)
        for i in range(0, len(fresh), self.config.batch):
            budget = self.budget()
            if budget.candidates <= 0 or (budget.spent and i > 0):
                return
            chunk = fresh[i : i + min(self.config.batch, budget.candidates)]
            self.progress(Progress("verify", self.verified, self.config.max_candidates, f"{len(chunk)} candidates"))
            t0 = time.monotonic()
            verdicts = self.verifier.verify([self.task(c) for c in chunk])
            self.verify_s += time.monotonic() - t0
            self.verified += len(chunk)
            for c, v in zip(chunk, verdicts):
                self.attempts.append(Attempt(c, VerdictSummary.of(v)))
                self.tried.setdefault(c.fragment, {})[c.id] = v.status

    def task(self, c: Candidate):
        from drtriton_ray.verify.task import Task

        f = self.fragments[c.fragment]
        return Task(
            f.source,
            c.code,
            policy="strict",
            name=f"{f.name}/{c.source}",
            seed=task_seed(self.config.seed, c.fragment, c.id),
            timing=self.config.timed,
            timing_trials=FRAGMENT_TIMING_TRIALS,
            compile_reference=False,  # the tiling weighs fragments against eager; torch.compile is for the whole
            # every size at 1 together, not each alone: the single row costs a fragment's candidates one shape,
            # and the assembled answer is checked at each (check_whole)
            shapes=other_shapes(self.dims, size_names(f.program), each_at_one=False),
        )

    def best(self, h: str) -> Optional[Attempt]:
        """A fragment's best verified attempt: among the general ones where there are any (right at other sizes too),
        the fastest where timed, else the first."""
        ranked = self.ranked(h) if self.config.timed else self.correct(h)
        return ranked[0] if ranked else None

    def correct(self, h: str) -> list[Attempt]:
        """A fragment's verified attempts in the order made: the general ones where there are any."""
        correct = [a for a in self.attempts if a.candidate.fragment == h and a.outcome.correct]
        return [a for a in correct if a.outcome.general] or correct

    def ranked(self, h: str) -> list[Attempt]:
        """A fragment's verified, timed attempts, fastest first (the general ones where there are any)."""
        timed = [a for a in self.correct(h) if a.outcome.candidate_ms is not None]
        return sorted(timed, key=lambda a: a.outcome.candidate_ms)

    def save(self) -> None:
        if self.cache is None:
            return
        for h in self.fragments:
            b = self.best(h)
            best = None
            if b is not None:
                c = b.candidate
                best = {"code": c.code, "source": c.source, "note": c.note, "outcome": b.outcome.to_dict()}
            tried = judged(self.tried.get(h, {}))
            if best is not None or tried:
                self.cache.put(Entry(h, self.device, self.cache.version, best, tried))

    # -- assembly --------------------------------------------------------------------------------------------
    def origins(self) -> dict[str, str]:
        """Fragment hash -> the source that proposed its best candidate."""
        return {h: b.candidate.source for h in self.fragments if (b := self.best(h)) is not None}

    def tiling(self, graph, placed: list[Fragment]) -> tuple[list[Piece], dict]:
        """The chosen tiling and, per Triton piece's (start, end), its fragment and verified code. Where sizes vary,
        from the fragments whose kernels are general where there are any: an answer that runs its kernels at every
        size beats one that covers more nodes at one size and runs your forward at the others."""
        options, chosen, measured = [], {}, []
        for f in placed:
            eager = [a.outcome.eager_ms for a in self.attempts if a.candidate.fragment == f.hash and a.outcome.eager_ms]
            if eager:
                measured.append((f.start, f.end, eager[0]))
            b = self.best(f.hash)
            if b is not None:
                options.append(Option(f.start, f.end, b.outcome.candidate_ms, f.hash))
                chosen[(f.start, f.end)] = (f, b.candidate.code)
        n = len(graph.program.nodes)
        node_ms = node_times(n, measured, moved_bytes(graph.program)) if self.config.timed else None
        general = [o for o in options if self.dims and self.best(o.key).outcome.general]
        return choose_tiling(n, general or options, node_ms), chosen

    def check_whole(self, source: str, module: str, policy: str, general: bool = False):
        """The assembled module against the user's program, timed against eager and torch.compile."""
        from drtriton_ray.verify.task import Task

        task = Task(source, module, policy=policy, name="assembled", seed=task_seed(self.config.seed, "whole"))
        task.timing = self.config.timed
        # where the kernels claim other sizes; elsewhere the answer's guard sends them to the user's own forward
        task.shapes = other_shapes(self.dims, self.dims) if general else ()
        t0 = time.monotonic()
        (verdict,) = self.verifier.verify([task])
        self.verify_s += time.monotonic() - t0
        self.verified += 1
        return verdict

    def original_vs_compile(self, source: str, report: ConversionReport) -> Optional[float]:
        """The kept original's speed against torch.compile (compile ms / eager ms): from the end-to-end check's
        reference times when there was one, else from a reference job of the verifier's."""
        times = report.end_to_end or {}
        if not (times.get("eager_ms") and times.get("compile_ms")):
            times = self.verifier.time_reference(source) or {}
        if not (times.get("eager_ms") and times.get("compile_ms")):
            return None
        return times["compile_ms"] / times["eager_ms"]

    def assemble(self, source: str, graph, placed: dict[str, list[Fragment]], report: ConversionReport) -> str:
        """The answer's source: the assembled module if it is verified (and on a GPU faster), else the original.
        `placed`: the fragments per mode, "train" and, where the program has an eval-mode graph, "eval". On a GPU,
        an answer no faster than torch.compile is checked against the whole program's runners-up (`runners_up`),
        end to end, and the fastest verified one is the answer."""
        pieces, chosen = self.tiling(graph, placed["train"])
        module = self.assemble_pieces(source, graph, placed, pieces, chosen, self.origins(), report)
        for alternative in self.runners_up(graph, placed, pieces, chosen, report):
            other = ConversionReport(device=report.device, settings=report.settings)
            candidate = self.assemble_pieces(source, graph, placed, *alternative, other)
            if not other.kept_original and (report.kept_original or e2e_ms(other) < e2e_ms(report)):
                module = candidate
                for name in ASSEMBLY_FIELDS:
                    setattr(report, name, getattr(other, name))
        return module

    def runners_up(self, graph, placed: dict[str, list[Fragment]], pieces: list[Piece], chosen: dict, report) -> list:
        """(pieces, chosen, origins) of answers that are the whole program as one fragment, by its fastest verified
        candidates but the one the answer runs (RUNNERS_UP of them: Inductor's whole-program kernels among them,
        torch.compile's own), where the answer is no faster than torch.compile on a GPU; fragment times taken apart
        can rank two answers within their noise, or miss the seams between fragments."""
        n = len(graph.program.nodes)
        if not self.config.timed or graph.eval_graph is not None or not report.end_to_end:
            return []
        if not report.kept_original and (report.speedup_vs_compile or 0.0) >= 1.0:
            return []
        whole = next((f for f in placed["train"] if (f.start, f.end) == (0, n)), None)
        if whole is None:
            return []
        used = chosen.get((0, n), (None, None))[1] if len(pieces) == 1 else None
        timed = [a for a in self.ranked(whole.hash) if a.candidate.code != used][:RUNNERS_UP]
        return [
            (
                [Piece(0, n, "triton", whole.hash, a.outcome.candidate_ms)],
                {(0, n): (whole, a.candidate.code)},
                {**self.origins(), whole.hash: a.candidate.source},
            )
            for a in timed
        ]

    def assemble_pieces(
        self, source: str, graph, placed: dict, pieces: list[Piece], chosen: dict, origins: dict, report
    ) -> str:
        """The answer's source for the tiling `pieces` (Triton pieces' code in `chosen`), as `assemble` says."""
        report.tiling = tiling_rows(graph, pieces, origins)
        eval_pieces = eval_chosen = None
        if graph.eval_graph is not None:
            eval_pieces, eval_chosen = self.tiling(graph.eval_graph, placed["eval"])
            report.eval_tiling = tiling_rows(graph.eval_graph, eval_pieces, self.origins())
        if not chosen:
            report.reason = "no fragment has a verified Triton candidate: the original program is kept"
            return kept_original(source)
        if all(p.kind == "torch" for p in pieces):
            report.reason = "no verified fragment is faster than its PyTorch nodes: the original program is kept"
            return kept_original(source)
        if eval_pieces is not None and all(p.kind == "torch" for p in eval_pieces):
            report.reason = "no verified fragment of the eval-mode graph (a path without kernels): the original is kept"
            return kept_original(source)
        general = self.all_general(pieces, chosen) and self.all_general(eval_pieces or [], eval_chosen or {})

        def render(general: bool, refused: tuple = ()) -> str:
            return render_module(source, graph, pieces, chosen, eval_pieces, eval_chosen, general, refused)

        try:
            module = render(general)
        except AssemblyError as e:
            report.reason = f"the verified fragments could not be assembled ({e}): the original program is kept"
            return kept_original(source)
        strict = all(p.kind == "triton" for p in pieces + (eval_pieces or []))
        verdict, policy = self.check_whole_any(source, module, "strict" if strict else "hybrid", general)
        report.shapes_skipped = [{"values": s["values"], "reason": s["reason"]} for s in verdict.shapes if skipped(s)]
        if general and verdict.correct:
            general, module, verdict, policy = self.settle_general(source, render, module, verdict, policy)
        summary = VerdictSummary.of(verdict)
        report.end_to_end = {**summary.to_dict(), "policy": policy, "gbps": summary.gbps()}
        checked = [s["values"] for s in verdict.shapes if s["ok"] and not skipped(s)]
        report.shapes = [dict(self.dims)] + checked if self.dims else []
        report.general = general if self.dims else None
        return self.decide(source, module, verdict, report)

    def all_general(self, pieces: list[Piece], chosen: dict) -> bool:
        """Whether every Triton piece's kernels were verified at the program's other sizes too."""
        if not self.dims:
            return False
        picked = [chosen[(p.start, p.end)] for p in pieces if p.kind == "triton"]
        return all(self.general_code(f.hash, code) for f, code in picked)

    def general_code(self, h: str, code: str) -> bool:
        """Whether this verified code of fragment `h` was right at the other sizes too."""
        return any(
            a.outcome.correct and a.outcome.general
            for a in self.attempts
            if (a.candidate.fragment, a.candidate.code) == (h, code)
        )

    def settle_general(self, source: str, render: Callable, module: str, verdict, policy: str) -> tuple:
        """(general, module, verdict, policy) of the assembled module whose kernels were claimed general, once its
        checks say where the claim holds, each module verified again. A kernel wrong at some size, or a size other
        than 1 where the program has no answer (the guard cannot tell which others lack one): the kernels at the
        problem's own sizes only. A size constant at 1 where the program has no answer: the guard refuses it (your
        forward raises there as it did, or returns its empty output)."""
        refused: tuple = ()
        while verdict.correct:
            undefined = [s["values"] for s in verdict.shapes if skipped(s)]
            if verdict.general is not False and all(u in refused for u in undefined):
                break
            refused += tuple(u for u in undefined if u not in refused)
            narrowed = verdict.general is not False and all(v == 1 for u in refused for v in u.values())
            module = refusing(render, refused) if narrowed else None
            if module is None:
                module = render(False)
                verdict, policy = self.check_whole_any(source, module, policy, False)
                return False, module, verdict, policy
            verdict, policy = self.check_whole_any(source, module, policy, True)
        return True, module, verdict, policy

    def check_whole_any(self, source: str, module: str, policy: str, general: bool = False):
        """The assembled module verified under `policy`; strict refused statically (the user's own helpers use
        PyTorch) is tried again as hybrid. The verdict and the policy that judged it."""
        self.progress(Progress("assemble", 0, 1, f"verifying the assembled module ({policy})"))
        verdict = self.check_whole(source, module, policy, general)
        if policy == "strict" and verdict.status == "static_rejected":
            policy = "hybrid"
            verdict = self.check_whole(source, module, policy, general)
        return verdict, policy

    def decide(self, source: str, module: str, verdict, report: ConversionReport) -> str:
        if not verdict.correct:
            report.reason = f"the assembled module failed verification ({verdict.status}): the original is kept"
            return kept_original(source)
        if self.config.timed and (verdict.speedup_vs_eager is None or verdict.speedup_vs_eager <= 1.0):
            timed = "not timed" if verdict.speedup_vs_eager is None else f"{verdict.speedup_vs_eager:.2f}x eager"
            report.reason = f"the assembled module is not faster than the original ({timed}): the original is kept"
            report.speedup_vs_eager, report.speedup_vs_compile = 1.0, None
            return kept_original(source)
        report.kept_original = False
        report.speedup_vs_eager, report.speedup_vs_compile = verdict.speedup_vs_eager, verdict.speedup_vs_compile
        report.reason = "verified" + ("" if self.config.timed else " (CPU interpreter: correctness only, not timed)")
        return module

    # -- the report ------------------------------------------------------------------------------------------
    def describe(self, report: ConversionReport, graph, placed: dict[str, list[Fragment]], stats: dict) -> None:
        nodes = graph.program.nodes
        report.program = {
            "nodes": len(nodes),
            "ops": [n.op for n in nodes],
            "torch_nodes": len(graph.torch_nodes()),
            "notes": list(graph.notes),
            "updates": sorted(graph.updates.values()),  # buffers the training-mode forward writes back
            "eval_nodes": len(graph.eval_graph.program.nodes) if graph.eval_graph else None,  # eval-mode graph
        }
        for mode, f in [(mode, f) for mode, fragments in placed.items() for f in fragments]:
            b = self.best(f.hash)
            mine = [a for a in self.attempts if a.candidate.fragment == f.hash]
            row = {**f.summary(), "mode": mode, "candidates": len(mine), "cached": any(a.cached for a in mine)}
            if b is not None:
                row |= {"best_source": b.candidate.source, "best_note": b.candidate.note, **b.outcome.to_dict()}
            report.fragments.append(row)
        for name, st in stats.items():
            mine = [a for a in self.attempts if a.candidate.source == name]
            report.candidates[name] = {
                **asdict(st),
                "verified": sum(not a.cached for a in mine),
                "correct": sum(a.outcome.correct and not a.cached for a in mine),
                "from_cache": sum(a.cached for a in mine),
            }
        for a in self.attempts:
            if not a.cached:
                report.verdicts[a.outcome.status] = report.verdicts.get(a.outcome.status, 0) + 1
            if not a.cached and not a.outcome.correct:
                report.rejected.append(rejection(self.fragments.get(a.candidate.fragment), a))
        report.cache_hits = self.cache.hits if self.cache else 0

    def propose_all(self, sources: dict, todo: list[Fragment]) -> None:
        """Round one on the fragments the cache could not answer: each source proposes (the lowering even on a spent
        budget: its candidates cost nothing to make) and their candidates are verified together, the largest
        fragments' first, as the tiling's best pieces (the first batch is verified whatever the budget). Round two
        on every fragment while the budget lasts."""
        first = [c for name in FIRST_ROUND for c in self.proposals(sources, name, todo, always=name == "lowering")]
        self.run(sorted(first, key=lambda c: -self.fragments[c.fragment].size))
        for name in SECOND_ROUND:
            self.run(self.proposals(sources, name, list(self.fragments.values())))

    def proposals(self, sources: dict, name: str, fragments: list[Fragment], always: bool = False) -> list:
        """Source `name`'s candidates for `fragments` (none where it is not asked for, or the budget is spent)."""
        if name not in sources or not fragments or (self.budget().spent and not always):
            return []
        self.progress(Progress("propose", 0, len(fragments), name))
        try:
            return sources[name].propose(fragments, self.budget(), self.attempts)
        except ModelError:  # the request's model folder is unusable: a bad request, said as such
            raise
        except Exception as e:  # one source's failure costs its candidates, not the search
            sources[name].stats.fail(f"the source failed: {one_line(e)}")
            return []


KEPT_ORIGINAL = '''

class ModelNew(Model):
    """The original program, kept: no verified Triton version of it was faster (the report says why)."""

    def forward(self, *args, **kwargs):
        return super().forward(*args, **kwargs)
'''


# what assembling sets in the report: an answer's own, taken over with it when a runner-up is the faster answer
ASSEMBLY_FIELDS = (
    "tiling",
    "eval_tiling",
    "reason",
    "shapes_skipped",
    "end_to_end",
    "shapes",
    "general",
    "kept_original",
    "speedup_vs_eager",
    "speedup_vs_compile",
)


def e2e_ms(report: ConversionReport) -> float:
    """The assembled module's measured milliseconds a call (infinite where it was not timed)."""
    ms = (report.end_to_end or {}).get("candidate_ms")
    return ms if ms is not None else float("inf")


def rejection(fragment: Optional[Fragment], a: Attempt) -> dict:
    """A candidate the verifier refused, for the report: where, whose, and why in one line."""
    where = {"fragment": fragment.name, "ops": " -> ".join(fragment.ops)} if fragment else {"fragment": "whole"}
    reason = " ".join(a.outcome.reason.split())[:240]
    return {
        **where,
        "source": a.candidate.source,
        "note": a.candidate.note,
        "status": a.outcome.status,
        "reason": reason,
    }


def other_shapes(dims: dict[str, int], names, each_at_one: bool = True) -> tuple:
    """The sizes a candidate is checked at besides the problem's own: each constant one more, then all doubled, then
    at 1, where a batch of one and a decode step's single token run and a kernel meets a single row or a block larger
    than its data: each constant at 1 alone (`each_at_one`) and all of them at 1 together."""
    used = {n: dims[n] for n in names if n in dims}
    if not used:
        return ()
    ones = tuple({n: 1} for n, v in used.items() if v != 1) if each_at_one else ()
    every = ({n: 1 for n in used},) if any(v != 1 for v in used.values()) and len(ones) != 1 else ()
    return tuple({n: v + 1} for n, v in used.items()) + ({n: 2 * v for n, v in used.items()},) + ones + every


def refusing(render: Callable, refused: tuple) -> Optional[str]:
    """The general module whose guard refuses the sizes `refused`; None where one of them no input dim gives alone."""
    try:
        return render(True, refused)
    except AssemblyError:
        return None


def skipped(shape: dict) -> bool:
    """Whether the verifier skipped this other shape: the program has no answer there (checks.py undefined_at)."""
    return bool(shape.get("skipped"))


def kept_original(source: str) -> str:
    """The user's program as the answer: it still defines `ModelNew` (the same constructor, state_dict and forward),
    so the file the converter writes loads like any answer (and `drtriton verify` says it holds no Triton kernel)."""
    return source.rstrip("\n") + "\n" + KEPT_ORIGINAL


def cached_result(source: str, config: ConversionSettings) -> Optional[ConversionResult]:
    """The whole result of an earlier search of this program with these settings on this machine, if the cache
    holds one (reading the cache runs nothing: the service's Api answers repeats with it)."""
    if not config.cache:
        return None
    config = config.resolved()
    cache = Cache(config.cache, config.machine or device_key(config.device))
    hit = cache.get_result(program_key(source, config.key_settings()))
    if hit is None:
        return None
    result = ConversionResult.from_dict(hit)
    result.report.from_cache, result.report.verified, result.report.verify_s = True, 0, 0.0
    return result


def search(
    source: str, config: ConversionSettings, verifier, progress=None, graph=None, policy=None
) -> ConversionResult:
    """Convert `source` (KernelBench format) with `verifier` (a WorkerPool or VerifyService): capture (unless
    `graph`, the program's Graph, is given), search, assemble, verify. `policy`: the model engine to use (the
    caller keeps and closes it) instead of one loaded here. Raises CaptureError when the program cannot be
    captured."""
    from drtriton_ray.capture.sandbox import capture_program

    config = config.resolved()
    s = Search(config, verifier, progress)
    key = program_key(source, config.key_settings())
    result = cached_result(source, config)
    if result is not None:
        result.report.wall_s = time.monotonic() - s.start
        s.progress(Progress("done", 1, 1, "from the cache"))
        return result
    if graph is None:
        s.progress(Progress("capture", 0, 1, "capturing the program in a verifier worker"))
        graph = capture_program(source, verifier, config.dynamic)
    s.dims = dict(graph.dims)
    # the whole program as a fragment, for a source that fuses across the lowering's kernels (Inductor); for the
    # lowering alone it is its regions' kernels again, verified once more
    whole = WHOLE if "inductor" in config.sources else 0
    placed = {"train": [f for f in enumerate_fragments(graph, config.k, whole=whole) if not f.skip]}
    if graph.eval_graph is not None:  # searched too: the verifier wants kernels in eval mode as well
        placed["eval"] = [f for f in enumerate_fragments(graph.eval_graph, config.k, whole=whole) if not f.skip]
    every = [f for fragments in placed.values() for f in fragments]
    for f in every:
        s.fragments.setdefault(f.hash, f)
    s.progress(Progress("fragments", len(s.fragments), len(s.fragments), f"{len(every)} fragments"))
    todo = s.load_cached()
    sources, engine = build_sources(config, policy, verifier)
    report = ConversionReport(device=s.device, settings=asdict(config))
    try:
        s.propose_all(sources, todo)
    finally:
        if engine is not None:
            report.generate_s = engine.generate_s
            if policy is None:  # loaded here: closed here
                engine.close()
    s.save()
    spent = report.budget_spent = s.budget().spent
    module = s.assemble(source, graph, placed, report)
    if report.kept_original and config.timed:
        report.speedup_vs_eager, report.speedup_vs_compile = 1.0, s.original_vs_compile(source, report)
    s.describe(report, graph, placed, {name: src.stats for name, src in sources.items()})
    report.verified, report.verify_s, report.wall_s = s.verified, s.verify_s, time.monotonic() - s.start
    result = ConversionResult(module, report)
    if s.cache is not None and not spent:  # a search cut short may do better with more budget
        s.cache.put_result(key, result.to_dict())
    s.progress(Progress("done", 1, 1, report.reason, records=s.records()))
    return result
