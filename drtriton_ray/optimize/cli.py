"""`drtriton optimize MODEL_DIR --out DIR`, registered on the main app by `register(app)`: a Hugging Face causal LM
folder in, DIR out (the answers and a manifest naming MODEL_DIR; `drtriton_ray.optimize.load(DIR)` rebuilds the
optimized model). The example forward is random token ids of shape (--batch, --seq)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from drtriton_ray.cli_common import err, fail, out
from drtriton_ray.search.settings import DEFAULTS


def register(app: typer.Typer) -> None:
    app.command("optimize")(optimize_cmd)


def names(text: Optional[str]) -> Optional[list[str]]:
    return None if not text else [n.strip() for n in text.split(",") if n.strip()]


def optimize_cmd(
    model_dir: Path = typer.Argument(..., help="a Hugging Face causal LM folder (config.json and weights)"),
    out_dir: Path = typer.Option(..., "--out", "-o", help="the optimized model's folder: answers, manifest, report"),
    device: str = typer.Option("cpu", "--device", help="cpu (interpreter, correctness only) or cuda (timed)"),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32 or bf16: the model's dtype while optimizing and loaded"),
    budget_s: float = typer.Option(DEFAULTS.budget_s, "--budget-s", help="wall seconds for all the conversions"),
    dynamic: bool = typer.Option(True, "--dynamic/--static", help="answers must run at any batch and sequence size"),
    report: Optional[Path] = typer.Option(None, "--report", help="also write the report (JSON) here"),
    batch: int = typer.Option(2, "--batch", min=1, help="the example forward's batch size"),
    seq: int = typer.Option(16, "--seq", min=2, help="the example forward's sequence length"),
    include: Optional[str] = typer.Option(None, "--include", help="only these block classes (comma-separated)"),
    exclude: Optional[str] = typer.Option(None, "--exclude", help="never these block classes (comma-separated)"),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="verifier processes (default 2 cpu, 4 cuda)"),
    cache: Optional[str] = typer.Option(DEFAULTS.cache, "--cache", help="conversion cache folder or fsspec URI"),
    no_cache: bool = typer.Option(False, "--no-cache", help="neither read nor write the conversion cache"),
):
    """Make a model faster: convert its blocks (norms, MLPs, rotary...) into verified Triton (docs/convert.md)."""
    from drtriton_ray.models.load import ModelError, check_model_dir, torch_dtype

    try:
        check_model_dir(model_dir)
        torch_type = torch_dtype(dtype)
    except ModelError as e:
        fail(str(e))
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            fail("--device cuda asked for, but this machine has no CUDA device")
    settings = {"device": device, "cache": None if no_cache else cache}
    if workers:
        settings["workers"] = workers
    settings["out"] = out_dir  # the answers are written straight into DIR
    result = run(model_dir, torch_type, batch, seq, budget_s, dynamic, names(include), names(exclude), settings)
    try:
        result.save(out_dir, base=model_dir)
        if report is not None:
            report.write_text((out_dir / "report.json").read_text(encoding="utf-8"), encoding="utf-8")
    except OSError as e:
        fail(f"cannot write {e.filename}: {e.strerror}")
    print_report(result.report)
    err.print(f"wrote {out_dir}" + (f" and {report}" if report else ""))


def run(model_dir: Path, torch_type, batch: int, seq: int, budget_s: float, dynamic: bool, include, exclude, settings):
    """Load the model, draw the example token ids and optimize; a failure to start the verifier is one line."""
    import torch
    from transformers import AutoModelForCausalLM

    from drtriton_ray.optimize.run import optimize
    from drtriton_ray.verify import PoolError

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_type).to(settings["device"]).eval()
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))
    try:
        return optimize(
            model,
            [ids.to(settings["device"])],
            budget_s=budget_s,
            dynamic=dynamic,
            include=include,
            exclude=exclude,
            progress=True,
            **settings,
        )
    except PoolError as e:
        fail(f"cannot start a verifier worker: {e}")


def ms(seconds: Optional[float]) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def print_report(report) -> None:
    table = Table(title=f"drtriton optimize ({report.device}, {report.dtype})")
    for col in ("block", "count", "Triton kernels", "ms before", "ms after", "result"):
        table.add_column(col)
    for r in report.replaced:
        table.add_row(
            r["class"],
            str(r["count"]),
            str(r["triton_kernels"]),
            ms(r["time_before_s"]),
            ms(r["time_after_s"]),
            "replaced",
        )
    for r in report.left:
        table.add_row(r["class"], str(r["count"]), "-", "-", "-", f"left as it was: {r['reason']}")
    out.print(table)
    check = report.check
    verdict = "within the verifier's accuracy contract" if check.get("ok") else f"off: {check.get('detail')}"
    out.print(
        f"model forward: {ms(report.time_before_s)} ms -> {ms(report.time_after_s)} ms; logits {verdict}; "
        f"max abs logit error {report.max_abs_logit_error:.3g}"
        + (f" (the original's own against float64: {own:.3g})" if (own := check.get("original_vs_float64")) else "")
    )
