"""What every bench script ends with: its rich tables on the console, its numbers as JSON where asked."""

from __future__ import annotations

import json
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
