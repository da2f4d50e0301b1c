"""The search's persistent cache: per (fragment hash, machine, code version), the best verified candidate with its
verdict summary, and every candidate already judged there (so a repeat verifies nothing it has seen); per
(program, settings, machine, version), the conversion's whole result.

The machine is the GPU model (kernels are timed on it) or "cpu-interpreter". Entries are JSON files under a local
folder, or under any fsspec URI (s3://, gs://, memory://...) when fsspec is installed, so a cluster's searches
share one cache."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

# Bump when fragments render differently or candidates are judged differently: older entries stop matching.
# Bumped when what the search or the lowering finds changes (mode-dependent graphs, fused lowering, fusion-region
# fragments, kernels that read their sizes from their inputs, reshape_view of strided inputs, other shapes at size 1,
# dtype casts as registry operators, type promotion as casts, slices read in place): older entries would answer with
# another code's results.
CODE_VERSION = "search-8"
# Verdicts that say nothing about a candidate (the problem could not be judged on this machine, or the device
# failed): a later run tries the candidate again instead of remembering it as judged.
RETRYABLE = frozenset({"verifier_limit", "bad_problem", "device_error"})


def judged(tried: dict[str, str]) -> dict[str, str]:
    """The candidate ids (-> status) worth remembering: those whose verdict was about the candidate."""
    return {cid: status for cid, status in tried.items() if status not in RETRYABLE}


DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "drtriton-ray" / "convert"


def device_key(device: str) -> str:
    """Where times were measured: the GPU's model name, or the interpreter (nothing timed)."""
    if not device.startswith("cuda"):
        return "cpu-interpreter"
    import torch

    index = int(device.split(":")[1]) if ":" in device else 0
    return torch.cuda.get_device_name(index) if torch.cuda.is_available() else "cuda"


@dataclass
class Entry:
    """One fragment on one machine: the best verified candidate (code, its source, verdict summary) if any, and
    the ids of every candidate judged, with their status."""

    fragment: str
    device: str
    version: str
    best: Optional[dict] = None  # {"code", "source", "note", "outcome": VerdictSummary dict}
    tried: dict[str, str] = field(default_factory=dict)

    def merge(self, other: "Entry") -> "Entry":
        """Both entries' knowledge: the faster best (a timed one over an untimed one), every judged id."""
        best = self.best
        if other.best is not None and (best is None or _ms(other.best) < _ms(best)):
            best = other.best
        return Entry(self.fragment, self.device, self.version, best, {**self.tried, **other.tried})


def _ms(best: dict) -> float:
    ms = best["outcome"].get("candidate_ms")
    return float("inf") if ms is None else ms


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


class Cache:
    """A folder (or fsspec URI) of JSON entries: ROOT/VERSION/DEVICE/fragments/HASH.json and .../programs/KEY.json."""

    def __init__(self, root, device: str, version: str = CODE_VERSION):
        self.root, self.device, self.version = str(root), device, version
        self.remote = "://" in self.root
        if self.remote:
            import fsspec  # only for URIs: a local cache needs nothing beyond the standard library

            self.fs, base = fsspec.core.url_to_fs(self.root)
        else:
            self.fs, base = None, self.root
        self.base = f"{base.rstrip('/')}/{_slug(version)}/{_slug(device)}"
        self.hits = self.misses = 0

    def _path(self, kind: str, key: str) -> str:
        return f"{self.base}/{kind}/{_slug(key)}.json"

    def _read(self, path: str) -> Optional[dict]:
        try:
            if self.remote:
                with self.fs.open(path, "r") as f:
                    return json.load(f)
            return json.loads(Path(path).read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):  # absent, or half-written by a killed run
            return None

    def _write(self, path: str, data: dict) -> None:
        text = json.dumps(data, indent=1, sort_keys=True)
        if self.remote:
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            with self.fs.open(path, "w") as f:
                f.write(text)
            return
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)  # readers never see half a file

    def get(self, fragment: str) -> Optional[Entry]:
        data = self._read(self._path("fragments", fragment))
        entry = Entry(**data) if data else None
        if entry is not None and entry.best is not None:
            self.hits += 1
        else:
            self.misses += 1
        return entry

    def put(self, entry: Entry) -> None:
        path = self._path("fragments", entry.fragment)
        old = self._read(path)
        self._write(path, asdict(Entry(**old).merge(entry) if old else entry))

    def get_result(self, key: str) -> Optional[dict]:
        return self._read(self._path("programs", key))

    def put_result(self, key: str, result: dict) -> None:
        self._write(self._path("programs", key), result)


def program_key(source: str, settings: dict) -> str:
    """A conversion's key: the program's text and the settings that change what the search can find."""
    text = json.dumps({"source": source, "settings": settings}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]
