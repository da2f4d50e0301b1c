"""Where candidate kernels come from. One interface, `CandidateSource.propose(fragments, budget, history)`, and
the sources the search config names:

- `lowering`: the reference lowering of the fragment's Program (lower/emit.py), one per fragment;
- `inductor`: torch.compile's own Triton for the fragment, made self-contained (search/inductor.py; CUDA only);
- `model`: the policy model through a rollout engine, N answers per fragment: 1 greedy + N-1 sampled (DRTriton);
- `refine`: the model again, a second turn holding its previous answer and that answer's verdict (error,
  mismatch, or its speed against eager and torch.compile);
- `configs`: launch-config variants of verified Triton candidates (block sizes, num_warps, num_stages), rewritten
  in the candidate's AST.

Sources propose; the search verifies. `history` is every verified attempt so far, which the second-round sources
(refine, configs) build on.
"""

from __future__ import annotations

import ast
import itertools
import asyncio
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Optional, Protocol, Sequence

from drtriton_ray.search.fragments import Fragment
from drtriton_ray.search.settings import MODEL_SOURCES

SAMPLED_TEMPERATURE = 0.8  # as eval-model's: DRTriton's N-1 sampled answers


@dataclass
class Candidate:
    """A kernel module (class ModelNew) proposed for one fragment."""

    fragment: str  # the fragment's hash
    source: str  # the source that proposed it
    code: str
    note: str = ""  # e.g. "sample 2", "BLOCK x2"
    parent: str = ""  # id of the candidate it was made from (refine, configs)

    @property
    def id(self) -> str:
        return hashlib.sha256(f"{self.fragment}\n{self.code}".encode()).hexdigest()[:16]


@dataclass
class VerdictSummary:
    """What the verifier said of a candidate, kept small enough for the report and the cache."""

    status: str
    reason: str = ""
    correct: bool = False
    candidate_ms: Optional[float] = None
    eager_ms: Optional[float] = None
    compile_ms: Optional[float] = None
    speedup_vs_eager: Optional[float] = None
    speedup_vs_compile: Optional[float] = None
    general: Optional[bool] = None  # right at the other sizes it was checked at too (None: none asked)
    bytes_moved: Optional[int] = None  # a call's least memory traffic (verify.checks.bytes_moved), where timed

    def gbps(self) -> Optional[float]:
        """The bandwidth the candidate reached: its least memory traffic a call over its time a call."""
        if not self.bytes_moved or not self.candidate_ms:
            return None
        return self.bytes_moved / self.candidate_ms / 1e6

    @classmethod
    def of(cls, verdict) -> "VerdictSummary":
        values = {f.name: getattr(verdict, f.name) for f in fields(cls)}
        return cls(**{**values, "reason": verdict.reason[:300]})

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Attempt:
    candidate: Candidate
    outcome: VerdictSummary
    cached: bool = False  # answered from the cache: nothing was verified


@dataclass
class Budget:
    candidates: int  # how many more candidates may go to the verifier
    seconds: float  # wall seconds left

    @property
    def spent(self) -> bool:
        return self.candidates <= 0 or self.seconds <= 0


class CandidateSource(Protocol):
    name: str

    def propose(
        self, fragments: Sequence[Fragment], budget: Budget, history: Sequence[Attempt] = ()
    ) -> list[Candidate]: ...


@dataclass
class SourceStats:
    """Per source, for the report: what it was asked and what it gave."""

    asked: int = 0  # fragments it was asked about
    proposed: int = 0  # candidates it returned
    failed: dict[str, int] = field(default_factory=dict)  # why some fragments got nothing (per reason)

    def fail(self, why: str) -> None:
        self.failed[why] = self.failed.get(why, 0) + 1


def one_line(e: BaseException) -> str:
    """An exception as `Type: first line`, at most 160 characters, for the report."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:160] if text else type(e).__name__


class LoweringSource:
    """The reference lowering: one candidate per fragment whose operators all have a kernel, and more where its norms
    have variants (lower/passes.py: one_pass_norms, unsplit_norms), which the verifier's timings choose between."""

    name = "lowering"

    def __init__(self):
        self.stats = SourceStats()

    def propose(self, fragments, budget, history=()) -> list[Candidate]:
        from drtriton_ray.lower.emit import NotLowerable, lower_program

        out, variants = [], []
        for f in fragments[: max(budget.candidates, 0)]:
            self.stats.asked += 1
            try:
                code = lower_program(f.program, f.source)
            except (NotLowerable, KeyError) as e:  # KeyError: an operator the lowering does not know
                self.stats.fail(str(e).strip("'\"")[:120])
                continue
            except Exception as e:  # a lowering bug on one fragment: recorded, and the other fragments go on
                self.stats.fail(f"the lowering failed on {f.name}: {one_line(e)}")
                continue
            out.append(Candidate(f.hash, self.name, code, "reference lowering"))
            variant = lower_program(f.program, f.source, one_pass=True)
            if variant != code:
                variants.append(Candidate(f.hash, self.name, variant, "reference lowering, norms in one pass"))
            variant = lower_program(f.program, f.source, unsplit=True)
            if variant != code:
                variants.append(Candidate(f.hash, self.name, variant, "reference lowering, a program a norm row"))
        out += variants[: max(budget.candidates - len(out), 0)]  # every fragment's own candidate first
        self.stats.proposed += len(out)
        return out


class PolicyModel:
    """A model folder behind a rollout engine (hf: transformers, anywhere; vllm: GPU), driven from its own event
    loop so the synchronous search can call it between verifier batches."""

    def __init__(self, model_dir: Path, device: str = "cpu", engine: str = "hf", max_tokens: int = 1024, seed=0):
        from drtriton_ray.models import ModelError, load_tokenizer

        self.tokenizer = load_tokenizer(model_dir)
        if not self.tokenizer.chat_template:
            raise ModelError(f"{model_dir} has no chat template, so the prompts cannot be rendered")
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
        self.context = int(config.get("max_position_embeddings") or self.tokenizer.model_max_length)
        self.model_dir, self.device, self.kind, self.max_tokens, self.seed = model_dir, device, engine, max_tokens, seed
        self.loop = asyncio.new_event_loop()
        self.engine = None
        self.generate_s = 0.0

    def _make_engine(self):
        from drtriton_ray.models import ModelError

        try:
            if self.kind == "vllm":
                from drtriton_ray.rollout.vllm_engine import VLLMEngine

                return VLLMEngine(str(self.model_dir), max_model_len=self.context, kv_cache_bytes=None, seed=self.seed)
            from drtriton_ray.rollout.hf_engine import HFEngine

            if str(self.device).startswith("cuda"):
                # as eval-model --static-cache and the RL job decode: bf16, decoding steps as CUDA graphs (eager fp32
                # decoding of a 135M model is bound by launches, ~115 ms a token: 1-2 minutes an answer)
                length = min(self.context, 1024 + self.max_tokens)  # the fragments' prompts are well under 1024
                return HFEngine(str(self.model_dir), "bf16", self.device, static_cache=True, max_model_len=length)
            return HFEngine(str(self.model_dir), "fp32", self.device)
        except OSError as e:  # a folder with config and tokenizer but no weights
            raise ModelError(f"cannot load the model in {self.model_dir}: {' '.join(str(e).split())}") from None

    def ids(self, messages: list[dict]) -> Optional[list[int]]:
        """The prompt's token ids, or None when prompt and answer would not fit the model's context."""
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        return ids if len(ids) + self.max_tokens <= self.context else None

    def generate(self, prompts: list[list[int]], n: int, temperature: float, seed: int) -> list[list[str]]:
        """n answers per prompt (their texts)."""
        import time

        from drtriton_ray.rollout.engine import SamplingConfig

        if not prompts or n < 1:
            return [[] for _ in prompts]
        t0 = time.perf_counter()
        self._ensure_engine()
        cfg = SamplingConfig(n=n, temperature=temperature, max_tokens=self.max_tokens, seed=seed)
        groups = self.loop.run_until_complete(self.engine.generate(prompts, cfg))
        self.generate_s += time.perf_counter() - t0
        return [[s.text for s in g] for g in groups]

    async def _build(self):
        return self._make_engine()

    def _ensure_engine(self) -> None:
        self.loop.run_until_complete(asyncio.sleep(0))  # the engine's queues belong to this loop
        if self.engine is None:
            self.engine = self.loop.run_until_complete(self._build())

    def warm(self) -> None:
        """Load the model and, with the static cache, compile its decoding step now (a minute or more on a GPU),
        so that no search's budget pays for it: a long-lived caller (the service's Policy replica) does this once."""
        from drtriton_ray.rollout.engine import SamplingConfig

        self._ensure_engine()
        warmup = getattr(self.engine, "warmup", None)
        if warmup is not None:
            self.loop.run_until_complete(warmup(SamplingConfig(n=1, temperature=0.0, max_tokens=2)))

    def close(self) -> None:
        if self.engine is not None:
            self.loop.run_until_complete(self.engine.shutdown())
            self.engine = None
        self.loop.close()


