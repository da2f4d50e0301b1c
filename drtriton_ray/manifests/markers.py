"""`# EDIT:` markers. Each manifest in cluster/ marks, on the field's own line, what a user must set for their
cluster: the image, the resources (instance or machine types, accelerators, container limits) and the autoscaling
bounds; and marks nothing else, so that the markers are the whole list. Field lines come from PyYAML's node marks;
a RayService's serveConfigV2 (a literal block of YAML) is read as the YAML it holds, so its replica bounds are
fields too."""

from __future__ import annotations

import re
from typing import Iterator

import yaml

from drtriton_ray.manifests.findings import Finding, yaml_path

MARKER = "# EDIT:"
IMAGES = {"image", "head_image", "worker_image"}
RESOURCES = {"resources", "InstanceType", "machineType", "guestAccelerators"}
BOUNDS = {"max_workers", "min_workers", "minReplicas", "maxReplicas", "min_replicas", "max_replicas"}
EMBEDDED_YAML = "serveConfigV2"
_MARKED = re.compile(r"^\s*[^#\s].*#\s*EDIT:")  # a trailing comment: a comment line only talks about markers


def fields(node, path: tuple = (), offset: int = 0) -> Iterator[tuple[tuple, int, yaml.Node]]:
    """(YAML path, 0-based line of the key, value node) for every mapping key under NODE."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            at = (*path, key.value)
            yield at, key.start_mark.line + offset, value
            yield from fields(value, at, offset)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            yield from fields(item, (*path, i), offset)
    elif isinstance(node, yaml.ScalarNode) and path[-1:] == (EMBEDDED_YAML,) and node.style == "|":
        try:
            inner = yaml.compose(node.value)
        except yaml.YAMLError:  # the schema checks say what is wrong with it
            return
        # a literal block keeps its lines: its line 0 is the one after the `|`
        yield from fields(inner, path, offset + node.start_mark.line + 1)


def marker_problems(text: str) -> list[Finding]:
    """Fields of the three kinds without a marker, and markers on lines that hold none of them."""
    marked = {i for i, line in enumerate(text.splitlines()) if _MARKED.match(line)}
    lines, problems = set(), []
    for doc in yaml.compose_all(text):
        for path, line, value in fields(doc):
            name = path[-1]
            if name not in IMAGES | RESOURCES | BOUNDS:
                continue
            lines.add(line)
            empty = isinstance(value, yaml.MappingNode) and not value.value  # `resources: {}`: detected at launch
            if line not in marked and not (name == "resources" and empty):
                kind = "image" if name in IMAGES else "resource" if name in RESOURCES else "autoscaling bound"
                problems.append(Finding(yaml_path(path), f"no `{MARKER}` marker on this {kind} a user must set"))
    for line in sorted(marked - lines):
        problems.append(
            Finding(f"line {line + 1}", f"`{MARKER}` on a line with no image, resource or autoscaling bound")
        )
    return problems
