"""What every bench script ends with: its rich tables on the console, its numbers as JSON where asked."""

from __future__ import annotations

import json
import os
from pathlib import Path


def finish(tables: list, data, json_path: str | None = None) -> int:
    """Print the tables, write `data` to json_path (if given); the script's exit status."""
    from rich.console import Console

    console = Console()
    for table in tables:
        console.print(table)
    if json_path:
        Path(json_path).write_text(json.dumps(data, indent=1))
    return 0


def save(path: str | None, data: dict) -> None:
    """The JSON so far, written atomically after every item: a run cut short still leaves its rows."""
    if path:
        tmp = Path(f"{path}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
