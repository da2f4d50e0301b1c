"""The deployment manifests in cluster/, checked as CI checks them (`drtriton check-cluster --edit-markers`): Ray's
own launcher schema and config preparation, KubeRay's v1 CRD schemas (the stored fixtures, no network), Ray Serve's
schema, the service's settings and the RL config; no mocks. Every manifest passes, and a deliberately broken copy
of each fails with a message naming the field."""

import copy
import gzip
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from drtriton_ray.cli import app
from drtriton_ray.manifests import kube
from drtriton_ray.manifests.check import check_file, manifest_paths
from drtriton_ray.manifests.workloads import SERVE_APP

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
MANIFESTS = {
    "aws-gpu.yaml": "Ray launcher config, provider aws",
    "gcp-gpu.yaml": "Ray launcher config, provider gcp",
    "kuberay-rayjob.yaml": "KubeRay RayJob",
    "kuberay-rayservice.yaml": "KubeRay RayService",
}


def load(name: str) -> dict:
    return yaml.safe_load((CLUSTER / name).read_text())


def lines_of(report) -> list[str]:
    return [p.line() for p in report.problems] + ([f"error: {report.error}"] if report.error else [])


def test_the_default_paths_are_every_manifest_in_cluster():
    assert [p.name for p in manifest_paths()] == sorted(MANIFESTS)


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_every_manifest_passes_with_its_edit_markers(name):
    report = check_file(CLUSTER / name, markers=True)
    assert lines_of(report) == [] and report.kinds == [MANIFESTS[name]]


def aws_ray_ml(d):
    d["docker"]["image"] = "rayproject/ray-ml:2.60.0-py311-gpu"


def gcp_gpus(d):
    d["available_node_types"]["gpu-h100"]["resources"]["GPU"] = 4


def gcp_no_resources(d):
    d["available_node_types"]["cpu"]["resources"] = {}


def job_gpu_group(d, **fields):
    d["spec"]["rayClusterSpec"]["workerGroupSpecs"][1].update(fields)


def job_gpu_limits(d, **limits):
    d["spec"]["rayClusterSpec"]["workerGroupSpecs"][1]["template"]["spec"]["containers"][0]["resources"][
        "limits"
    ].update(limits)


def job_second_worker_container(d):
    containers = d["spec"]["rayClusterSpec"]["workerGroupSpecs"][1]["template"]["spec"]["containers"]
    containers.append(copy.deepcopy(containers[0]))


def serve_config(d, old: str, new: str):
    assert old in d["spec"]["serveConfigV2"]
    d["spec"]["serveConfigV2"] = d["spec"]["serveConfigV2"].replace(old, new)


