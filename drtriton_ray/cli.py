"""`drtriton`: the command line. User errors print one clear line and exit 2, never a traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from pydantic import ValidationError
from rich.table import Table

# err, out and fail live in cli_common, which the stage CLIs import too (none of them imports this module)
from drtriton_ray.cli_common import err, fail, out, validation_message
from drtriton_ray.eval.cli import register as register_eval
from drtriton_ray.manifests.cli import register as register_manifests
from drtriton_ray.models.cli import register as register_models
from drtriton_ray.optimize.cli import register as register_optimize
from drtriton_ray.search.cli import register as register_convert
from drtriton_ray.serve.cli import register as register_serve
from drtriton_ray.verify.cli import register as register_verify

__all__ = ["app", "err", "fail", "main", "out"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="drtriton-ray: synthesize PyTorch programs, verify Triton kernels, train and serve.",
)


@app.command("ops")
def ops_cmd(as_json: bool = typer.Option(False, "--json", help="one JSON list (name, arity, dtypes, ...)")):
    """List the operator registry."""
    from drtriton_ray.ops import REGISTRY

    specs = [s.describe() for s in REGISTRY.values()]
    if as_json:
        print(json.dumps(specs, indent=1))
        return
    table = Table(title=f"{len(specs)} operators")
    for col in ("name", "arity", "family", "dtypes", "torch"):
        table.add_column(col)
    for s in specs:
        table.add_row(s["name"], str(s["arity"]), s["family"], ",".join(s["dtypes"]), s["torch"])
    out.print(table)


def print_coverage(report: dict) -> None:
    table = Table(title=f"coverage: {report['programs']} programs at level {report['level']}")
    table.add_column("measure")
    table.add_column("value")
    table.add_row("operators covered", f"{report['ops_covered']} / {report['operators']}")
    u = report["op_uniformity"]
    if u["p_value"] is not None:
        table.add_row("operator draws vs uniform", f"chi2 = {u['chi2']:.1f}, p = {u['p_value']:.3f}")
    if "pairs" in report:
        table.add_row("ordered pairs covered", f"{report['pairs_covered']} / {report['pairs']}")
    if "fan_out_share" in report:
        table.add_row("programs with fan-out", f"{100 * report['fan_out_share']:.1f}%")
    counts = sorted(report["op_counts"].items(), key=lambda kv: kv[1])
    table.add_row("fewest / most per operator", f"{counts[0][0]} {counts[0][1]} / {counts[-1][0]} {counts[-1][1]}")
    out.print(table)


@app.command("synth")
def synth_cmd(
    level: int = typer.Option(..., "--level", "-l", help="operators per program (1, 2, 5, 20, any k >= 1)"),
    count: int = typer.Option(..., "--count", "-n", help="number of programs"),
    out_path: Path = typer.Option(..., "--out", "-o", help="Parquet file to write"),
    seed: int = typer.Option(0, "--seed", "-s", help="same seed, same programs"),
    profile: str = typer.Option(
        "small", "--profile", help="size profile: small (CPU interpreter) or paper (DRTriton's)"
    ),
    dtype: str = typer.Option("float32", "--dtype", help="float32, bfloat16 or float16"),
    workers: int = typer.Option(0, "--workers", "-w", help="Ray sampler actors (0: in this process)"),
    fanout: float = typer.Option(0.3, "--fanout", help="chance an input may reuse any existing tensor"),
    ops: Optional[str] = typer.Option(None, "--ops", help="comma-separated operator subset"),
    validate: bool = typer.Option(True, "--validate/--no-validate", help="run every program once in PyTorch"),
    device: str = typer.Option("cpu", "--device", help="where validation runs"),
    conditioning: int = typer.Option(
        2,
        "--conditioning-trials",
        min=0,
        help="input seeds per verifier distribution on which a float32 program must "
        "match its own float64 result (0: no check)",
    ),
    min_elems: Optional[int] = typer.Option(None, help="explicit bound: fewest elements per tensor"),
    max_elems: Optional[int] = typer.Option(None, help="explicit bound: most elements per tensor"),
    max_dim: Optional[int] = typer.Option(None, help="explicit bound: largest dimension"),
    min_flops: Optional[int] = typer.Option(None, help="explicit bound: total-FLOP band bottom"),
    max_flops: Optional[int] = typer.Option(None, help="explicit bound: total-FLOP band top"),
    max_total_elems: Optional[int] = typer.Option(None, help="explicit bound: elements of all tensors"),
    report: bool = typer.Option(True, "--report/--no-report", help="print the coverage report"),
):
    """Synthesize COUNT programs of LEVEL operators into a Parquet dataset."""
    from drtriton_ray.synth.coverage import coverage_report
    from drtriton_ray.synth.dataset import write_parquet

    if count <= 0:
        fail(f"--count must be a positive number of programs, got {count}")
    if workers < 0:
        fail(f"--workers must be >= 0, got {workers}")
    bounds = dict(
        min_elems=min_elems,
        max_elems=max_elems,
        max_dim=max_dim,
        min_flops=min_flops,
        max_flops=max_flops,
        max_total_elems=max_total_elems,
    )
    config = _synth_config(
        out_path,
        level=level,
        profile=profile,
        bounds={k: v for k, v in bounds.items() if v is not None},
        dtype=dtype,
        fanout_prob=fanout,
        validate=validate,
        conditioning_trials=conditioning,
        device=device,
        ops=tuple(o.strip() for o in ops.split(",")) if ops else None,
    )
    records = _synthesize(config, seed, count, workers)
    write_parquet(records, out_path)
    err.print(f"wrote {len(records)} programs to {out_path}")
    if report:
        print_coverage(
            coverage_report([r.ops for r in records], config.op_space(), level, [r.fan_out for r in records])
        )


def _synth_config(out_path: Path, profile: str, bounds: dict, **fields):
    """The validated SynthConfig (a named profile, or one with explicit bounds over it), or a clear exit."""
    from drtriton_ray.synth.config import PROFILES, SizeProfile, SynthConfig
    from drtriton_ray.synth.dataset import check_writable

    if profile not in PROFILES:
        fail(f"unknown size profile {profile!r}; known: {', '.join(PROFILES)}")
    try:
        size = SizeProfile(**{**PROFILES[profile].model_dump(), **bounds}) if bounds else profile
        config = SynthConfig(profile=size, **fields)
        check_writable(out_path)
    except ValidationError as e:
        fail(validation_message(e))
    except ValueError as e:
        fail(str(e))
    return config


def _synthesize(config, seed: int, count: int, workers: int) -> list:
    from drtriton_ray.synth.dataset import synthesize_local
    from drtriton_ray.synth.sampler import SynthesisError

    indices = list(range(count))
    try:
        if workers:
            import ray
            from drtriton_ray.synth.actors import synthesize_ray

            ray.init(ignore_reinit_error=True, log_to_driver=False)
            return synthesize_ray(config, seed, indices, workers)
        from tqdm import tqdm

        with tqdm(total=count, desc=f"synth L{config.level}", unit="prog") as bar:
            return list(synthesize_local(config, seed, indices, on_done=lambda: bar.update(1)))
    except SynthesisError as e:
        fail(str(e))


@app.command("coverage")
def coverage_cmd(
    path: Path = typer.Argument(..., help="a Parquet file written by `drtriton synth`"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Coverage report of a dataset: per-operator (and per-pair) counts, chi-square vs uniform."""
    from drtriton_ray.ops import REGISTRY, SYNTH_NAMES
    from drtriton_ray.synth.coverage import coverage_report
    from drtriton_ray.synth.dataset import read_parquet

    try:
        table = read_parquet(path).to_pydict()
    except (OSError, ValueError) as e:
        fail(f"cannot read {path}: {e}")
    levels = set(table.get("level", []))
    if len(levels) != 1:
        fail(f"{path} holds levels {sorted(levels)}; a report needs exactly one")
    dtypes = set(table["dtype"])
    space = [n for n in SYNTH_NAMES if dtypes <= set(REGISTRY[n].dtypes)]  # what `drtriton synth` draws from
    rep = coverage_report(table["ops"], space, levels.pop(), table.get("fan_out"))
    if as_json:
        print(json.dumps(rep, indent=1))
    else:
        print_coverage(rep)


