"""`drtriton eval-model`, registered on the main app by `register(app)`: held-out programs, K answers each from a
model folder, verified on a local worker pool, a table and a JSON report. Every bad input is one line, exit 2.

The options' constraints are declared once, in `EvalModelOptions`; `options_error` turns pydantic's complaints into
the messages the command prints (`--level must be >= 1, got 0`, `unknown --engine 'x'; known: hf, vllm`). pydantic
travels to the GPU machine with the pipeline's wheels (bench/gpu_pack.sh), as the rest of the CLI needs it there."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
from pathlib import Path
from typing import Annotated, Callable, Iterable, Optional

import typer
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError
from rich.table import Table

from drtriton_ray.cli_common import err, fail, out

ENGINES = ("hf", "vllm")
DEVICES = ("cpu", "cuda")
MODEL_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
# Greedy for one answer (the reproducible pass@1); for K > 1, Chen et al. (2021)'s choice for pass@k at small k.
SAMPLED_TEMPERATURE = 0.8
# Verifier processes when --workers is not given: on cuda, candidates are timed one at a time.
DEFAULT_WORKERS = {"cpu": 2, "cuda": 1}


def _one_of(known: Callable[[], Iterable[str]]) -> AfterValidator:
    """A constraint: the value is one of KNOWN()'s names. KNOWN is called when a value is checked, so that the size
    profiles and baselines are imported when eval-model runs, not whenever `drtriton` starts."""

    def check(value: str) -> str:
        names = list(known())
        if value not in names:
            raise PydanticCustomError(
                "unknown_choice", "unknown value {value}; known: {known}", {"value": value, "known": ", ".join(names)}
            )
        return value

    return AfterValidator(check)


def _profiles():
    from drtriton_ray.synth.config import PROFILES

    return PROFILES


def _baselines():
    from drtriton_ray.verify.metrics import BASELINES

    return BASELINES


class EvalModelOptions(BaseModel):
    """`drtriton eval-model`'s options with their constraints. A field's flag is `--` and its name with dashes,
    unless the field names its own (`json_schema_extra={"flag": ...}`). After validation, `temperature` and
    `workers` hold the values used (their defaults depend on other options)."""

    model_config = ConfigDict(extra="forbid")

    model: Path
    level: int = Field(ge=1)
    count: int = Field(ge=1)
    samples: int = Field(1, ge=1)
    temperature: Optional[float] = Field(None, ge=0)
    max_tokens: int = Field(1024, ge=1)
    engine: Annotated[str, _one_of(lambda: ENGINES)] = "hf"
    device: Annotated[str, _one_of(lambda: DEVICES)] = "cpu"
    dtype: Annotated[str, _one_of(lambda: MODEL_DTYPES)] = "fp32"
    static_cache: bool = False
    profile: Annotated[str, _one_of(_profiles)] = "small"
    baseline: Annotated[str, _one_of(_baselines)] = "eager"
    workers: Optional[int] = Field(None, ge=1)
    timeout: float = Field(300.0, gt=0)
    timing: bool = True
    seed: int = 0
    out_path: Optional[Path] = Field(None, json_schema_extra={"flag": "--out"})

    @model_validator(mode="after")
    def _defaults_and_combinations(self):
        if self.temperature is None:
            self.temperature = 0.0 if self.samples == 1 else SAMPLED_TEMPERATURE
        if self.workers is None:
            self.workers = DEFAULT_WORKERS[self.device]
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(
                f"--samples {self.samples} at --temperature 0 gives {self.samples} copies of the greedy "
                "answer; use --temperature > 0"
            )
        if self.static_cache and self.engine != "hf":
            raise ValueError("--static-cache is an option of --engine hf (vLLM manages its own cache and CUDA graphs)")
        return self


def flag(name: str) -> str:
    """The command-line flag of EvalModelOptions' field NAME."""
    extra = EvalModelOptions.model_fields[name].json_schema_extra or {}
    return extra.get("flag") or "--" + name.replace("_", "-")


# pydantic's error types -> the command's messages; any other type prints pydantic's own message after the flag
_MESSAGES = {
    "greater_than_equal": "{flag} must be >= {ge:g}, got {input}",
    "greater_than": "{flag} must be > {gt:g}, got {input}",
    "unknown_choice": "unknown {flag} {input!r}; known: {known}",
}