W = "spec.rayClusterSpec.workerGroupSpecs[1]"
S = "spec.serveConfigV2.applications[0].args"
BROKEN = [
    # (manifest, how it is broken, the problem line expected, word for word)
    ("aws-gpu.yaml", lambda d: d["available_node_types"]["cpu"].update(min_workers="zero"),
     "available_node_types.cpu.min_workers: 'zero' is not of type 'integer'"),
    ("aws-gpu.yaml", lambda d: d.update(head_node_type="header"),
     "head_node_type: 'header' is not one of available_node_types (head, cpu, gpu-h100)"),
    ("aws-gpu.yaml", lambda d: d["available_node_types"]["cpu"].pop("node_config"),
     "available_node_types.cpu.node_config: missing (a required field)"),
    ("aws-gpu.yaml", lambda d: d["available_node_types"]["gpu-h100"].update(min_workers=3),
     "available_node_types.gpu-h100.min_workers: 3 is more than this type's max_workers (2)"),
    ("aws-gpu.yaml", aws_ray_ml,
     "docker.image: rayproject/ray-ml images stopped at Ray 2.49; use rayproject/ray:2.60.0-py311-gpu"),
    ("aws-gpu.yaml", lambda d: d["provider"].update(type="awz"),
     "provider.type: 'awz' is not a provider Ray knows (aliyun, aws, azure, external, fake_multinode, "
     "fake_multinode_docker, gcp, local, readonly, spark, vsphere)"),
    ("aws-gpu.yaml", lambda d: d["docker"].pop("container_name"),
     "Ray's own config preparation refuses it: Must provide a container & image name"),
    ("gcp-gpu.yaml", lambda d: d.update(max_worker=4),
     "max_worker: unknown field (the schema has no such property); did you mean max_workers?"),
    ("gcp-gpu.yaml", gcp_gpus,
     "available_node_types.gpu-h100.resources.GPU: 4, but node_config.guestAccelerators attach 8 GPUs"),
    ("gcp-gpu.yaml", gcp_no_resources,
     "available_node_types.cpu.resources: empty: on gcp the autoscaler knows a node's CPUs and GPUs only from "
     "here, so it never starts this type for a task"),
    ("kuberay-rayjob.yaml", lambda d: job_gpu_group(d, maxReplicas="four"),
     f"{W}.maxReplicas: 'four' is not of type 'integer'"),
    ("kuberay-rayjob.yaml", lambda d: d["spec"]["rayClusterSpec"]["workerGroupSpecs"][1].pop("groupName"),
     f"{W}.groupName: missing (a required field)"),
    ("kuberay-rayjob.yaml", lambda d: job_gpu_group(d, minReplica=1),
     f"{W}.minReplica: unknown field (the schema has no such property); did you mean minReplicas?"),
    ("kuberay-rayjob.yaml", lambda d: job_gpu_limits(d, memory="64GB"),
     f"{W}.template.spec.containers[0].resources.limits.memory: '64GB' is not a Kubernetes quantity "
     "(such as 8, 500m, 64Gi or 1e3)"),
    ("kuberay-rayjob.yaml", lambda d: job_gpu_limits(d, cpu=[96]),
     f"{W}.template.spec.containers[0].resources.limits.cpu: [96] is not of type integer or string"),
    ("kuberay-rayjob.yaml", job_second_worker_container,
     f'{W}.template.spec.containers[1]: duplicate entry (name="ray-worker", as entry [0])'),
    ("kuberay-rayjob.yaml", lambda d: d["spec"].update(managedBy="me"),
     "spec.managedBy: the managedBy field value must be either 'ray.io/kuberay-operator' or "
     "'kueue.x-k8s.io/multikueue'"),
    ("kuberay-rayjob.yaml", lambda d: d["spec"].update(backoffLimit=2**40),
     "spec.backoffLimit: 1099511627776 is out of range for int32"),
    ("kuberay-rayjob.yaml", lambda d: job_gpu_group(d, minReplicas=5),
     f"{W}.minReplicas: 5 is more than maxReplicas (4)"),
    ("kuberay-rayjob.yaml", lambda d: job_gpu_group(d, replicas=1, maxReplicas=1),
     "spec.rayClusterSpec.workerGroupSpecs: the groups reach 8 GPUs at most (maxReplicas x nvidia.com/gpu "
     "limits) and configs/cluster-7b.yaml asks for 12: what does not fit waits forever"),
    ("kuberay-rayjob.yaml", lambda d: d["spec"].update(entrypoint="python /app/jobs/train.py --config configs/x.yaml"),
     "spec.entrypoint: names configs/x.yaml, which this repository lacks"),
    ("kuberay-rayjob.yaml", lambda d: d["spec"].update(entrypoint=d["spec"]["entrypoint"] + " --set algo.lr=fast"),
     "spec.entrypoint: configs/cluster-7b.yaml: algo.lr: Input should be a valid number, unable to parse string "
     "as a number"),
    ("kuberay-rayjob.yaml", lambda d: d["spec"]["rayClusterSpec"].update(rayVersion="2.9.0"),
     "spec.rayClusterSpec.rayVersion: '2.9.0' is not 2.60.0, the Ray this project pins (and the image must carry)"),
    ("kuberay-rayjob.yaml", lambda d: d["metadata"].update(name="DrTriton_RL"),
     "metadata.name: 'DrTriton_RL' is not a DNS-1035 label (lowercase letters, digits and '-', a letter first, "
     "63 at most): the operator names Services after it"),
    ("kuberay-rayservice.yaml", lambda d: serve_config(d, "verifier_workers: 4", "verifier_workers: 0"),
     f"{S}.verifier_workers: Input should be greater than or equal to 1"),
    ("kuberay-rayservice.yaml", lambda d: serve_config(d, "queue_size: 256", "queue_sise: 256"),
     f"{S}.queue_sise: Extra inputs are not permitted"),
    ("kuberay-rayservice.yaml", lambda d: serve_config(d, "proxy_location: EveryNode", "proxy_location: Everywhere"),
     "spec.serveConfigV2.proxy_location: Input should be 'Disabled', 'HeadOnly' or 'EveryNode'"),
    ("kuberay-rayservice.yaml", lambda d: d["spec"].update(serveConfigV2="applications: [unclosed"),
     "spec.serveConfigV2: not YAML (expected ',' or ']', but got '<stream end>')"),
    ("kuberay-rayservice.yaml", lambda d: serve_config(d, "max_replicas: 16, target_ongoing_requests: 1",
                                                       "max_replicas: 40, target_ongoing_requests: 1"),
     "spec.rayClusterConfig.workerGroupSpecs: the groups reach 32 GPUs at most (maxReplicas x nvidia.com/gpu "
     "limits) and Serve at max_replicas (one GPU per cuda Verifier or Policy replica) asks for 40: what does not "
     "fit waits forever"),
    ("kuberay-rayservice.yaml", lambda d: serve_config(d, SERVE_APP, "drtriton_ray.serve.apps:build_app"),
     "spec.serveConfigV2.applications[0].import_path: 'drtriton_ray.serve.apps:build_app' is no Serve application "
     "of this package (the service is drtriton_ray.serve.app:build_app)"),
    ("kuberay-rayservice.yaml", lambda d: d["spec"].pop("rayClusterConfig"),
     "spec.rayClusterConfig: missing (a required field)"),
    ("kuberay-rayservice.yaml", lambda d: d.update(apiVersion="ray.io/v1alpha1"),
     "apiVersion: 'ray.io/v1alpha1': the schemas here are ray.io/v1"),
]  # fmt: skip


