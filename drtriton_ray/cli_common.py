"""What every `drtriton` command shares: the consoles and the one-line error that exits 2.

drtriton_ray/cli.py and the stage CLIs (models/cli.py, verify/cli.py, eval/cli.py) import from here, and this module
imports none of them, so the main app can import the stage CLIs without an import cycle. It stays light (typer and
rich) because `python -m drtriton_ray.cli` on the GPU machine imports it before any command runs."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

err = Console(stderr=True, soft_wrap=True)
out = Console()


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `error: MESSAGE` on stderr as one line and exit with CODE (2: a user error, never a traceback)."""
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def validation_message(e) -> str:
    """A pydantic ValidationError as one line: `field.sub: what is wrong; other: ...` (a model-wide check's message
    as it is, under `config`)."""
    return "; ".join(
        f"{'.'.join(map(str, x['loc'])) or 'config'}: {x['msg'].removeprefix('Value error, ')}" for x in e.errors()
    )
