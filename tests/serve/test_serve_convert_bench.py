"""bench/serve_convert.py on CPU: it starts its own service (configs/serve-cpu.yaml, the reference lowering only),
converts two hand-written problems through HTTP two at a time, prints the table and writes one JSON row each with
bench/convert.py's keys (nothing is timed on CPU: the speedups are None). Its deadline logic alone: a run past its
deadline submits nothing and reports every problem as not submitted."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_bench(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "rows.json"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env |= {"PYTHONPATH": f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}", "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, str(ROOT / "bench" / "serve_convert.py"), "--problems", str(ROOT / "tests/capture/problems")]
    cmd += ["--names", "rmsnorm,swiglu", "--sources", "lowering", "--k", "2", "--budget-s", "60"]
    cmd += ["--root", str(tmp_path / "serve"), "--out", str(out), *extra]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done, json.loads(out.read_text())


@pytest.mark.slow  # a bench's smoke run; CI converts through the service in test_service.py
def test_two_problems_convert_through_the_service(tmp_path):
    done, data = run_bench(tmp_path, "--concurrency", "2")
    rows = {r["problem"]: r for r in data["rows"]}
    assert set(rows) == {"rmsnorm.py", "swiglu.py"}
    for r in rows.values():
        assert r["state"] == "succeeded" and r["captured"] and r["correct"], r
        assert not r["kept_original"] and r["triton_fragments"] > 0 and r["solution_lines"] > 0
        assert r["speedup_vs_eager"] is None and r["speedup_vs_compile"] is None  # CPU: verified, not timed
        assert r["candidates"]["lowering"]["correct"] > 0 and r["wall_s"] > 0
    s = data["summary"]
    assert s["problems"] == s["captured"] == s["answered_triton"] == 2
    assert s["geomean_vs_eager"] == 1.0 and s["compile_known"] == 0
    assert "rmsnorm.py" in done.stdout and "2 succeeded" in done.stdout


def test_rows_and_deadline_without_a_service():
    from drtriton_ray.search.runs import Clock, row_of, summary

    gone = Clock(0.0, deadline_s=1.0, grace_s=0.0)  # time.monotonic() is far past 1 s
    assert not gone.may_submit() and gone.over()
    assert Clock(1e12, None, 5.0).may_submit()
    rows = [row_of("a.py", {"state": "not submitted", "error": "past the deadline"}, None, None) | {"wall_s": 0.0}]
    progress = {"candidates": {"lowering": 3}}
    rows.append(row_of("b.py", {"state": "unfinished", "progress": progress}, None, None) | {"wall_s": 9.0})
    assert rows[1]["candidates"] == {"lowering": {"judged": 3}} and not rows[1]["captured"]
    s = summary(rows)
    assert s["captured"] == s["answered_triton"] == 0 and s["geomean_vs_eager"] == 1.0