def options_error(e: ValidationError) -> str:
    """EvalModelOptions' ValidationError as one line, each problem named by its flag."""
    parts = []
    for x in e.errors():
        if not x["loc"]:  # a check across options: its message names them
            parts.append(x["msg"].removeprefix("Value error, "))
            continue
        template = _MESSAGES.get(x["type"], "{flag}: {msg}")
        parts.append(
            template.format(
                **{**x.get("ctx", {}), "flag": flag(str(x["loc"][0])), "input": x["input"], "msg": x["msg"]}
            )
        )
    return "; ".join(parts)


def register(app: typer.Typer) -> None:
    app.command("eval-model")(eval_model_cmd)


def _deterministic_compile() -> None:
    """Greedy answers of one model can differ between two evaluations on a GPU with the static cache (docs/eval.md;
    the cause is not established). One candidate: Inductor compiles the decoding step and picks some kernels by
    timing candidates on the device; another pick sums in another order, and bf16 greedy decoding follows the
    rounding. Inductor's deterministic mode skips that timing wherever it would change numerics."""
    import torch._inductor.config as inductor

    if hasattr(inductor, "deterministic"):
        inductor.deterministic = True
    else:
        err.print("warning: this torch's Inductor has no deterministic mode: greedy answers may differ between runs")


class _LazyPool:
    """The verifier pool, started on the first batch with something to verify: a model that writes no code (a
    fresh tiny model) never pays for worker start-up."""

    def __init__(self, device: str, size: int, timeout_s: float):
        self.device, self.size, self.timeout_s = device, size, timeout_s
        self.pool = None

    def __call__(self, tasks):
        from drtriton_ray.verify import Limits, WorkerPool

        if self.pool is None:
            self.pool = WorkerPool(
                self.device, size=self.size, limits=Limits(task_timeout_s=self.timeout_s), name=f"eval-{self.device}"
            )
        return self.pool.verify(tasks)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def _context_length(model_dir: Path, tokenizer) -> int:
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    return int(config.get("max_position_embeddings") or tokenizer.model_max_length)


def _fmt(x: Optional[float], suffix: str = "x") -> str:
    return "n/a" if x is None else f"{x:.2f}{suffix}"


