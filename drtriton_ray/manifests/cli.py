"""`drtriton check-cluster`, registered on the main app by `register(app)`: one line per manifest, ok or each
problem (file, YAML path, message). Exit 0: all ok; 1: a manifest has problems; 2: a file could not be checked at
all (missing, not YAML, of no known kind)."""

from __future__ import annotations

from pathlib import Path

import typer

from drtriton_ray.cli_common import err


def register(app: typer.Typer) -> None:
    app.command("check-cluster")(check_cluster_cmd)


def check_cluster_cmd(
    paths: list[Path] = typer.Argument(None, help="manifests or folders of them (default: every YAML in cluster/)"),
    markers: bool = typer.Option(
        False,
        "--edit-markers",
        help="also require `# EDIT:` on every image, resource and autoscaling bound, only there",
    ),
):
    """Validate deployment manifests: Ray launcher configs with Ray's schema, KubeRay RayJob/RayService with
    KubeRay's CRD schemas, and what they run (Serve config, service settings, training config)."""
    from drtriton_ray.manifests.check import check_file, manifest_paths

    files = manifest_paths(paths or ())
    if not files:
        err.print("error: no manifests to check (no YAML file in the folders given)", highlight=False)
        raise typer.Exit(2)
    reports = [check_file(p, markers=markers) for p in files]
    for r in reports:
        shown = r.path.relative_to(Path.cwd()) if r.path.is_relative_to(Path.cwd()) else r.path
        # print, not rich: YAML paths hold [0] and ["nvidia.com/gpu"], which rich would read as markup
        if r.error:
            print(f"{shown}: error: {r.error}")
        elif r.ok:
            print(f"{shown}: ok ({', '.join(r.kinds)})")
        for p in r.problems:
            print(f"{shown}: {p.line()}")
    bad = sum(not r.ok for r in reports)
    noun = "manifest" if len(reports) == 1 else "manifests"
    err.print(f"{len(reports)} {noun}, {len(reports) - bad} ok, {bad} with problems", highlight=False)
    raise typer.Exit(2 if any(r.error for r in reports) else 1 if bad else 0)
