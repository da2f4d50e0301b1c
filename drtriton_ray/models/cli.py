"""`drtriton prepare-model` and `drtriton check-model`, registered on the main app by `register(app)`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from drtriton_ray.cli_common import err, fail, out


def register(app: typer.Typer) -> None:
    app.command("prepare-model")(prepare_model_cmd)
    app.command("check-model")(check_model_cmd)


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def prepare_model_cmd(
    name: str = typer.Argument(..., help="smollm2 (SmolLM2-135M-Instruct) or tiny (random Qwen2 for tests)"),
    out_dir: Path = typer.Option(..., "--out", "-o", help="model folder to write"),
    seed: int = typer.Option(0, "--seed", "-s", help="tiny only: same seed, same weights"),
    force: bool = typer.Option(False, "--force", help="replace a non-empty --out folder"),
):
    """Write a ready-to-load Hugging Face model folder (safetensors, tokenizer, chat template)."""
    from drtriton_ray.models import MODELS, ModelError, prepare_model

    start = time.perf_counter()
    try:
        path = prepare_model(name, out_dir, seed=seed, force=force)
    except ModelError as e:
        fail(str(e))
    files = sorted(p for p in path.iterdir() if p.is_file())
    table = Table(title=f"{name}: {MODELS[name].description}")
    table.add_column("file")
    table.add_column("size", justify="right")
    for f in files:
        table.add_row(f.name, _size(f.stat().st_size))
    out.print(table)
    err.print(
        f"wrote {len(files)} files ({_size(sum(f.stat().st_size for f in files))}) to {path} "
        f"in {time.perf_counter() - start:.1f} s"
    )


def check_model_cmd(
    path: Path = typer.Argument(..., help="a Hugging Face causal-LM folder"),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32 or bf16"),
    prompt: Optional[str] = typer.Option(None, "--prompt", "-p", help="also print a greedy chat reply to this"),
    max_new_tokens: int = typer.Option(48, "--max-new-tokens", help="length of that reply"),
):
    """Load a model folder as training and serving will, print what it is, optionally generate."""
    from drtriton_ray.models import ModelError, load_model

    try:
        model, tok = load_model(path, dtype)
    except ModelError as e:
        fail(str(e))
    table = Table(title=str(path))
    table.add_column("property")
    table.add_column("value")
    table.add_row("class", type(model).__name__)
    table.add_row("parameters", f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M")
    table.add_row("dtype", str(model.dtype).removeprefix("torch."))
    table.add_row("tied lm_head", str(model.config.tie_word_embeddings))
    table.add_row("tokenizer", f"{type(tok).__name__}, {len(tok)} tokens, max length {tok.model_max_length}")
    table.add_row("chat template", "yes" if tok.chat_template else "no")
    out.print(table)
    if prompt is not None:
        if not tok.chat_template:
            fail(f"{path} has no chat template, so --prompt cannot be rendered")
        ids = tok.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        reply = model.generate(**ids, do_sample=False, max_new_tokens=max_new_tokens)
        print(tok.decode(reply[0, ids["input_ids"].shape[1] :], skip_special_tokens=True))