def _print_report(report, title: str) -> None:
    table = Table(title=title)
    table.add_column("problem", no_wrap=True)
    for col in ("ops", "correct", "outcomes", "best vs eager", "best vs compile"):
        table.add_column(col)
    for p in report.problems:
        table.add_row(
            p.id,
            ",".join(p.ops),
            f"{p.correct}/{p.samples}",
            ", ".join(f"{k} {v}" for k, v in sorted(p.outcomes.items())),
            _fmt(p.best_speedup_vs_eager),
            _fmt(p.best_speedup_vs_compile),
        )
    out.print(table)
    totals = Table(title="totals")
    totals.add_column("measure")
    totals.add_column("value", justify="right")
    totals.add_row("pass@1", f"{report.pass_at_1:.3f}")
    if report.samples > 1:
        totals.add_row(f"pass@{report.samples}", f"{report.pass_at_k:.3f}")
    totals.add_row("answers (correct)", f"{report.answers} ({report.correct_answers})")
    for name, count in report.outcomes.items():
        fine = ", ".join(f"{k} {v}" for k, v in sorted(report.details.get(name, {}).items()) if k != name)
        totals.add_row(f"  {name}" + (f" ({fine})" if fine else ""), str(count))
    for base in ("eager", "compile"):
        totals.add_row(
            f"speedup vs {base}: mean / geomean (correct answers)",
            f"{_fmt(getattr(report, f'mean_speedup_vs_{base}'))} / "
            f"{_fmt(getattr(report, f'geomean_speedup_vs_{base}'))}",
        )
        totals.add_row(
            f"speedup vs {base}: geomean of best, all problems",
            _fmt(getattr(report, f"geomean_best_speedup_vs_{base}")),
        )
    totals.add_row("tokens generated (answers cut at max tokens)", f"{report.tokens_generated} ({report.truncated})")
    totals.add_row("generating / verifying", f"{report.generate_s:.1f} s / {report.verify_s:.1f} s")
    if report.unjudged:
        totals.add_row(
            "problems left out: the verifier could not judge them",
            f"{len(report.unjudged)} ({', '.join(sorted({u['status'] for u in report.unjudged}))})",
        )
    out.print(totals)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def eval_model_cmd(
    model: Path = typer.Option(..., "--model", "-m", help="Hugging Face model folder (drtriton prepare-model)"),
    level: int = typer.Option(..., "--level", "-l", help="operators per held-out program (>= 1)"),
    count: int = typer.Option(..., "--count", "-n", help="held-out programs (the first COUNT of the stream)"),
    samples: int = typer.Option(1, "--samples", "-k", help="answers per program (K of pass@K)"),
    temperature: Optional[float] = typer.Option(
        None, "--temperature", help=f"default: 0 (greedy) for K = 1, {SAMPLED_TEMPERATURE} for K > 1"
    ),
    max_tokens: int = typer.Option(1024, "--max-tokens", help="answer length limit (tokens)"),
    engine: str = typer.Option("hf", "--engine", help="hf (transformers, everywhere) or vllm"),
    device: str = typer.Option(
        "cpu", "--device", help="cpu (interpreter, no timing) or cuda: generation and verification"
    ),
    dtype: str = typer.Option("fp32", "--dtype", help="model weights: fp32 or bf16"),
    static_cache: bool = typer.Option(
        False, "--static-cache", help="hf engine: static KV cache (on a GPU, decoding compiles into CUDA graphs)"
    ),
    profile: str = typer.Option("small", "--profile", help="program sizes: small (CPU interpreter) or paper"),
    baseline: str = typer.Option(
        "eager", "--baseline", help="what correct_faster/slower compare with: eager or compile"
    ),
    workers: Optional[int] = typer.Option(
        None,
        "--workers",
        help="verifier processes (default: 2 on cpu, 1 on cuda, where candidates are timed one at a time)",
    ),
    timeout: float = typer.Option(300.0, "--timeout", help="seconds per verification before the candidate is killed"),
    timing: bool = typer.Option(
        True,
        "--timing/--no-timing",
        help="cuda: time correct answers against eager and "
        "torch.compile, one at a time; --no-timing judges correctness alone (pass@K), "
        "without speedups, in a fraction of the time",
    ),
    seed: int = typer.Option(
        0,
        "--seed",
        help="sampling seed; also fixes each answer's verifier trial inputs, so "
        "an answer gets the same verdict in every evaluation",
    ),
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="JSON report to write"),
):
    """Pass@1, pass@K, answer outcomes and speedups of a model on held-out synthesized programs."""
    from drtriton_ray.eval.heldout import HELDOUT_SEED

    opts = checked_options(
        dict(
            model=model,
            level=level,
            count=count,
            samples=samples,
            temperature=temperature,
            max_tokens=max_tokens,
            engine=engine,
            device=device,
            dtype=dtype,
            static_cache=static_cache,
            profile=profile,
            baseline=baseline,
            workers=workers,
            timeout=timeout,
            timing=timing,
            seed=seed,
            out_path=out_path,
        )
    )
    _check_machine(opts)
    tokenizer = _load_tokenizer(opts)
    problems, max_model_len = _heldout(opts, tokenizer)
    err.print(
        f"{count} held-out programs (stream seed {HELDOUT_SEED}, level {level}, profile {profile}), "
        f"{samples} answer(s) each at temperature {opts.temperature:g}, engine {engine} on {device}"
    )
    report = _evaluate(opts, tokenizer, problems, max_model_len)
    _print_report(report, f"{model.name}: level {level}, {count} held-out programs x {samples}")
    if out_path is not None:
        _write_report(opts, report)


def checked_options(values: dict) -> EvalModelOptions:
    """The options, or one line naming what is wrong with them and exit 2."""
    try:
        return EvalModelOptions(**values)
    except ValidationError as e:
        fail(options_error(e))


def _check_machine(opts: EvalModelOptions) -> None:
    """What the options ask of this machine: a CUDA device, vLLM."""
    if opts.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            fail("--device cuda asked for, but this machine has no CUDA device")
    if opts.engine == "vllm" and importlib.util.find_spec("vllm") is None:
        fail("--engine vllm asked for, but vllm is not installed here; use --engine hf")


