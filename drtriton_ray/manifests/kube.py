"""KubeRay RayJob and RayService manifests against the v1 openAPIV3Schema of KubeRay's CRDs (schemas/, copied from
KubeRay's Helm chart), read the way the Kubernetes API server reads a structural schema under `kubectl apply`'s
default strict field validation:

- a field the schema does not list is an error (the server would prune it silently, or refuse it when strict),
  unless the object says x-kubernetes-preserve-unknown-fields;
- x-kubernetes-int-or-string takes an integer or a string (quantities such as `8` or "64Gi", checked by pattern);
- `nullable` admits null; list-type `map` keys and list-type `set` items are unique; int32/int64 are in range;
- x-kubernetes-validations (CEL) rules hold. KubeRay's rules use only has(), `self in [...]`, !, && and ||, which
  are evaluated here; transition rules (they compare with oldSelf) apply only to updates and are skipped. A rule
  in any other form fails loudly when the schema loads, so a newer schema cannot slip a rule past unchecked.

Then what the operator refuses or the API server checks outside the CRD: metadata.name, replicas within their
bounds, and a rayVersion equal to the Ray this project pins."""

from __future__ import annotations

import ast
import gzip
import json
import re
from functools import lru_cache
from pathlib import Path

import jsonschema
import ray

from drtriton_ray.manifests.findings import Finding, schema_problems, yaml_path

SCHEMAS = Path(__file__).parent / "schemas"
API_VERSION = "ray.io/v1"
KINDS = {"RayJob": "kuberay-rayjob-v1.json.gz", "RayService": "kuberay-rayservice-v1.json.gz"}
CLUSTER_SPEC = {"RayJob": "rayClusterSpec", "RayService": "rayClusterConfig"}  # each kind's RayCluster spec
# The operator creates Services named after the resource, and a Service name is a DNS-1035 label.
NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
# Kubernetes' resource quantity (cpu: "8", memory: 64Gi), as the CRDs spell it.
QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
PATTERNS = {QUANTITY: "a Kubernetes quantity (such as 8, 500m, 64Gi or 1e3)"}
_CEL_TOKEN = re.compile(r"\s*(has\(self\.(\w+)\)|self in \[([^\]]*)\]|&&|\|\||!|\(|\))")
_CEL_PYTHON = {"&&": " and ", "||": " or ", "!": " not ", "(": "(", ")": ")"}


def load_crd(kind: str) -> dict:
    """The stored schema document: source (repository, commit, path, license) and openAPIV3Schema."""
    return json.loads(gzip.decompress((SCHEMAS / KINDS[kind]).read_bytes()))


@lru_cache(maxsize=None)
def compile_rule(rule: str):
    """A CEL rule as a predicate on the field's value, or None for a transition rule. Raises ValueError for a rule
    beyond has(), `self in [...]`, !, && and ||."""
    if "oldSelf" in rule:
        return None
    parts, pos = [], 0
    while rule[pos:].strip():
        m = _CEL_TOKEN.match(rule, pos)
        if not m:
            raise ValueError(f"CEL rule {rule!r}: only has(), `self in [...]`, !, && and || are evaluated here")
        if m.group(2):
            parts.append(f"has({m.group(2)!r})")
        elif m.group(3) is not None:
            parts.append(f"(self in {ast.literal_eval('[' + m.group(3) + ']')!r})")
        else:
            parts.append(_CEL_PYTHON[m.group(1)])
        pos = m.end()
    # The tokens above admit only names, string literals and boolean operators: the expression cannot call anything
    # but `has`, and precedence matches CEL's (! over && over ||).
    try:
        code = compile("".join(parts).strip(), rule, "eval")
    except SyntaxError:
        raise ValueError(f"CEL rule {rule!r}: not a well-formed expression") from None
    return lambda value: bool(
        eval(code, {"__builtins__": {}}, {"self": value, "has": lambda k: isinstance(value, dict) and k in value})
    )


def structural(node: dict) -> dict:
    """A Kubernetes structural schema node as plain JSON Schema (see the module docstring)."""
    out = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: structural(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = structural(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [structural(sub) for sub in value]
        else:
            out[key] = value
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("anyOf", None)
        out["type"] = ["integer", "string"]
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [*(out["type"] if isinstance(out["type"], list) else [out["type"]]), "null"]
    if out.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    for rule in out.get("x-kubernetes-validations", ()):
        compile_rule(rule["rule"])
    return out


def _cel_rules(validator, rules, instance, schema):
    for rule in rules:
        check = compile_rule(rule["rule"])
        if check is not None and not check(instance):
            yield jsonschema.ValidationError(rule.get("message") or f"breaks the CRD's rule {rule['rule']}")


def _list_map_keys(validator, keys, instance, schema):
    """Entries of a list-type map are unique by their keys (a missing key counts as its schema default)."""
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(instance, list):
        return
    fields = schema.get("items", {}).get("properties", {})
    seen = {}
    for i, item in enumerate(instance):
        if isinstance(item, dict):
            key = tuple(json.dumps(item.get(k, fields.get(k, {}).get("default"))) for k in keys)
            if key in seen:
                named = ", ".join(f"{k}={v}" for k, v in zip(keys, key))
                yield jsonschema.ValidationError(f"duplicate entry ({named}, as entry [{seen[key]}])", path=[i])
            seen.setdefault(key, i)


_FORMATS = jsonschema.FormatChecker(formats=())
_FORMATS.checks("int32")(lambda v: not isinstance(v, int) or -(2**31) <= v < 2**31)
_FORMATS.checks("int64")(lambda v: not isinstance(v, int) or -(2**63) <= v < 2**63)
_Validator = jsonschema.validators.extend(
    jsonschema.Draft7Validator,
    {"x-kubernetes-validations": _cel_rules, "x-kubernetes-list-map-keys": _list_map_keys},
)


@lru_cache(maxsize=None)
def crd_validator(kind: str):
    return _Validator(structural(load_crd(kind)["openAPIV3Schema"]), format_checker=_FORMATS)


def crd_problems(doc: dict) -> list[Finding]:
    """A RayJob or RayService (the caller has checked apiVersion and kind) against its CRD schema and metadata."""
    problems = metadata_problems(doc.get("metadata"))
    if "spec" not in doc:
        problems.append(Finding("spec", "missing (a required field)"))
    return problems + schema_problems(crd_validator(doc["kind"]), doc, patterns=PATTERNS)


def spec_problems(kind: str, spec: dict) -> list[Finding]:
    """What the operator would refuse in a spec the schema accepts."""
    key = CLUSTER_SPEC[kind]
    if key not in spec and "clusterSelector" not in spec:  # the RayService schema requires its own
        message = "missing: the RayJob needs a RayCluster spec (or a clusterSelector naming a running cluster)"
        return [Finding(yaml_path(("spec", key)), message)]
    return cluster_problems(spec.get(key) or {}, ("spec", key))


def metadata_problems(metadata) -> list[Finding]:
    if not isinstance(metadata, dict) or "name" not in metadata:
        return [Finding("metadata.name", "missing (a required field)")]
    name = metadata["name"]
    if not isinstance(name, str) or not NAME.match(name):
        return [
            Finding(
                "metadata.name",
                f"{name!r} is not a DNS-1035 label (lowercase letters, digits and '-', a letter first, 63 at most): "
                "the operator names Services after it",
            )
        ]
    return []


def cluster_problems(spec, where: tuple) -> list[Finding]:
    """The RayCluster spec: replicas within [minReplicas, maxReplicas] (the operator refuses minReplicas above
    maxReplicas, and would scale a group at once to its bounds), and the project's Ray version."""
    problems = []
    version = spec.get("rayVersion")
    if version is not None and version != ray.__version__:
        message = f"{version!r} is not {ray.__version__}, the Ray this project pins (and the image must carry)"
        problems.append(Finding(yaml_path((*where, "rayVersion")), message))
    for i, group in enumerate(spec.get("workerGroupSpecs", ())):
        low, high = group["minReplicas"], group["maxReplicas"]
        at = (*where, "workerGroupSpecs", i)
        if low > high:
            problems.append(Finding(yaml_path((*at, "minReplicas")), f"{low} is more than maxReplicas ({high})"))
        elif "replicas" in group and not low <= group["replicas"] <= high:
            message = f"{group['replicas']} is outside [minReplicas, maxReplicas] = [{low}, {high}]"
            problems.append(Finding(yaml_path((*at, "replicas")), message))
    return problems
