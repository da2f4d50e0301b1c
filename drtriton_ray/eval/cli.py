"""`drtriton eval-model`, registered on the main app by `register(app)`: held-out programs, K answers each from a
model folder, verified on a local worker pool, a table and a JSON report. Every bad input is one line, exit 2."""
from __future__ import annotations

import asyncio
import importlib.util
import json
import os
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

ENGINES = ("hf", "vllm")
DEVICES = ("cpu", "cuda")
MODEL_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
# Greedy for one answer (the reproducible pass@1); for K > 1, Chen et al. (2021)'s choice for pass@k at small k.
SAMPLED_TEMPERATURE = 0.8


def register(app: typer.Typer) -> None:
    app.command("eval-model")(eval_model_cmd)


def _deterministic_compile() -> None:
    """The same SFT model evaluated twice on an H100 (static cache) gave 40 of 201 answers of other lengths
    (docs/eval.md), cause not found. One candidate: Inductor compiles the decoding step and picks some kernels by
    timing candidates on the device; another pick sums in another order, and bf16 greedy decoding follows the
    rounding. Its deterministic mode skips the timing wherever it changes numerics (not yet measured on the H100)."""
    import torch._inductor.config as inductor
    from drtriton_ray.cli import err
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
            self.pool = WorkerPool(self.device, size=self.size, limits=Limits(task_timeout_s=self.timeout_s),
                                   name=f"eval-{self.device}")
        return self.pool.map(tasks)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def _context_length(model_dir: Path, tokenizer) -> int:
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    return int(config.get("max_position_embeddings") or tokenizer.model_max_length)


def _fmt(x: Optional[float], suffix: str = "x") -> str:
    return "n/a" if x is None else f"{x:.2f}{suffix}"


