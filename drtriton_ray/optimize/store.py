"""An optimized model's folder (DIR): one answer file per replaced group (`<op>.py`, the converted module), a
manifest.json (the base model's folder, its dtype, each group's class, block paths, file and run-time checks, the
versions it was made with) and report.json. It holds no weights: `load(DIR)` loads the base model with transformers
and swaps the answers in, on any machine that has the base folder.

Trust: loading DIR imports its Python files, as loading a model with custom code does. Load only folders you made
or trust; `load` reads only the files the manifest names, from DIR itself."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from drtriton_ray.optimize.swap import Swap, SwapError, swap_in

FORMAT = 1


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("torch", "triton", "transformers", "drtriton-ray"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def base_of(model: nn.Module, base: Optional[str | Path]) -> Optional[str]:
    """The base model's folder: as given, else the one the model was loaded from (transformers' name_or_path)."""
    if base is not None:
        return str(Path(base).resolve())
    name = getattr(getattr(model, "config", None), "_name_or_path", "") or getattr(model, "name_or_path", "")
    return str(Path(name).resolve()) if name and Path(name).is_dir() else None


def save(result, out: Path, base: Optional[str | Path] = None) -> Path:
    """Write DIR (module docstring) from an OptimizeResult."""
    out.mkdir(parents=True, exist_ok=True)
    groups = []
    for g in result.groups:
        if g.status != "replaced":
            if g.file and result.folder.resolve() == out.resolve():
                (out / g.file).unlink(missing_ok=True)  # an answer the end-to-end check swapped back out
            continue
        if (result.folder / g.file).resolve() != (out / g.file).resolve():
            shutil.copyfile(result.folder / g.file, out / g.file)
        groups.append({"class": g.cls, "paths": g.paths, "file": g.file, "swap": asdict(g.swap)})
    manifest = {
        "format": FORMAT,
        "base": base_of(result.model, base),
        "dtype": result.report.dtype,
        "device": result.report.device,
        "groups": groups,
        "versions": versions(),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    (out / "report.json").write_text(json.dumps(asdict(result.report), indent=1), encoding="utf-8")
    return out


def read_manifest(folder: Path) -> dict:
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SwapError(f"{folder} holds no readable manifest.json: {e}") from None
    if manifest.get("format") != FORMAT:
        raise SwapError(f"{folder}/manifest.json is format {manifest.get('format')}, this version reads {FORMAT}")
    return manifest


def apply(model: nn.Module, folder: str | Path) -> nn.Module:
    """Swap DIR's answers into `model` (the base model, loaded by the caller), in place; returns it in eval mode."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    for g in manifest["groups"]:
        path = folder / Path(g["file"]).name  # only files in DIR itself
        if not path.is_file():
            raise SwapError(f"{folder} lacks {path.name}, which its manifest names")
        swap_in(model, g["paths"], Swap(**g["swap"]), path)
    return model.eval()


def load(
    folder: str | Path, base: Optional[str | Path] = None, device: Optional[str] = None, dtype: Optional[str] = None
) -> nn.Module:
    """The optimized model: the base model's folder (`base`, else the manifest's) loaded with transformers'
    AutoModelForCausalLM in the manifest's dtype (or `dtype`), moved to `device`, and DIR's answers swapped in."""
    from transformers import AutoModelForCausalLM

    manifest = read_manifest(Path(folder))
    base = base or manifest["base"]
    if base is None or not Path(base).is_dir():
        raise SwapError(f"the base model folder {base!r} is not here; pass base=<folder>")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, dtype or manifest["dtype"]))
    if device is not None:
        model = model.to(device)
    return apply(model, folder)
