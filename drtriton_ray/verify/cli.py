"""`drtriton verify` and `drtriton eval`, registered on the main typer app by `register(app)` (drtriton_ray/cli.py).

User errors print one line through cli_common's `fail` and exit 2; a rejected candidate exits 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from drtriton_ray.cli_common import fail as _fail
from drtriton_ray.verify.pool import PoolError, WorkerPool, static_verdict
from drtriton_ray.verify.static import POLICIES, SourceError, check_problem, decode_source
from drtriton_ray.verify.task import Limits, Task
from drtriton_ray.verify.verdict import CheckResult, Status, Verdict

DEVICES = ("cpu", "cuda")


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except IsADirectoryError:
        _fail(f"{what} {path} is a directory, not a .py file")
    except OSError as e:
        _fail(f"cannot read {what} {path}: {e.strerror or e}")


def _options(device: str, policy: str) -> None:
    if device not in DEVICES:
        _fail(f"unknown --device {device!r}; known: {', '.join(DEVICES)}")
    if policy not in POLICIES:
        _fail(f"unknown --policy {policy!r}; known: {', '.join(POLICIES)}")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            _fail("--device cuda asked for, but this machine has no CUDA device")


def _pool(device: str, timeout: float, workers: Optional[int] = 1):
    try:
        return WorkerPool(device, size=workers, limits=Limits(task_timeout_s=timeout), name=f"cli-{device}")
    except (PoolError, OSError) as e:
        _fail(f"cannot start a verifier worker: {e}")


def _invalid(reason: str, name: str = "") -> Verdict:
    return Verdict(
        status=Status.INVALID_SOURCE.value,
        reason=reason,
        name=name,
        worker="parent",
        checks=[CheckResult("source", False, reason)],
    )


def _fmt(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_cmd)
    app.command("eval")(eval_cmd)


def verify_cmd(
    problem: Path = typer.Argument(..., help="KernelBench-format problem .py (class Model, get_inputs)"),
    candidate: Path = typer.Argument(..., help="solution .py defining class ModelNew with Triton kernels"),
    device: str = typer.Option("cpu", "--device", help="cpu (Triton interpreter, no timing) or cuda"),
    policy: str = typer.Option("strict", "--policy", help="strict: no PyTorch compute; hybrid: some allowed"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object"),
    timeout: float = typer.Option(300.0, "--timeout", help="seconds before the candidate is killed"),
):
    """Verify one Triton CANDIDATE against PROBLEM. Exit 0 correct, 1 rejected, 2 unusable problem/input."""
    _options(device, policy)
    try:
        problem_text = decode_source(_read(problem, "problem"), f"problem {problem}")
        check_problem(problem_text)
    except SourceError as e:
        _fail(str(e))
    verdict = _verify_one(problem_text, candidate, policy, problem.stem, device, timeout)
    if verdict.status == Status.BAD_PROBLEM.value:
        _fail(verdict.reason)
    if as_json:
        print(json.dumps(verdict.to_dict()))
    else:
        _print_verdict(verdict)
    raise typer.Exit(0 if verdict.correct else 1)


def _verify_one(problem_text: str, candidate: Path, policy: str, name: str, device: str, timeout: float) -> Verdict:
    """The candidate file's verdict: unreadable source and what the AST rules reject are judged here, without
    starting a worker; the rest by one worker."""
    try:
        candidate_text = decode_source(_read(candidate, "candidate"), f"candidate {candidate}")
    except SourceError as e:
        return _invalid(str(e), name)
    task = Task(problem_text, candidate_text, policy=policy, name=name)
    verdict = static_verdict(task)
    if verdict is not None:
        return verdict
    pool = _pool(device, timeout)
    try:
        return pool.verify([task])[0]
    finally:
        pool.close()


def _print_verdict(verdict: Verdict) -> None:
    from rich.console import Console

    Console().print(
        f"[bold]{verdict.status}[/]"
        + (f": {verdict.reason}" if verdict.reason else "")
        + f"\nspeedup vs eager {_fmt(verdict.speedup_vs_eager)}, vs torch.compile "
        f"{_fmt(verdict.speedup_vs_compile)}"
        + (" [flagged > 10x]" if verdict.speedup_flagged else "")
        + f"\nmax abs err {verdict.max_abs_error}, {verdict.duration_s:.1f} s on {verdict.worker}",
        highlight=False,
    )


def eval_cmd(
    problems: Path = typer.Option(..., "--problems", help="folder of KernelBench-format problem .py files"),
    solutions: Path = typer.Option(..., "--solutions", help="folder of solutions named like their problems"),
    out_path: Optional[Path] = typer.Option(None, "--out", help="JSON file for per-problem verdicts + summary"),
    device: str = typer.Option("cpu", "--device"),
    policy: str = typer.Option("strict", "--policy"),
    workers: Optional[int] = typer.Option(
        None,
        "--workers",
        help="verifier processes (default: 4 on a GPU, "
        "which share it: they compile and check concurrently and take "
        "turns to time; 1 on CPU)",
    ),
    timeout: float = typer.Option(300.0, "--timeout"),
):
    """KernelBench-style evaluation: Acc, fast_p vs eager and vs torch.compile, geomean over all problems."""
    from drtriton_ray.verify.metrics import summarize

    _options(device, policy)
    for folder, what in ((problems, "--problems"), (solutions, "--solutions")):
        if not folder.is_dir():
            _fail(f"{what} {folder} is not a folder")
    files = sorted(problems.glob("*.py"))
    if not files:
        _fail(f"no problem .py files in {problems}")
    if workers is not None and workers < 1:
        _fail(f"--workers must be >= 1, got {workers}")
    if out_path is not None and not out_path.parent.is_dir():
        _fail(f"cannot write {out_path}: folder {out_path.parent} does not exist")
    verdicts, tasks, slots = _eval_tasks(files, solutions, policy)
    if tasks:
        pool = _pool(device, timeout, workers)
        try:
            for slot, v in zip(slots, pool.verify(tasks)):
                verdicts[slot] = v
        finally:
            pool.close()
    summary = summarize(verdicts)
    _print_eval(verdicts, summary)
    if out_path is not None:
        out_path.write_text(json.dumps({"summary": summary, "problems": [v.to_dict() for v in verdicts]}, indent=1))


def _eval_tasks(files: list[Path], solutions: Path, policy: str):
    """One verdict slot per problem file: filled here where the problem or its solution is unreadable or missing;
    otherwise None, with a task to verify and the slot's index."""
    verdicts: list[Optional[Verdict]] = []
    tasks, slots = [], []
    for f in files:
        solution = solutions / f.name
        try:
            problem_text = decode_source(_read(f, "problem"), f"problem {f.name}")
        except SourceError as e:
            verdicts.append(Verdict(status=Status.BAD_PROBLEM.value, reason=str(e), name=f.stem))
            continue
        if not solution.is_file():
            verdicts.append(Verdict(status=Status.MISSING.value, reason=f"no solution {solution.name}", name=f.stem))
            continue
        try:
            candidate_text = decode_source(_read(solution, "solution"), f"solution {solution.name}")
        except SourceError as e:
            verdicts.append(_invalid(str(e), f.stem))
            continue
        slots.append(len(verdicts))
        verdicts.append(None)
        tasks.append(Task(problem_text, candidate_text, policy=policy, name=f.stem))
    return verdicts, tasks, slots


def _print_eval(verdicts: list[Verdict], summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summary['correct']}/{summary['problems']} correct")
    for col in ("problem", "status", "vs eager", "vs compile", "reason"):
        table.add_column(col)
    for v in verdicts:
        table.add_row(v.name, v.status, _fmt(v.speedup_vs_eager), _fmt(v.speedup_vs_compile), v.reason[:70])
    console = Console()
    console.print(table)
    for base in ("eager", "compile"):
        fast = ", ".join(
            f"fast_{p}={'n/a' if x is None else f'{x:.2f}'}" for p, x in summary[f"fast_p_vs_{base}"].items()
        )
        console.print(f"vs {base}: {fast}; geomean {_fmt(summary[f'geomean_speedup_vs_{base}'])}", highlight=False)
    console.print(f"Acc {summary['acc']:.2f}", highlight=False)
