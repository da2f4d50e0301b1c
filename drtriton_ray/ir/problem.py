"""A problem: KernelBench-format source (`Model`, `get_inputs`, `get_init_inputs`) and, where known, its program.

Synthesis makes problems from programs (`Problem.of`); capture reads a user's source into a Graph; a fragment of a
Graph is a problem of its own. The verifier, the lowering, the search and RL all take a problem's source; the
program says what it computes without running it.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Optional

from drtriton_ray.ir.program import Program
from drtriton_ray.ir.render import problem_source


@dataclass
class Problem:
    source: str
    program: Optional[Program] = None
    name: str = ""

    @classmethod
    def of(cls, program: Program, title: str = "", name: str = "") -> "Problem":
        """The program rendered in KernelBench's format."""
        return cls(problem_source(program, title), program, name)

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "program": self.program.to_dict() if self.program is not None else None,
            "name": self.name,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Problem":
        program = Program.from_dict(d["program"]) if d.get("program") else None
        return cls(d["source"], program, d.get("name", ""))


def load_problem(source: str, name: str = "problem") -> types.ModuleType:
    """Import a problem's source as a module. Only for sources this package generated: a user's source runs only
    inside a sandboxed verifier worker."""
    mod = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod
