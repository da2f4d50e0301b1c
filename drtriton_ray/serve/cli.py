"""`drtriton serve` (the conversion service on a local Ray, its page's URL printed) and `drtriton serve-dataset`
(the flywheel's parts merged into one Parquet file that `drtriton sft-data --external` takes), registered on the
main app by `register(app)`."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional

import typer

from drtriton_ray.cli_common import err, fail, out, validation_message

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "serve-cpu.yaml"


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)
    app.command("serve-dataset")(dataset_cmd)


def read_settings(config: Optional[Path], device: Optional[str]) -> tuple[dict, dict]:
    """(settings, environment) from a Serve config file's first application (its `args` and runtime_env
    env_vars) or from a plain mapping of settings; every setting is checked here, one line on error."""
    import yaml
    from pydantic import ValidationError

    from drtriton_ray.serve.config import ServeSettings

    args, env = {}, {}
    if config is not None:
        try:
            data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as e:
            fail(f"cannot read {config}: {' '.join(str(e).split())}")
        if not isinstance(data, dict):
            fail(f"{config}: expected a mapping of settings or a Serve config file")
        if "applications" in data:
            application = (data["applications"] or [{}])[0]
            args = application.get("args") or {}
            env = (application.get("runtime_env") or {}).get("env_vars") or {}
        else:
            args = data
    if device is not None:
        args = {**args, "device": device}
    try:
        return ServeSettings(**args).model_dump(), env
    except ValidationError as e:
        fail(f"{config or 'settings'}: {validation_message(e)}")


def serve_cmd(
    config: Optional[Path] = typer.Option(
        DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None,
        "--config",
        "-c",
        help="a Serve config file (configs/serve-cpu.yaml, serve-gpu.yaml) or a YAML mapping of settings",
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="where the HTTP proxy listens"),
    port: int = typer.Option(8000, "--port", "-p"),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda (overrides the config's)"),
    num_cpus: Optional[int] = typer.Option(None, "--num-cpus", help="CPUs for a local Ray (default: all)"),
):
    """Start the conversion service (Ray Serve) on HOST:PORT and print the page's URL; Ctrl-C stops it."""
    settings, env = read_settings(config, device)
    for key, value in env.items():
        os.environ.setdefault(key, str(value))
    if settings["device"] == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton has no CPU backend: the interpreter runs kernels
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray import serve

    from drtriton_ray.serve.app import start

    ray.init(num_cpus=num_cpus, include_dashboard=False, ignore_reinit_error=True)
    try:
        url = start(settings, host=host, port=port)
    except Exception as e:  # a port in use, a cluster without the resources: one line, then stop what started
        serve.shutdown()
        fail(f"cannot start the service: {' '.join(str(e).split())[:300]}")
    # the URL alone on its line (no wrapping): scripts and terminals pick it up whole
    out.print(f"conversion service: open {url}", soft_wrap=True, highlight=False)
    err.print(f"API docs {url}docs; jobs in {settings['state_dir']}; Ctrl-C stops it", soft_wrap=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        err.print("stopping the service")
    finally:
        serve.shutdown()
        ray.shutdown()


def dataset_cmd(
    folder: Path = typer.Argument(..., help="the service's dataset_dir (part-*.parquet files)"),
    out_path: Path = typer.Option(..., "--out", "-o", help="one Parquet file with every row"),
    kind: Optional[str] = typer.Option(None, "--kind", help="fragment or module: only those rows"),
):
    """Merge the service's flywheel dataset into one Parquet file (`drtriton sft-data --external FILE` takes it)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from drtriton_ray.serve import flywheel

    if not folder.is_dir():
        fail(f"{folder} is not a folder")
    if kind not in (None, "fragment", "module"):
        fail(f"--kind must be fragment or module, got {kind!r}")
    table = flywheel.read(str(folder))
    if kind is not None:
        table = table.filter(pc.equal(table["kind"], kind))
    try:
        pq.write_table(table, out_path)
    except OSError as e:
        fail(f"cannot write {out_path}: {e}")
    err.print(f"wrote {table.num_rows} rows to {out_path}")