def _seed(seed: int, *parts) -> int:
    """A sampling seed fixed by the search's seed and what is sampled: the same run, the same answers."""
    digest = hashlib.sha256("/".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def extracted(source: str, stats: SourceStats, fragments, texts, parents=None) -> list[Candidate]:
    """The modules in the model's answers (answer j of fragment i in texts[i][j]); the others counted."""
    from drtriton_ray.prompts import extract_code

    out = []
    for i, (f, answers) in enumerate(zip(fragments, texts)):
        for j, text in enumerate(answers):
            ex = extract_code(text)
            if not ex.ok:
                stats.fail(f"answer without a module: {ex.failure.value}")
                continue
            note = "greedy" if j == 0 else f"sample {j}"
            out.append(Candidate(f.hash, source, ex.code, note, parents[i] if parents else ""))
    stats.proposed += len(out)
    return out


class ModelSource:
    """The policy model: per fragment 1 greedy answer and samples - 1 sampled ones."""

    name = "model"

    def __init__(self, policy: PolicyModel, samples: int = 4, seed: int = 0):
        self.policy, self.samples, self.seed = policy, samples, seed
        self.stats = SourceStats()

    def propose(self, fragments, budget, history=()) -> list[Candidate]:
        from drtriton_ray.prompts import build_messages

        per = max(1, self.samples)
        # the budget counts candidates: as many fragments as get all their samples, and at least one
        chosen = list(fragments[: max(budget.candidates // per, min(1, budget.candidates))])
        prompts, kept = [], []
        for f in chosen:
            self.stats.asked += 1
            ids = self.policy.ids(build_messages(f.source))
            if ids is None:
                self.stats.fail("prompt too long for the model's context")
                continue
            prompts.append(ids)
            kept.append(f)
        greedy = self.policy.generate(prompts, 1, 0.0, _seed(self.seed, "greedy"))
        sampled = self.policy.generate(prompts, per - 1, SAMPLED_TEMPERATURE, _seed(self.seed, "sampled"))
        texts = [g + s for g, s in zip(greedy, sampled)]
        return extracted(self.name, self.stats, kept, texts)


NOT_ABOUT_THE_CANDIDATE = ("bad_problem", "verifier_limit")


def feedback(outcome: VerdictSummary) -> str:
    """The second turn's message: what the verifier found, and the speed where it was measured."""
    if not outcome.correct:
        return (
            f"The verifier rejected your module: {outcome.status}: {outcome.reason}\n"
            "Fix the module. Reply with the complete corrected module in one python block."
        )
    if outcome.candidate_ms is None:
        return "Your module is correct. Make it faster. Reply with the complete module in one python block."
    speeds = [f"your kernels {outcome.candidate_ms:.4f} ms"]
    speeds += [f"PyTorch eager {outcome.eager_ms:.4f} ms"] if outcome.eager_ms else []
    speeds += [f"torch.compile {outcome.compile_ms:.4f} ms"] if outcome.compile_ms else []
    return (
        f"Your module is correct; measured: {', '.join(speeds)}. Make it faster (fuse, tile, fewer launches). "
        "Reply with the complete module in one python block."
    )


def needs_refining(outcome: VerdictSummary) -> bool:
    if outcome.status in NOT_ABOUT_THE_CANDIDATE:
        return False
    if not outcome.correct:
        return True
    best_ref = min([ms for ms in (outcome.eager_ms, outcome.compile_ms) if ms] or [0.0])
    return outcome.candidate_ms is not None and outcome.candidate_ms >= best_ref


class RefineSource:
    """The model again, on its own answer: a second turn with the previous candidate and its verdict. Per
    fragment, the model's best attempt (the fastest correct one, else its greedy failure) if it can improve."""

    name = "refine"

    def __init__(self, policy: PolicyModel, seed: int = 0):
        self.policy, self.seed = policy, seed
        self.stats = SourceStats()
        self.refined: set[str] = set()  # candidate ids already refined: one second turn each

    def pick(self, fragment: Fragment, history: Sequence[Attempt]) -> Optional[Attempt]:
        mine = [a for a in history if a.candidate.fragment == fragment.hash and a.candidate.source in MODEL_SOURCES]
        mine = [a for a in mine if a.candidate.id not in self.refined and needs_refining(a.outcome)]
        correct = [a for a in mine if a.outcome.correct]
        if correct:
            return min(correct, key=lambda a: a.outcome.candidate_ms or float("inf"))
        return mine[0] if mine else None

    def propose(self, fragments, budget, history=()) -> list[Candidate]:
        from drtriton_ray.prompts import build_messages, format_answer

        prompts, kept, parents = [], [], []
        for f in fragments:
            if len(kept) >= budget.candidates:
                break
            chosen = self.pick(f, history)
            if chosen is None:
                continue
            self.stats.asked += 1
            self.refined.add(chosen.candidate.id)
            messages = build_messages(f.source) + [
                {"role": "assistant", "content": format_answer(chosen.candidate.code)},
                {"role": "user", "content": feedback(chosen.outcome)},
            ]
            ids = self.policy.ids(messages)
            if ids is None:
                self.stats.fail("prompt too long for the model's context")
                continue
            prompts.append(ids)
            kept.append(f)
            parents.append(chosen.candidate.id)
        texts = self.policy.generate(prompts, 1, 0.0, _seed(self.seed, "refine", len(self.refined)))
        return extracted(self.name, self.stats, kept, texts, parents)


# -- launch configurations -----------------------------------------------------------------------------------
BLOCK_RANGE = (16, 8192)
# (block scale, num_warps, num_stages) per variant, tried in this order
CONFIG_VARIANTS = ((2.0, None, None), (0.5, None, None), (1.0, 8, None), (1.0, 2, None), (1.0, None, 3), (2.0, 8, 3))


def _is_launch(node: ast.AST) -> bool:
    """`kernel[grid](...)`: a call of a subscript."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)


def _int_const(node) -> Optional[int]:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _is_cdiv(node: ast.AST) -> bool:
    f = node.func if isinstance(node, ast.Call) else None
    return (isinstance(f, ast.Attribute) and f.attr == "cdiv") or (isinstance(f, ast.Name) and f.id == "cdiv")


def block_sizes(tree: ast.Module) -> set[int]:
    """The literal block sizes the module launches with: `BLOCK*=<int>` keywords of its launches."""
    return {
        v
        for node in ast.walk(tree)
        if _is_launch(node)
        for kw in node.keywords
        if kw.arg and kw.arg.upper().startswith("BLOCK") and (v := _int_const(kw.value)) is not None
    }


def _set_launch_option(launch: ast.Call, name: str, value: int) -> None:
    """`name=value` on a launch. Where the launch also passes a dict (`**meta`, which may hold the option: the
    lowering's tuned configs carry num_warps), the option goes into the last one, `**{**meta, name: value}`: a
    keyword beside a dict that holds it is a TypeError at launch (got multiple values)."""
    launch.keywords = [kw for kw in launch.keywords if kw.arg != name]
    splats = [kw for kw in launch.keywords if kw.arg is None]
    if splats:
        last = splats[-1]
        last.value = ast.Dict(keys=[None, ast.Constant(name)], values=[last.value, ast.Constant(value)])
    else:
        launch.keywords.append(ast.keyword(name, ast.Constant(value)))


class _Rescale(ast.NodeTransformer):
    """Every occurrence of the block literals that must agree: launch keywords `BLOCK*=v`, `cdiv(n, v)` grid
    divisors, `BLOCK* = v` assignments and `BLOCK*: tl.constexpr = v` defaults; and the launches' num_warps /
    num_stages set."""

    def __init__(self, mapping: dict[int, int], warps: Optional[int], stages: Optional[int]):
        self.mapping, self.warps, self.stages = mapping, warps, stages

    def _swap(self, node):
        v = _int_const(node)
        return ast.Constant(self.mapping[v]) if v in self.mapping else node

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        if _is_cdiv(node) and len(node.args) == 2:
            node.args[1] = self._swap(node.args[1])
        if _is_launch(node):
            for kw in node.keywords:
                if kw.arg and kw.arg.upper().startswith("BLOCK"):
                    kw.value = self._swap(kw.value)
            for name, value in (("num_warps", self.warps), ("num_stages", self.stages)):
                if value is not None:
                    _set_launch_option(node, name, value)
        return node

    def visit_Assign(self, node: ast.Assign):
        if any(isinstance(t, ast.Name) and t.id.upper().startswith("BLOCK") for t in node.targets):
            node.value = self._swap(node.value)
        return node

    def visit_arguments(self, node: ast.arguments):
        params = node.posonlyargs + node.args
        for i, default in enumerate(node.defaults):
            if params[len(params) - len(node.defaults) + i].arg.upper().startswith("BLOCK"):
                node.defaults[i] = self._swap(default)
        return node


# The reference lowering's calls that take a launch `config` (lower/tuning.py), and the kernel it configures.
CONFIGURED_CALLS = {
    **dict.fromkeys(("reduce_dim", "reduce_setup"), "reduce_kernel"),
    **dict.fromkeys(("along_dim", "along_setup"), "along_dim_kernel"),
    **dict.fromkeys(("layer_norm", "rms_norm", "group_norm", "instance_norm", "row_norm_setup"), "row_norm_kernel"),
    **dict.fromkeys(("row_norm_persistent", "row_norm_persistent_setup"), "row_norm_persistent_kernel"),
    **dict.fromkeys(("batch_norm", "batch_norm_setup"), "batch_norm_kernel"),
    **dict.fromkeys(("split_norm", "split_norm_setup"), "split_norm"),
    **dict.fromkeys(("matmul", "linear", "matmul_setup", "linear_setup"), "matmul_kernel"),
    **dict.fromkeys(("conv", "conv_setup"), "conv_kernel"),
    **dict.fromkeys(("conv_small", "conv_small_setup"), "conv_small_kernel"),
    **dict.fromkeys(("pool", "pool_setup"), "pool_rows_kernel"),
}


class _Configure(ast.NodeTransformer):
    """`config=<dict>` on every call of one configured function outside the lowering's own library functions (in
    ModelNew.forward and the generated fused wrappers: where the emitter puts a tuned config)."""

    def __init__(self, function: str, config: dict, library: set):
        self.function, self.config, self.library = function, config, library

    def visit_FunctionDef(self, node):
        return node if node.name in self.library else self.generic_visit(node)

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == self.function:
            node.keywords = [k for k in node.keywords if k.arg != "config"]
            node.keywords.append(ast.keyword("config", ast.parse(repr(self.config), mode="eval").body))
        return node


def setup_variants(code: str, n: int) -> list[tuple[str, str]]:
    """Up to n variants of a lowering candidate with other tile sizes, warps and stages for its configured kernels
    (lower/tuning.py's candidates): the per-shape tuning, done by the search with the verifier's timings."""
    from drtriton_ray.lower import tuning
    from drtriton_ray.lower.library import LIBRARY

    tree = ast.parse(code)
    library = {f.name for f in tree.body if isinstance(f, ast.FunctionDef) and f.name in LIBRARY}
    calls = {c.func.id for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
    per_call = [
        [(fn, config) for config in tuning.candidates(CONFIGURED_CALLS[fn], None)]
        for fn in sorted(calls & CONFIGURED_CALLS.keys())
        if _called_outside(tree, fn, library)
    ]
    options = [o for round_ in itertools.zip_longest(*per_call) for o in round_ if o is not None]  # each kernel in turn
    out = []
    for fn, config in options[:n]:
        variant = ast.unparse(_Configure(fn, config, library).visit(ast.parse(code)))
        out.append((variant, f"{CONFIGURED_CALLS[fn]} {config}"))
    return out


def _called_outside(tree: ast.Module, function: str, library: set) -> bool:
    for f in ast.walk(tree):
        if isinstance(f, ast.FunctionDef) and f.name not in library:
            if any(isinstance(c, ast.Call) and getattr(c.func, "id", None) == function for c in ast.walk(f)):
                return True
    return False


def config_variants(code: str, n: int = 3) -> list[tuple[str, str]]:
    """Up to n (code, note) launch-config variants of a Triton module, each different from it and from the
    others: the lowering's configured kernels first (tile sizes), then literal block sizes, warps and stages of
    its launches; none where the module has no launch."""
    tree = ast.parse(code)
    if not any(_is_launch(node) for node in ast.walk(tree)):
        return []
    blocks = block_sizes(tree)
    seen, out = {ast.unparse(tree)}, []
    for variant, note in setup_variants(code, n):
        if variant not in seen:
            seen.add(variant)
            out.append((variant, note))
    if len(out) >= n:
        return out[:n]
    for scale, warps, stages in CONFIG_VARIANTS:
        mapping = {b: int(b * scale) for b in blocks if BLOCK_RANGE[0] <= b * scale <= BLOCK_RANGE[1]}
        if scale != 1.0 and not mapping:
            continue
        variant = ast.unparse(_Rescale(mapping, warps, stages).visit(ast.parse(code)))
        if variant in seen:
            continue
        seen.add(variant)
        parts = [f"BLOCK x{scale:g}"] if scale != 1.0 else []
        parts += [f"num_warps={warps}"] if warps else []
        parts += [f"num_stages={stages}"] if stages else []
        out.append((variant, ", ".join(parts)))
        if len(out) >= n:
            break
    return out


class ConfigSource:
    """Launch-config variants of each fragment's fastest verified candidate (of any source)."""

    name = "configs"

    def __init__(self, variants: int = 3):
        self.variants = variants
        self.stats = SourceStats()
        self.varied: set[str] = set()

    def propose(self, fragments, budget, history=()) -> list[Candidate]:
        out = []
        for f in fragments:
            correct = [
                a
                for a in history
                if a.candidate.fragment == f.hash and a.outcome.correct and a.candidate.id not in self.varied
            ]
            if not correct or len(out) >= budget.candidates:
                continue
            best = min(correct, key=lambda a: a.outcome.candidate_ms or float("inf"))
            self.stats.asked += 1
            self.varied.add(best.candidate.id)
            try:
                variants = config_variants(best.candidate.code, self.variants)
            except (SyntaxError, ValueError):
                variants = []
            if not variants:
                self.stats.fail("no literal launch configuration to vary")
            out += [Candidate(f.hash, self.name, code, note, best.candidate.id) for code, note in variants]
        out = out[: max(budget.candidates, 0)]
        self.stats.proposed += len(out)
        return out
