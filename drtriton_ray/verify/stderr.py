"""A worker's standard error, kept in a file of its scratch folder instead of the caller's terminal.

Every worker prints library noise at exit (Triton's nanobind leak report: dozens of lines) and deprecation warnings
at work; with four workers replaced every hundred tasks, a conversion's terminal would be mostly that. What a worker
prints before it dies can still explain the death, so the pool reads the file's last meaningful line into the
verdict's reason. `DRTRITON_WORKER_STDERR=inherit` leaves workers on the caller's standard error (debugging)."""

from __future__ import annotations

import os
import re

FILE = "stderr.log"
ENV = "DRTRITON_WORKER_STDERR"
TAIL_BYTES = 16384
# Lines that say nothing about a task: nanobind's leak report and the source line Python's warnings module prints
# under each warning.
NOISE = re.compile(
    r"^(nanobind: |\s+- leaked |\s+- \.\.\. skipped|See https://nanobind"
    r"|\s+return cls\.__new__|.*Warning: |\s*warnings\.warn)"
)


def redirect(scratch: str) -> None:
    """fd 2 to the scratch folder's file, unless ENV says inherit; before anything could print."""
    if os.environ.get(ENV) == "inherit":
        return
    fd = os.open(os.path.join(scratch, FILE), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 2)
    os.close(fd)


def last_words(scratch: str, limit: int = 200) -> str:
    """The last line of a worker's standard error that is not library noise ("" if none)."""
    try:
        with open(os.path.join(scratch, FILE), "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - TAIL_BYTES))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    meaningful = [line.strip() for line in lines if line.strip() and not NOISE.match(line)]
    return meaningful[-1][:limit] if meaningful else ""
