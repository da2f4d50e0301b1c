"""`drtriton convert`, registered on the main app by `register(app)`: a PyTorch program in, a verified Triton module
out (drtriton_ray.convert). Options are validated by `ConvertOptions` (pydantic); every bad input is one line and
exit status 2, never a traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from rich.table import Table

from drtriton_ray.cli_common import err, fail, out

DEVICES = ("cpu", "cuda")
FLAGS = {"budget_s": "--budget-s", "max_candidates": "--max-candidates", "out_path": "--out", "report": "--report"}


class ConvertOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    problem: Path
    out_path: Path
    model: Optional[Path] = None
    budget_s: float = Field(600.0, gt=0)
    max_candidates: int = Field(256, ge=1)
    device: str = "cpu"
    report: Optional[Path] = None
    workers: Optional[int] = Field(None, ge=1)
    k: int = Field(5, ge=1)
    samples: int = Field(4, ge=1)
    sources: Optional[tuple[str, ...]] = None
    seed: int = 0
    cache: Optional[str] = None
    timeout: float = Field(300.0, gt=0)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if v not in DEVICES:
            raise ValueError(f"unknown --device {v!r}; known: {', '.join(DEVICES)}")
        return v

    @field_validator("sources", mode="before")
    @classmethod
    def _sources(cls, v):
        from drtriton_ray.search.sources import SOURCES

        if v is None:
            return None
        names = tuple(s.strip() for s in v.split(",") if s.strip()) if isinstance(v, str) else tuple(v)
        unknown = [s for s in names if s not in SOURCES]
        if unknown or not names:
            raise ValueError(f"unknown --sources {', '.join(unknown) or '(none)'}; known: {', '.join(SOURCES)}")
        return names


def options_error(e: ValidationError) -> str:
    """pydantic's complaints as one line, each named by its flag."""
    parts = []
    for x in e.errors():
        name = str(x["loc"][0]) if x["loc"] else ""
        flag = FLAGS.get(name, "--" + name.replace("_", "-"))
        ctx = x.get("ctx", {})
        if x["type"] == "greater_than":
            parts.append(f"{flag} must be > {ctx['gt']:g}, got {x['input']}")
        elif x["type"] == "greater_than_equal":
            parts.append(f"{flag} must be >= {ctx['ge']:g}, got {x['input']}")
        else:
            parts.append(x["msg"].removeprefix("Value error, "))
    return "; ".join(parts)


def register(app: typer.Typer) -> None:
    app.command("convert")(convert_cmd)


def convert_cmd(
    problem: Path = typer.Argument(..., help="a PyTorch program in KernelBench format (class Model, get_inputs...)"),
    out_path: Path = typer.Option(..., "--out", "-o", help="where to write the answer (class ModelNew)"),
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="policy model folder (model, refine sources)"),
    budget_s: float = typer.Option(600.0, "--budget-s", help="wall seconds for the whole search"),
    max_candidates: int = typer.Option(256, "--max-candidates", help="candidates sent to the verifier"),
    device: str = typer.Option("cpu", "--device", help="cpu (interpreter, correctness only) or cuda (timed)"),
    report: Optional[Path] = typer.Option(None, "--report", help="write the search's JSON report here"),
    workers: Optional[int] = typer.Option(None, "--workers", help="verifier processes (default: 2 cpu, 4 cuda)"),
    k: int = typer.Option(5, "--k", help="longest fragment, in nodes"),
    samples: int = typer.Option(4, "--samples", help="model answers per fragment: 1 greedy + N-1 sampled"),
    sources: Optional[str] = typer.Option(
        None, "--sources", help="comma-separated: lowering, model, refine, configs (default: what the options allow)"
    ),
    seed: int = typer.Option(0, "--seed", help="same seed, same search"),
    cache: Optional[str] = typer.Option(None, "--cache", help="cache folder or fsspec URI (default: ~/.cache/...)"),
    no_cache: bool = typer.Option(False, "--no-cache", help="neither read nor write the cache"),
    timeout: float = typer.Option(300.0, "--timeout", help="seconds per verification before a candidate is killed"),
):
    """Convert PROBLEM into a faster verified Triton module by test-time search (docs/convert.md)."""
    values = {k_: v for k_, v in locals().items() if k_ not in ("no_cache",)}
    try:
        opts = ConvertOptions(**values)
    except ValidationError as e:
        fail(options_error(e))
    source = _read(opts.problem)
    result = _run(opts, source, None if no_cache else (opts.cache or _default_cache()))
    _write(opts.out_path, result.module_source)
    if opts.report is not None:
        _write(opts.report, json.dumps(result.to_dict()["report"], indent=1))
    _print(result.report)
    err.print(f"wrote {opts.out_path}" + (f" and {opts.report}" if opts.report else ""))


def _default_cache() -> str:
    from drtriton_ray.search.cache import DEFAULT_CACHE

    return str(DEFAULT_CACHE)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        fail(f"cannot read {path}: {e}")


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        fail(f"cannot write {path}: {e}")


def _run(opts: ConvertOptions, source: str, cache: Optional[str]):
    """The conversion with a progress bar; bad input, a program that cannot be captured or a verifier that
    cannot start is one line, exit 2."""
    from tqdm import tqdm

    from drtriton_ray.capture.errors import CaptureError
    from drtriton_ray.convert import ConversionError, convert
    from drtriton_ray.verify import PoolError

    if opts.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            fail("--device cuda asked for, but this machine has no CUDA device")
    problem = None
    # a bar only on a terminal: a log or a pipe gets the result and errors, not carriage returns
    with tqdm(
        total=opts.max_candidates, desc="convert", unit="cand", leave=False, disable=not sys.stderr.isatty()
    ) as bar:

        def progress(p) -> None:
            bar.set_description(f"{p.stage}: {p.detail}"[:60])
            if p.stage == "verify":
                bar.n = p.done
            bar.refresh()

        try:
            settings = opts.model_dump(
                include={"model", "budget_s", "max_candidates", "k", "samples", "sources", "device", "seed", "workers"}
            )
            return convert(source, cache=cache, timeout_s=opts.timeout, progress=progress, **settings)
        except (ConversionError, CaptureError) as e:
            problem = f"{opts.problem}: {e}"
        except PoolError as e:
            problem = f"cannot start a verifier worker: {e}"
    fail(problem)  # after the bar is gone: the error is the last line


def _fmt(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def _print(report) -> None:
    table = Table(title="drtriton convert")
    table.add_column("measure")
    table.add_column("value")
    table.add_row("graph", f"{report.program.get('nodes', '?')} nodes ({report.program.get('torch_nodes', 0)} Torch)")
    table.add_row("fragments", str(len(report.fragments)))
    for name, c in report.candidates.items():
        table.add_row(f"  {name}", f"{c['verified']} verified, {c['correct']} correct, {c['from_cache']} cached")
    tiles = " | ".join(f"{'+'.join(t['ops'])}:{t['kind']}" for t in report.tiling)
    table.add_row("tiling", tiles or "-")
    table.add_row("answer", ("original program kept: " if report.kept_original else "") + report.reason)
    table.add_row(
        "speedup vs eager / torch.compile", f"{_fmt(report.speedup_vs_eager)} / {_fmt(report.speedup_vs_compile)}"
    )
    table.add_row(
        "verified / wall",
        f"{report.verified} tasks / {report.wall_s:.1f} s" + (" (cache)" if report.from_cache else ""),
    )
    out.print(table)