@app.command("lower")
def lower_cmd(
    problem: Path = typer.Argument(..., help="a KernelBench-format problem written by `drtriton synth`"),
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="write here instead of stdout"),
):
    """Print the reference Triton lowering of PROBLEM as a KernelBench solution (class ModelNew)."""
    from drtriton_ray.lower.emit import NotLowerable, lower_source
    from drtriton_ray.lower.parse import UnsupportedProblem

    try:
        source = problem.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        fail(f"cannot read {problem}: {e}")
    try:
        solution = lower_source(source)
    except (UnsupportedProblem, NotLowerable) as e:
        fail(f"{problem}: {e}")
    if out_path is None:
        print(solution)
    else:
        out_path.write_text(solution, encoding="utf-8")
        err.print(f"wrote {out_path}")


@app.command("sft-data")
def sft_data_cmd(
    levels: str = typer.Option("1", "--levels", help="comma-separated levels"),
    count: int = typer.Option(..., "--count", "-n", help="programs per level (pairs kept: those verified)"),
    out_path: Path = typer.Option(..., "--out", "-o", help="Parquet file to write"),
    seed: int = typer.Option(0, "--seed"),
    profile: str = typer.Option("small", "--profile"),
    external: list[Path] = typer.Option([], "--external", help="JSONL/Parquet pairs to mix in (repeatable)"),
    workers: int = typer.Option(2, "--workers", help="verifier worker processes"),
    device: str = typer.Option("cpu", "--device"),
):
    """Chat pairs (program -> verified reference lowering) for SFT."""
    from drtriton_ray.synth.dataset import check_writable
    from drtriton_ray.train.sft_data import external_pairs, lowered_pairs, write_pairs
    from drtriton_ray.verify import WorkerPool

    if count <= 0:
        fail(f"--count must be a positive number of programs, got {count}")
    try:
        level_list = [int(x) for x in levels.split(",")]
        if any(level < 1 for level in level_list):
            raise ValueError
    except ValueError:
        fail(f"--levels must be positive integers separated by commas, got {levels!r}")
    try:
        check_writable(out_path)
        with WorkerPool(device, size=workers) as pool:
            rows, rejected = lowered_pairs(level_list, count, seed, profile, pool)
            for path in external:
                extra, dropped = external_pairs(str(path), pool)
                rows += extra
                rejected["external"] = rejected.get("external", 0) + dropped
    except ValueError as e:
        fail(str(e))
    write_pairs(rows, out_path)
    err.print(f"wrote {len(rows)} pairs to {out_path}; rejected: {rejected or 'none'}")


# Stage commands live beside their stage; they join the app after this module's own, so `drtriton --help` lists
# them in this order.
register_models(app)
register_verify(app)
register_eval(app)
register_convert(app)
register_optimize(app)
register_serve(app)
register_manifests(app)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
