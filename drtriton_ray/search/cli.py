"""`drtriton convert`, registered on the main app by `register(app)`: a PyTorch program in, a verified Triton module
out (drtriton_ray/search/convert.py). The options are `ConversionSettings`' fields (defaults and help from
drtriton_ray/search/settings.py); every bad input is one line and exit status 2, never a traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from drtriton_ray.cli_common import err, fail, out
from drtriton_ray.search.settings import DEFAULTS, SETTINGS, ConversionSettings, flag, parse_dynamic, settings_of


def option(name: str, *short: str):
    """The typer option of a setting: its default, flag and help from the settings table."""
    default = getattr(DEFAULTS, name)
    return typer.Option(default, flag(name), *short, help=SETTINGS[name]["help"], show_default=default is not None)


# the options that are settings of the same name, passed on as typed
AS_GIVEN = ("model", "budget_s", "max_candidates", "device", "workers", "k", "samples", "seed")


def register(app: typer.Typer) -> None:
    app.command("convert")(convert_cmd)


def parse_sources(text: Optional[str]) -> Optional[tuple[str, ...]]:
    return None if text is None else tuple(s.strip() for s in text.split(",") if s.strip())


def convert_cmd(
    problem: Path = typer.Argument(..., help="a PyTorch program in KernelBench format (class Model, get_inputs...)"),
    out_path: Path = typer.Option(..., "--out", "-o", help="where to write the answer (class ModelNew)"),
    model: Optional[Path] = option("model", "-m"),
    budget_s: float = option("budget_s"),
    max_candidates: int = option("max_candidates"),
    device: str = option("device"),
    report: Optional[Path] = typer.Option(None, "--report", help="write the search's JSON report here"),
    workers: Optional[int] = option("workers"),
    k: int = option("k"),
    samples: int = option("samples"),
    sources: Optional[str] = option("sources"),
    seed: int = option("seed"),
    cache: Optional[str] = option("cache"),
    no_cache: bool = typer.Option(False, "--no-cache", help="neither read nor write the cache"),
    timeout: float = option("timeout_s"),
    dynamic: str = typer.Option("", flag("dynamic"), help=SETTINGS["dynamic"]["help"]),
):
    """Convert PROBLEM into a faster verified Triton module by test-time search (docs/convert.md)."""
    given = locals()
    settings = settings_of(
        **{name: given[name] for name in AS_GIVEN},
        sources=parse_sources(sources),
        cache=None if no_cache else cache,
        timeout_s=timeout,
        dynamic=parse_dynamic(dynamic),
    )
    problems = settings.problems(flag)
    if problems:
        fail("; ".join(problems))
    result = _run(settings, problem, _read(problem))
    _write(out_path, result.module_source)
    if report is not None:
        _write(report, json.dumps(result.to_dict()["report"], indent=1))
    _print(result.report)
    err.print(f"wrote {out_path}" + (f" and {report}" if report else ""))


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


def _run(settings: ConversionSettings, problem: Path, source: str):
    """The conversion with a progress bar; bad input, a program that cannot be captured or a verifier that
    cannot start is one line, exit 2."""
    from tqdm import tqdm

    from drtriton_ray.capture.errors import CaptureError
    from drtriton_ray.search.convert import ConversionError, convert_with
    from drtriton_ray.verify import PoolError

    if settings.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            fail("--device cuda asked for, but this machine has no CUDA device")
    error = None
    # a bar only on a terminal: a log or a pipe gets the result and errors, not carriage returns
    with tqdm(
        total=settings.max_candidates, desc="convert", unit="cand", leave=False, disable=not sys.stderr.isatty()
    ) as bar:

        def progress(p) -> None:
            bar.set_description(f"{p.stage}: {p.detail}"[:60])
            if p.stage == "verify":
                bar.n = p.done
            bar.refresh()

        try:
            return convert_with(source, settings, progress=progress, name=flag)
        except (ConversionError, CaptureError) as e:
            error = f"{problem}: {e}"
        except PoolError as e:
            error = f"cannot start a verifier worker: {e}"
    fail(error)  # after the bar is gone: the error is the last line


def _fmt(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def timed_rows(end_to_end: dict) -> list[tuple[str, str]]:
    """The assembled module's times a call and, from its least memory traffic, the bandwidth it reached (a GPU
    run's; none on the interpreter)."""
    times = [end_to_end.get(k) for k in ("eager_ms", "compile_ms", "candidate_ms")]
    if times[2] is None:
        return []
    rows = [("ms eager / torch.compile / answer", " / ".join("n/a" if t is None else f"{t:.4g}" for t in times))]
    if end_to_end.get("gbps"):
        mb = end_to_end["bytes_moved"] / 1e6
        rows.append(("memory traffic", f"{mb:.4g} MB a call at least, {end_to_end['gbps']:.0f} GB/s reached"))
    return rows


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
    if report.shapes:
        where = "; ".join(", ".join(f"{k}={v}" for k, v in s.items()) for s in report.shapes)
        kernels = "kernels at all of them" if report.general else "kernels at the first, your forward elsewhere"
        table.add_row("shapes verified", f"{where} ({kernels})")
    for s in report.shapes_skipped:  # the program itself has no answer there: your forward runs at them
        values = ", ".join(f"{k}={v}" for k, v in s["values"].items())
        table.add_row("shape skipped", f"{values}: {s['reason']} (your forward runs there)")
    table.add_row(
        "speedup vs eager / torch.compile", f"{_fmt(report.speedup_vs_eager)} / {_fmt(report.speedup_vs_compile)}"
    )
    for measure, value in timed_rows(report.end_to_end or {}):
        table.add_row(measure, value)
    table.add_row(
        "verified / wall",
        f"{report.verified} tasks / {report.wall_s:.1f} s" + (" (cache)" if report.from_cache else ""),
    )
    out.print(table)