@pytest.mark.parametrize("name,breaks,expected", BROKEN, ids=[f"{b[0]}:{b[2].split(':')[0]}" for b in BROKEN])
def test_a_broken_copy_fails_naming_the_field(tmp_path, name, breaks, expected):
    doc = load(name)
    breaks(doc)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert lines_of(check_file(path)) == [expected]


VALID = [
    # (manifest, a change that keeps it valid): what a schema read too strictly, or a check too eager, would refuse
    ("aws-gpu.yaml", lambda d: d["available_node_types"]["cpu"].pop("min_workers")),
    ("gcp-gpu.yaml", lambda d: d["available_node_types"]["gpu-h100"]["resources"].update(memory=10**12)),
    ("kuberay-rayjob.yaml", lambda d: job_gpu_limits(d, cpu=96, memory="1e12")),
    ("kuberay-rayjob.yaml", lambda d: d["spec"].update(
        entrypoint=d["spec"]["entrypoint"] + " --set run.storage_path=/mnt/shared/configs/x.yaml --set=algo.lr=2e-6")),
    ("kuberay-rayjob.yaml", lambda d: d["spec"].update(entrypoint="python /app/jobs/synth.py --levels 1,2 --count 9")),
    ("kuberay-rayservice.yaml", lambda d: serve_config(d, "device: cuda", "device: cuda\n      model: /mnt/policy")),
]  # fmt: skip


@pytest.mark.parametrize("name,changes", VALID, ids=[f"{v[0]}-{i}" for i, v in enumerate(VALID)])
def test_a_valid_variant_passes(tmp_path, name, changes):
    doc = load(name)
    changes(doc)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert lines_of(check_file(path)) == []


def test_every_manifest_has_a_broken_copy_above():
    assert {b[0] for b in BROKEN} == set(MANIFESTS)


@pytest.mark.parametrize(
    "name,old,new,expected",
    [
        ("aws-gpu.yaml", "  # EDIT: Ray 2.60 with CUDA", "  # Ray 2.60 with CUDA",
         "docker.image: no `# EDIT:` marker on this image a user must set"),
        ("gcp-gpu.yaml", "cluster_name: drtriton-ray", "cluster_name: drtriton-ray  # EDIT: a name",
         "line 12: `# EDIT:` on a line with no image, resource or autoscaling bound"),
        ("kuberay-rayjob.yaml", "replicas: 2\n        minReplicas: 0  # EDIT: pods kept up",
         "replicas: 2\n        minReplicas: 0",
         "spec.rayClusterSpec.workerGroupSpecs[1].minReplicas: no `# EDIT:` marker on this autoscaling bound a user "
         "must set"),
        ("kuberay-rayservice.yaml", "target_ongoing_requests: 2}     # EDIT: replicas", "target_ongoing_requests: 2}",
         "spec.serveConfigV2.applications[0].args.search.min_replicas: no `# EDIT:` marker on this autoscaling bound "
         "a user must set"),
    ],
)  # fmt: skip
def test_edit_markers_sit_on_every_image_resource_and_bound_and_nowhere_else(tmp_path, name, old, new, expected):
    text = (CLUSTER / name).read_text()
    assert text.count(old) == 1
    path = tmp_path / name
    path.write_text(text.replace(old, new))
    problems = lines_of(check_file(path, markers=True))
    assert problems[0] == expected and len(problems) == (2 if "search" in expected else 1)  # search: min and max
    assert lines_of(check_file(path)) == []  # markers are checked only when asked for


def shown(path: Path) -> Path:
    """A path as the CLI prints it: relative to the working directory where it lies below it."""
    return path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path


def run(*args):
    result = CliRunner().invoke(app, ["check-cluster", *map(str, args)])
    assert "Traceback" not in result.output and not isinstance(result.exception, Exception)
    return result


def test_the_cli_checks_cluster_by_default_and_exits_0():
    result = run("--edit-markers")
    assert result.exit_code == 0, result.output
    assert [line.split(": ")[1] for line in result.stdout.splitlines()] == [
        f"ok ({MANIFESTS[n]})" for n in sorted(MANIFESTS)
    ]
    assert "4 manifests, 4 ok, 0 with problems" in result.stderr


def test_the_cli_prints_each_problem_with_file_and_field_and_exits_1(tmp_path):
    doc = load("kuberay-rayjob.yaml")
    job_gpu_group(doc, maxReplicas="four", groupName=7)
    bad = tmp_path / "job.yaml"
    bad.write_text(yaml.safe_dump(doc))
    result = run(CLUSTER / "aws-gpu.yaml", bad)
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"{shown(CLUSTER / 'aws-gpu.yaml')}: ok (Ray launcher config, provider aws)",
        f"{shown(bad)}: {W}.groupName: 7 is not of type 'string'",
        f"{shown(bad)}: {W}.maxReplicas: 'four' is not of type 'integer'",
    ]


@pytest.mark.parametrize(
    "content,error",
    [
        (None, "error: no such file"),
        ("kind: RayJob\n  spec: [", "error: not YAML (line 2, column 7: mapping values are not allowed here)"),
        ("apiVersion: v1\nkind: ConfigMap\n", "error: unknown kind 'ConfigMap': expected a Ray cluster launcher "
         "config (provider:) or a KubeRay RayJob or RayService (ray.io/v1)"),
        ("- just\n- a list\n", "error: the document is a list, not a mapping of fields"),
        ("# nothing\n", "error: no YAML document in it"),
    ],
)  # fmt: skip
def test_bad_input_gets_one_line_and_exit_2(tmp_path, content, error):
    path = tmp_path / "in.yaml"
    if content is not None:
        path.write_text(content)
    result = run(path, CLUSTER / "gcp-gpu.yaml")
    assert result.exit_code == 2
    gcp = f"{shown(CLUSTER / 'gcp-gpu.yaml')}: ok (Ray launcher config, provider gcp)"
    assert result.stdout.splitlines() == [f"{shown(path)}: {error}", gcp]


def test_a_folder_is_its_yaml_files_and_an_empty_one_is_an_error(tmp_path):
    (tmp_path / "rayjob.yml").write_text((CLUSTER / "kuberay-rayjob.yaml").read_text())
    (tmp_path / "notes.txt").write_text("not a manifest")
    result = run(tmp_path)
    assert result.exit_code == 0 and result.stdout == f"{shown(tmp_path / 'rayjob.yml')}: ok (KubeRay RayJob)\n"
    (tmp_path / "rayjob.yml").unlink()
    result = run(tmp_path)
    assert result.exit_code == 2 and "no manifests to check" in result.stderr


def test_the_crd_fixtures_are_kuberays_v1_schemas_small_and_sourced():
    for kind, file in kube.KINDS.items():
        path = kube.SCHEMAS / file
        assert path.stat().st_size < 300_000
        doc = json.loads(gzip.decompress(path.read_bytes()))
        assert doc["kind"] == kind and doc["version"] == "v1" and doc["group"] == "ray.io"
        assert doc["source"]["commit"] == "feeaf72facab4881ba2b179248bb67315634e229"
        assert doc["source"]["license"] == "Apache-2.0"
        assert set(doc["openAPIV3Schema"]["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
        assert kube.QUANTITY in json.dumps(doc["openAPIV3Schema"]).replace("\\\\", "\\")  # PATTERNS names a live one


def test_structural_schemas_read_as_kubernetes_reads_them():
    s = kube.structural(
        {
            "type": "object",
            "properties": {
                "q": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True},
                "t": {"type": "string", "nullable": True},
                "open": {"type": "object", "properties": {}, "x-kubernetes-preserve-unknown-fields": True},
                "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                "raw": {"type": "object", "x-kubernetes-embedded-resource": True, "properties": {}},
            },
        }
    )  # fmt: skip
    assert s["additionalProperties"] is False and s["properties"]["q"] == {"type": ["integer", "string"]}
    assert s["properties"]["t"]["type"] == ["string", "null"] and "additionalProperties" not in s["properties"]["open"]
    assert s["properties"]["tags"]["uniqueItems"] is True
    assert set(s["properties"]["raw"]["properties"]) == {"apiVersion", "kind", "metadata"}


def test_cel_rules_evaluate_the_forms_kuberay_uses_and_refuse_others():
    both = kube.compile_rule("(has(self.onSuccess) && has(self.onFailure)) || has(self.deletionRules)")
    assert both({"onSuccess": 1, "onFailure": 1}) and both({"deletionRules": []}) and not both({"onSuccess": 1})
    assert not kube.compile_rule("!(has(self.a) && has(self.b))")({"a": 1, "b": 2})
    assert kube.compile_rule("self in ['x', 'y']")("y") and not kube.compile_rule("self in ['x', 'y']")("z")
    assert kube.compile_rule("self == oldSelf") is None  # a transition rule: updates only
    for rule in ("self.size() > 0", "has(self.a) && __import__('os')", "has(self.a) &&"):
        with pytest.raises(ValueError, match="CEL rule"):
            kube.compile_rule(rule)
    for kind in kube.KINDS:  # structural() compiles every rule of the schema: one beyond these forms would raise
        kube.structural(kube.load_crd(kind)["openAPIV3Schema"])
    assert sum(json.dumps(kube.load_crd(kind)).count('"rule":') for kind in kube.KINDS) == 14


def test_the_service_import_path_is_the_apps():
    from drtriton_ray.serve.app import IMPORT_PATH

    assert SERVE_APP == IMPORT_PATH
