"""Completed rollout groups between generation and training, with a staleness bound: a group
sampled by weights of version v trains at version c only if c - v <= max_staleness (default 1:
one step off-policy). Older groups are dropped and counted, never trained on. Closing it (the driver does on
Ctrl-C) stops training: `take` answers None from then on, and the trainer starts no new step."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from drtriton_ray.rl.records import Group


@dataclass
class GroupBuffer:
    capacity: int = 64
    max_staleness: int = 1
    groups: deque = field(default_factory=deque)
    dropped_stale: int = 0
    closed: bool = False

    def __post_init__(self):
        if self.capacity < 1 or self.max_staleness < 0:
            raise ValueError(
                f"buffer capacity must be >= 1 and max_staleness >= 0, got {self.capacity} / {self.max_staleness}"
            )

    def __len__(self) -> int:
        return len(self.groups)

    def size(self) -> int:
        """len() for callers holding a Ray handle to the buffer."""
        return len(self.groups)

    def full(self) -> bool:
        return len(self.groups) >= self.capacity

    def put(self, group: Group) -> bool:
        """False (and nothing stored) when full or closed: the producer waits."""
        if self.closed or self.full():
            return False
        self.groups.append(group)
        return True

    def close(self) -> None:
        self.closed = True
        self.groups.clear()

    def discard(self) -> int:
        """Drop every group held (a restarted trainer's: they were sampled by weights it never had); how many."""
        n = len(self.groups)
        self.groups.clear()
        return n

    def take(self, count: int, current_version: int) -> list[Group] | None:
        """Up to `count` oldest groups fresh enough for `current_version`; stale ones are dropped. None once closed."""
        if self.closed:
            return None
        fresh: list[Group] = []
        while self.groups and len(fresh) < count:
            g = self.groups.popleft()
            if current_version - g.weight_version > self.max_staleness:
                self.dropped_stale += 1
            else:
                fresh.append(g)
        return fresh

    def state_dict(self) -> dict:
        """Metadata for checkpoints (the groups themselves are regenerated after a resume)."""
        return {
            "size": len(self.groups),
            "dropped_stale": self.dropped_stale,
            "versions": [g.weight_version for g in self.groups],
        }