def _load_tokenizer(opts: EvalModelOptions):
    """The model folder's tokenizer (it must have a chat template); the report's folder checked before any work."""
    from drtriton_ray.models import ModelError, load_tokenizer
    from drtriton_ray.synth.dataset import check_writable

    try:
        tokenizer = load_tokenizer(opts.model)
    except ModelError as e:
        fail(str(e))
    if not tokenizer.chat_template:
        fail(f"{opts.model} has no chat template, so the prompts cannot be rendered")
    if opts.out_path is not None:
        try:
            check_writable(opts.out_path)
        except ValueError as e:
            fail(str(e))
    return tokenizer


def _heldout(opts: EvalModelOptions, tokenizer) -> tuple[list, int]:
    """The held-out programs and the engine's context length (longest prompt + --max-tokens), which must fit the
    model's."""
    from drtriton_ray.eval.heldout import heldout_programs
    from drtriton_ray.eval.policy import prompt_ids
    from drtriton_ray.synth.sampler import SynthesisError

    try:
        problems = heldout_programs(opts.level, opts.count, opts.profile)
    except (SynthesisError, ValueError) as e:
        fail(f"cannot synthesize held-out programs: {e}")
    longest = max(len(prompt_ids(tokenizer, p.source)) for p in problems)
    context = _context_length(opts.model, tokenizer)
    if longest + opts.max_tokens > context:
        fail(
            f"the longest prompt ({longest} tokens) plus --max-tokens {opts.max_tokens} exceeds the model's context "
            f"of {context} tokens"
        )
    return problems, longest + opts.max_tokens


def _make_engine(opts: EvalModelOptions, max_model_len: int):
    from drtriton_ray.models import ModelError

    try:
        if opts.engine == "vllm":
            from drtriton_ray.rollout.vllm_engine import VLLMEngine

            # CPU: a small explicit KV cache (vLLM-CPU otherwise reserves a share of host memory); GPU: vLLM sizes
            # the cache itself
            return VLLMEngine(
                str(opts.model),
                dtype=MODEL_DTYPES[opts.dtype],
                max_model_len=max_model_len,
                kv_cache_bytes=256 << 20 if opts.device == "cpu" else None,
                seed=opts.seed,
            )
        from drtriton_ray.rollout.hf_engine import HFEngine

        if opts.static_cache and opts.device == "cuda":
            _deterministic_compile()
        return HFEngine(
            str(opts.model), opts.dtype, opts.device, static_cache=opts.static_cache, max_model_len=max_model_len
        )
    except OSError as e:  # e.g. a folder with config and tokenizer but no weights
        raise ModelError(f"cannot load the model in {opts.model}: {' '.join(str(e).split())}") from None


async def _generate_and_verify(opts: EvalModelOptions, tokenizer, problems, verify, max_model_len: int):
    from drtriton_ray.eval.policy import evaluate

    engine = _make_engine(opts, max_model_len)  # built in the event loop that then drives it
    try:
        return await evaluate(
            engine,
            tokenizer,
            problems,
            verify,
            **opts.model_dump(include={"samples", "temperature", "max_tokens", "seed", "baseline", "timing"}),
        )
    finally:
        await engine.shutdown()


def _evaluate(opts: EvalModelOptions, tokenizer, problems, max_model_len: int):
    """The report of the model's answers; a model that cannot load, a verifier that cannot start or nothing judged
    is one line, exit 2."""
    from drtriton_ray.eval.policy import NothingJudged
    from drtriton_ray.models import ModelError
    from drtriton_ray.verify import PoolError

    verify = _LazyPool(opts.device, opts.workers, opts.timeout)
    try:
        return asyncio.run(_generate_and_verify(opts, tokenizer, problems, verify, max_model_len))
    except ModelError as e:
        fail(str(e))
    except PoolError as e:
        fail(f"cannot start a verifier worker: {e}")
    except NothingJudged as e:
        fail(str(e))
    finally:
        verify.close()


def _write_report(opts: EvalModelOptions, report) -> None:
    from drtriton_ray.eval.heldout import HELDOUT_SEED

    _write_atomic(
        opts.out_path,
        json.dumps(
            {
                "model": str(opts.model),
                "level": opts.level,
                "profile": opts.profile,
                "engine": opts.engine,
                "device": opts.device,
                "dtype": opts.dtype,
                "timing": opts.timing and opts.device == "cuda",
                "heldout_seed": HELDOUT_SEED,
                **report.to_dict(),
            },
            indent=1,
        ),
    )
    err.print(f"wrote {opts.out_path}")
