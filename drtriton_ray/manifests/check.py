"""Manifest files: read, recognised (a Ray cluster launcher config, or a KubeRay RayJob or RayService) and checked.
`check_file` returns a Report; a file that cannot be checked at all (missing, not YAML, of no known kind) gets a
one-line `error` instead of problems."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

import yaml

from drtriton_ray.manifests.kube import API_VERSION, KINDS, crd_problems, spec_problems
from drtriton_ray.manifests.launcher import check_launcher
from drtriton_ray.manifests.markers import marker_problems
from drtriton_ray.manifests.findings import Finding
from drtriton_ray.manifests.workloads import ROOT, job_problems, serve_problems

CLUSTER_DIR = ROOT / "cluster"


class ManifestError(Exception):
    """A document this module cannot check; the message says why in one line."""


@dataclass
class Report:
    path: Path
    kinds: list[str] = field(default_factory=list)  # what each document is, e.g. "KubeRay RayJob"
    problems: list[Finding] = field(default_factory=list)
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.problems


def manifest_paths(paths: Iterable[Path] = ()) -> list[Path]:
    """PATHS with folders expanded to their YAML files; none given: every YAML file in the repository's cluster/."""
    paths = list(paths) or [CLUSTER_DIR]
    found = []
    for p in paths:
        found += sorted([*p.glob("*.yaml"), *p.glob("*.yml")]) if p.is_dir() else [p]
    return found


def check_document(doc) -> tuple[str, list[Finding]]:
    """(what DOC is, its problems). Raises ManifestError for a document of no known kind."""
    if not isinstance(doc, dict):
        raise ManifestError(f"the document is a {type(doc).__name__}, not a mapping of fields")
    if "provider" in doc:
        provider = doc["provider"].get("type") if isinstance(doc["provider"], dict) else None
        return f"Ray launcher config, provider {provider or '(none)'}", check_launcher(doc)
    kind = doc.get("kind")
    if kind not in KINDS:
        known = f"a Ray cluster launcher config (provider:) or a KubeRay {' or '.join(KINDS)} ({API_VERSION})"
        raise ManifestError(f"unknown kind {kind!r}: expected {known}" if kind else f"no kind: expected {known}")
    if doc.get("apiVersion") != API_VERSION:
        return f"KubeRay {kind}", [
            Finding("apiVersion", f"{doc.get('apiVersion')!r}: the schemas here are {API_VERSION}")
        ]
    problems = crd_problems(doc)
    if not problems:  # the checks below read fields whose types the schema has vouched for
        spec = doc["spec"]
        problems = spec_problems(kind, spec) + (serve_problems(spec) if kind == "RayService" else job_problems(spec))
    return f"KubeRay {kind}", problems


def _yaml_error(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    return f"not YAML ({where}{getattr(e, 'problem', None) or e})"


def check_file(path: Path, markers: bool = False) -> Report:
    """Every document of PATH checked; MARKERS: also the `# EDIT:` markers (markers.py)."""
    report = Report(path)
    try:
        text = path.read_text(encoding="utf-8")
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except FileNotFoundError:
        report.error = "no such file"
        return report
    except (OSError, UnicodeDecodeError) as e:
        report.error = f"cannot read it ({getattr(e, 'strerror', None) or e})"
        return report
    except yaml.YAMLError as e:
        report.error = _yaml_error(e)
        return report
    if not docs:
        report.error = "no YAML document in it"
        return report
    for n, doc in enumerate(docs):
        label = f"(document {n + 1}) " if len(docs) > 1 else ""
        try:
            kind, problems = check_document(doc)
        except ManifestError as e:
            report.error = f"{label}{e}"
            return report
        report.kinds.append(kind)
        report.problems += [Finding(f"{label}{p.where}".strip(), p.message) for p in problems]
    if markers:
        report.problems += marker_problems(text)
    return report