def _print_report(report, title: str) -> None:
    from drtriton_ray.cli import out
    table = Table(title=title)
    table.add_column("problem", no_wrap=True)
    for col in ("ops", "correct", "outcomes", "best vs eager", "best vs compile"):
        table.add_column(col)
    for p in report.problems:
        table.add_row(p.id, ",".join(p.ops), f"{p.correct}/{p.samples}",
                      ", ".join(f"{k} {v}" for k, v in sorted(p.outcomes.items())),
                      _fmt(p.best_speedup_vs_eager), _fmt(p.best_speedup_vs_compile))
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
        totals.add_row(f"speedup vs {base}: mean / geomean (correct answers)",
                       f"{_fmt(getattr(report, f'mean_speedup_vs_{base}'))} / "
                       f"{_fmt(getattr(report, f'geomean_speedup_vs_{base}'))}")
        totals.add_row(f"speedup vs {base}: geomean of best, all problems",
                       _fmt(getattr(report, f"geomean_best_speedup_vs_{base}")))
    totals.add_row("tokens generated (answers cut at max tokens)", f"{report.tokens_generated} ({report.truncated})")
    totals.add_row("generating / verifying", f"{report.generate_s:.1f} s / {report.verify_s:.1f} s")
    if report.unjudged:
        totals.add_row("problems left out: the verifier could not judge them",
                       f"{len(report.unjudged)} ({', '.join(sorted({u['status'] for u in report.unjudged}))})")
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
        None, "--temperature", help=f"default: 0 (greedy) for K = 1, {SAMPLED_TEMPERATURE} for K > 1"),
    max_tokens: int = typer.Option(1024, "--max-tokens", help="answer length limit (tokens)"),
    engine_name: str = typer.Option("hf", "--engine", help="hf (transformers, everywhere) or vllm"),
    device: str = typer.Option("cpu", "--device", help="cpu (interpreter, no timing) or cuda: generation and "
                                                      "verification"),
    dtype: str = typer.Option("fp32", "--dtype", help="model weights: fp32 or bf16"),
    static_cache: bool = typer.Option(False, "--static-cache", help="hf engine: static KV cache (on a GPU, "
                                                                    "decoding compiles into CUDA graphs)"),
    profile: str = typer.Option("small", "--profile", help="program sizes: small (CPU interpreter) or paper"),
    baseline: str = typer.Option("eager", "--baseline", help="what correct_faster/slower compare with: "
                                                            "eager or compile"),
    workers: Optional[int] = typer.Option(None, "--workers", help="verifier processes (default: 2 on cpu, 1 on "
                                                                  "cuda, where candidates are timed one at a time)"),
    timeout: float = typer.Option(300.0, "--timeout", help="seconds per verification before the candidate is killed"),
    timing: bool = typer.Option(True, "--timing/--no-timing", help="cuda: time correct answers against eager and "
                                "torch.compile, one at a time; --no-timing judges correctness alone (pass@K), "
                                "without speedups, in a fraction of the time"),
    seed: int = typer.Option(0, "--seed", help="sampling seed; also fixes each answer's verifier trial inputs, so "
                                               "an answer gets the same verdict in every evaluation"),
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="JSON report to write"),
):
    """Pass@1, pass@K, answer outcomes and speedups of a model on held-out synthesized programs."""
    from drtriton_ray.cli import err, fail
    from drtriton_ray.eval.heldout import HELDOUT_SEED, heldout_programs
    from drtriton_ray.eval.policy import NothingJudged, evaluate, prompt_ids
    from drtriton_ray.models import ModelError, load_tokenizer
    from drtriton_ray.synth.config import PROFILES
    from drtriton_ray.synth.dataset import check_writable
    from drtriton_ray.synth.sampler import SynthesisError
    from drtriton_ray.verify import PoolError
    from drtriton_ray.verify.metrics import BASELINES

    if level < 1:
        fail(f"--level must be >= 1 (operators per program), got {level}")
    if count < 1:
        fail(f"--count must be >= 1, got {count}")
    if samples < 1:
        fail(f"--samples must be >= 1, got {samples}")
    if max_tokens < 1:
        fail(f"--max-tokens must be >= 1, got {max_tokens}")
    if temperature is None:
        temperature = 0.0 if samples == 1 else SAMPLED_TEMPERATURE
    if temperature < 0:
        fail(f"--temperature must be >= 0, got {temperature}")
    if samples > 1 and temperature == 0:
        fail(f"--samples {samples} at --temperature 0 gives {samples} copies of the greedy answer; "
             "use --temperature > 0")
    for value, known, what in ((engine_name, ENGINES, "--engine"), (device, DEVICES, "--device"),
                               (dtype, MODEL_DTYPES, "--dtype"), (profile, PROFILES, "--profile"),
                               (baseline, BASELINES, "--baseline")):
        if value not in known:
            fail(f"unknown {what} {value!r}; known: {', '.join(known)}")
    workers = workers if workers is not None else (2 if device == "cpu" else 1)
    if workers < 1:
        fail(f"--workers must be >= 1, got {workers}")
    if timeout <= 0:
        fail(f"--timeout must be > 0, got {timeout}")
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            fail("--device cuda asked for, but this machine has no CUDA device")
    if static_cache and engine_name != "hf":
        fail("--static-cache is an option of --engine hf (vLLM manages its own cache and CUDA graphs)")
    if engine_name == "vllm" and importlib.util.find_spec("vllm") is None:
        fail("--engine vllm asked for, but vllm is not installed here; use --engine hf")
    try:
        tokenizer = load_tokenizer(model)
    except ModelError as e:
        fail(str(e))
    if not tokenizer.chat_template:
        fail(f"{model} has no chat template, so the prompts cannot be rendered")
    if out_path is not None:
        try:
            check_writable(out_path)
        except ValueError as e:
            fail(str(e))

    try:
        problems = heldout_programs(level, count, profile)
    except (SynthesisError, ValueError) as e:
        fail(f"cannot synthesize held-out programs: {e}")
    longest = max(len(prompt_ids(tokenizer, p.source)) for p in problems)
    context = _context_length(model, tokenizer)
    if longest + max_tokens > context:
        fail(f"the longest prompt ({longest} tokens) plus --max-tokens {max_tokens} exceeds the model's context "
             f"of {context} tokens")

    verify = _LazyPool(device, workers, timeout)

    async def run():
        try:
            if engine_name == "vllm":
                from drtriton_ray.rollout.vllm_engine import VLLMEngine
                # CPU: a small explicit KV cache (vLLM-CPU otherwise reserves a share of host memory); GPU: vLLM's
                engine = VLLMEngine(str(model), dtype=MODEL_DTYPES[dtype], max_model_len=longest + max_tokens,
                                    kv_cache_bytes=256 << 20 if device == "cpu" else None, seed=seed)
            else:
                from drtriton_ray.rollout.hf_engine import HFEngine
                if static_cache and device == "cuda":
                    _deterministic_compile()
                engine = HFEngine(str(model), dtype, device, static_cache=static_cache,
                                  max_model_len=longest + max_tokens)
        except OSError as e:  # e.g. a folder with config and tokenizer but no weights
            raise ModelError(f"cannot load the model in {model}: {' '.join(str(e).split())}") from None
        try:
            return await evaluate(engine, tokenizer, problems, verify, samples=samples, temperature=temperature,
                                  max_tokens=max_tokens, seed=seed, baseline=baseline, timing=timing)
        finally:
            await engine.shutdown()

    err.print(f"{count} held-out programs (stream seed {HELDOUT_SEED}, level {level}, profile {profile}), "
              f"{samples} answer(s) each at temperature {temperature:g}, engine {engine_name} on {device}")
    try:
        report = asyncio.run(run())
    except ModelError as e:
        fail(str(e))
    except PoolError as e:
        fail(f"cannot start a verifier worker: {e}")
    except NothingJudged as e:
        fail(str(e))
    finally:
        verify.close()
    _print_report(report, f"{model.name}: level {level}, {count} held-out programs x {samples}")
    if out_path is not None:
        _write_atomic(out_path, json.dumps({"model": str(model), "level": level, "profile": profile,
                                            "engine": engine_name, "device": device, "dtype": dtype,
                                            "timing": timing and device == "cuda",
                                            "heldout_seed": HELDOUT_SEED, **report.to_dict()}, indent=1))
        err.print(f"wrote {out_path}")
