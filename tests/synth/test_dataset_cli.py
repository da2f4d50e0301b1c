"""Parquet datasets, Ray sampler actors and the `drtriton` CLI (typer's runner in-process, and
the installed console script once)."""

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from drtriton_ray.cli import app
from drtriton_ray.ops import REGISTRY, SYNTH_NAMES
from drtriton_ray.synth import Sampler, SynthConfig
from drtriton_ray.synth.dataset import SCHEMA, read_parquet, write_parquet

runner = CliRunner()
REQUIRED = {
    "id": pa.string(),
    "level": pa.int32(),
    "ops": pa.list_(pa.string()),
    "source": pa.string(),
    "dag": pa.string(),
    "flops": pa.int64(),
    "seed": pa.int64(),
    "dtype": pa.string(),
}


def test_parquet_schema_and_atomic_write(tmp_path):
    recs = [Sampler(SynthConfig(level=2, profile="small"), seed=1).sample(i) for i in range(5)]
    path = write_parquet(recs, tmp_path / "d.parquet")
    table = pq.read_table(path)
    for name, typ in REQUIRED.items():
        assert table.schema.field(name).type == typ
    assert table.schema.equals(SCHEMA)
    assert table.num_rows == 5 and table.column("level").to_pylist() == [2] * 5
    assert [p.name for p in tmp_path.iterdir()] == ["d.parquet"]  # no temp file left behind


def test_synth_cli_end_to_end_and_deterministic(tmp_path):
    n = 2 * len(SYNTH_NAMES)
    args = ["synth", "--level", "1", "--count", str(n), "--profile", "small", "--seed", "3"]
    r1 = runner.invoke(app, args + ["--out", str(tmp_path / "a.parquet")])
    assert r1.exit_code == 0, r1.output
    assert "operators covered" in r1.output and f"{len(SYNTH_NAMES)} / {len(SYNTH_NAMES)}" in r1.output
    r2 = runner.invoke(app, args + ["--out", str(tmp_path / "b.parquet")])
    assert r2.exit_code == 0
    a, b = read_parquet(tmp_path / "a.parquet"), read_parquet(tmp_path / "b.parquet")
    assert a.equals(b)
    assert set(a.column("ops").to_pylist()[i][0] for i in range(n)) == set(SYNTH_NAMES)
    # every emitted program imports, builds and runs with finite, non-constant outputs
    from drtriton_ray.ir import load_problem
    from drtriton_ray.synth.validate import run_problem
    import torch

    for src, seed in zip(a.column("source").to_pylist(), a.column("seed").to_pylist()):
        for o in run_problem(load_problem(src), seed):
            assert not o.is_floating_point() or torch.isfinite(o).all()
            assert o.dim() == 0 or not bool((o == o.reshape(-1)[0]).all())  # a 0-d loss is one value


def test_coverage_command(tmp_path):
    out = tmp_path / "l5.parquet"
    assert runner.invoke(app, ["synth", "-l", "5", "-n", "40", "-o", str(out), "--no-report"]).exit_code == 0
    r = runner.invoke(app, ["coverage", str(out), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["programs"] == 40 and rep["level"] == 5 and "fan_out_share" in rep


@pytest.mark.parametrize(
    "args, message",
    [
        (["--count", "0"], "--count must be a positive number"),
        (["--count", "-3"], "--count must be a positive number"),
        (["--count", "2", "--ops", "ReLU,Convolve"], "unknown operator(s) Convolve"),
        (["--count", "2", "--profile", "huge"], "unknown size profile 'huge'"),
        (
            ["--count", "2", "--min-elems", "100", "--max-elems", "10"],
            "size bounds nothing can meet: min_elems 100 > max_elems 10",
        ),
        (
            ["--count", "2", "--ops", "MaxPool3d", "--min-elems", "1", "--max-elems", "4"],
            "infeasible under the size bounds",
        ),
        (["--count", "2", "--dtype", "float64"], "dtype"),
    ],
)
def test_synth_bad_input(tmp_path, args, message):
    target = tmp_path / "out.parquet"
    target.write_bytes(b"previous contents")
    r = runner.invoke(app, ["synth", "--level", "1", "--out", str(target)] + args)
    assert r.exit_code == 2, r.output
    assert message in " ".join(r.output.split()), r.output
    assert "Traceback" not in r.output
    assert target.read_bytes() == b"previous contents"  # nothing lost


def test_unwritable_output(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)
    # root ignores permission bits; a process's /proc folder refuses new files even to root
    locked = ro if os.geteuid() != 0 else f"/proc/{os.getpid()}"
    try:
        for target, message in [
            (tmp_path / "missing" / "x.parquet", "does not exist"),
            (tmp_path, "is a directory"),
            (f"{locked}/x.parquet", "not writable"),
        ]:
            r = runner.invoke(app, ["synth", "-l", "1", "-n", "2", "-o", str(target)])
            assert r.exit_code == 2 and message in r.output, r.output
    finally:
        os.chmod(ro, 0o700)


def test_ray_workers_match_in_process(tmp_path, ray_local):
    from drtriton_ray.synth.actors import synthesize_ray

    cfg = SynthConfig(level=5, profile="small")
    via_ray = synthesize_ray(cfg, 21, list(range(12)), workers=2, chunk=3, progress=False)
    local = [Sampler(cfg, 21).sample(i) for i in range(12)]
    assert [r.to_dict() for r in via_ray] == [r.to_dict() for r in local]


def test_console_script_ops_json():
    exe = os.path.join(os.path.dirname(sys.executable), "drtriton")
    out = subprocess.run([exe, "ops", "--json"], capture_output=True, text=True, timeout=300, check=True).stdout
    ops = json.loads(out)
    assert {o["name"] for o in ops} == set(REGISTRY)
    assert all({"name", "arity", "dtypes"} <= set(o) for o in ops)
