"""bench/convert.py's shards on CPU, with no KernelBench, GPU or model: `--shard I/N` splits each level's seeded list
into N disjoint shares whose union is the list; `--merge` joins hand-written shard outputs into one run's JSON (rows
in the list's order, summaries recomputed by `summary`) and refuses inputs that are unreadable or not one experiment;
`gpu_pipeline.sh convert-start` / `convert-wait` with CV_SHARDS=2 start two runs and merge them, without it one run
as before (a stand-in for python3 writes each shard's rows instead of converting); `--resume` keeps an earlier
output's rows and refuses one of another experiment."""

import argparse
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from drtriton_ray.search.runs import MergeError, Shard, merge, parse_shard, problems, shard_problems, summary

ROOT = Path(__file__).resolve().parents[2]

ARGS = {"levels": "2", "count": "4", "seed": "0", "sources": "lowering,model", "budget_s": "45.0", "k": "4"}


def bench(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "bench" / "convert.py"), *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


def row(name: str, eager: float, compile_: float, wall: float, answered: bool = True) -> dict:
    return {
        "problem": name,
        "captured": True,
        "triton_fragments": 2 if answered else 0,
        "kept_original": not answered,
        "correct": True,
        "speedup_vs_eager": eager,
        "speedup_vs_compile": compile_,
        "wall_s": wall,
    }


def shard_output(path: Path, shard: str, rows: list[dict], **args) -> str:
    path.write_text(json.dumps({"args": ARGS | {"shard": shard} | args, "levels": {"2": {"rows": rows}}}))
    return str(path)


def test_shards_partition_the_seeded_list(tmp_path):
    (tmp_path / "level2").mkdir()
    for n in (3, 10, 21, 7, 40):
        (tmp_path / "level2" / f"{n}_Problem.py").write_text("")
    for count in (4, 0):
        full = problems(tmp_path, 2, count, seed=0)
        assert len(full) == (count or 5)
        s0, s1 = (shard_problems(tmp_path, 2, count, 0, Shard(i, 2)) for i in (0, 1))
        assert s0 == full[0::2] and s1 == full[1::2]
        assert not set(s0) & set(s1) and sorted(s0 + s1) == sorted(full)
        assert shard_problems(tmp_path, 2, count, 0) == full  # the default 0/1: the whole list
    assert [p.name.split("_")[0] for p in problems(tmp_path, 2, 0, 0)] == ["3", "7", "10", "21", "40"]


def test_shard_option_is_checked():
    assert parse_shard("1/3") == Shard(1, 3) and str(Shard(1, 3)) == "1/3"
    for bad in ("3/2", "a/b", "0/0", "2", "1/2/3", "-1/2"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_shard(bad)
    for bad in ("3/2", "a/b"):
        done = bench("--shard", bad)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert "argument --shard" in done.stderr and bad in done.stderr


def test_merge_two_shards(tmp_path):
    rows0 = [row("17_A.py", 1.5, 0.9, 20.0), row("57_C.py", 1.0, 1.2, 30.0, answered=False)]
    rows1 = [row("24_B.py", 0.8, 1.1, 25.0), row("98_D.py", 1.2, 0.7, 40.0)]
    inputs = [shard_output(tmp_path / "s1.json", "1/2", rows1), shard_output(tmp_path / "s0.json", "0/2", rows0)]
    out = tmp_path / "merged.json"
    done = bench("--merge", str(out), *inputs)
    assert done.returncode == 0, done.stderr
    assert "level 2: 4 problems" in done.stdout
    data = json.loads(out.read_text())
    rows = data["levels"]["2"]["rows"]
    assert [r["problem"] for r in rows] == ["17_A.py", "24_B.py", "57_C.py", "98_D.py"]  # the unsharded order
    assert data["levels"]["2"]["summary"] == summary(rows0 + rows1)
    assert data["args"]["shard"] == "0/2,1/2" and data["args"]["budget_s"] == "45.0"
    assert [m["path"] for m in data["merged"]] == inputs and {m["shard"] for m in data["merged"]} == {"0/2", "1/2"}


def test_merge_refuses_what_is_not_one_run(tmp_path):
    a = shard_output(tmp_path / "a.json", "0/2", [row("1_A.py", 1.0, 1.0, 1.0)])
    for name, args in (("budget", {"budget_s": "60.0"}), ("sources", {"sources": "lowering"}), ("k", {"k": "5"})):
        b = shard_output(tmp_path / f"{name}.json", "1/2", [row("2_B.py", 1.0, 1.0, 1.0)], **args)
        with pytest.raises(MergeError, match="not shards of one experiment"):
            merge([a, b])
    with pytest.raises(MergeError, match="given twice"):
        merge([a, a])
    c = shard_output(tmp_path / "c.json", "1/3", [])
    with pytest.raises(MergeError, match="different shard counts"):
        merge([a, c])
    _, warnings = merge([a])  # one shard alone merges, with a warning of the missing one
    assert warnings == ["merging without the shards 1/2"]
    (tmp_path / "junk.json").write_text("[1, 2]")
    with pytest.raises(MergeError, match="not bench/convert.py's output"):
        merge([a, str(tmp_path / "junk.json")])
    missing = bench("--merge", str(tmp_path / "out.json"), a, str(tmp_path / "none.json"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "cannot read the shard output" in missing.stderr and not (tmp_path / "out.json").exists()
    differ = bench("--merge", str(tmp_path / "out.json"), a, str(tmp_path / "budget.json"))
    assert differ.returncode == 2 and "budget_s 45.0 vs 60.0" in differ.stderr


FAKE_RUN = """#!{python}
# python3 for gpu_pipeline.sh: bench/convert.py's shard runs write rows of their share of five problems at once
import json, os, sys
argv = sys.argv[1:]
if argv[:1] != ["bench/convert.py"] or "--merge" in argv:
    os.execv(sys.executable, [sys.executable, *argv])
shard, out = argv[argv.index("--shard") + 1] if "--shard" in argv else "0/1", argv[argv.index("--out") + 1]
i, n = map(int, shard.split("/"))
rows = []
for k, name in list(enumerate(["4_A.py", "9_B.py", "17_C.py", "23_D.py", "31_E.py"]))[i::n]:
    rows.append(dict(problem=name, captured=True, triton_fragments=1, kept_original=False, correct=True,
                     speedup_vs_eager=1.0 + k / 10, speedup_vs_compile=1.0, wall_s=10.0 + k))
    print(f"L2 {{name}}: ok", file=sys.stderr)
args = dict(levels="2", count="5", seed="0", sources="lowering,model", budget_s=argv[argv.index("--budget-s") + 1],
            k="4", shard=shard, out=out)
json.dump({{"args": args, "levels": {{"2": {{"rows": rows}}}}}}, open(out, "w"))
"""


def test_pipeline_runs_and_merges_shards(tmp_path):
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text(FAKE_RUN.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    state, out = tmp_path / "state", tmp_path / "out"
    env = {**os.environ, "GPU_TMP": str(state), "OUT": str(out), "CV_SHARDS": "2"}
    env["PATH"] = f"{fake.parent}{os.pathsep}{os.environ['PATH']}"

    def sh(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "bench/gpu_pipeline.sh", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip

    started = sh("convert-start", "5", "30")
    assert started.returncode == 0, started.stderr
    assert "--shard 0/2 --out" in started.stdout and "--shard 1/2 --out" in started.stdout
    del env["CV_SHARDS"]  # convert-wait counts the shards convert-start started
    waited = sh("convert-wait", "60")
    assert waited.returncode == 0, waited.stderr
    assert "shard 0/2: 3 problems done" in waited.stdout and "shard 1/2: 2 problems done" in waited.stdout
    assert "level 2: 5 problems" in waited.stdout
    data = json.loads((out / "convert_kb.json").read_text())
    assert [r["problem"] for r in data["levels"]["2"]["rows"]] == ["4_A.py", "9_B.py", "17_C.py", "23_D.py", "31_E.py"]
    assert data["args"]["budget_s"] == "30" and len(data["merged"]) == 2
    assert (out / "convert_kb_0.json").is_file() and (out / "convert_kb_1.cmd").is_file()

    single = sh("convert-start", "5", "30")  # CV_SHARDS unset: the one run, no --shard, convert_kb.json as before
    assert single.returncode == 0 and "--shard" not in single.stdout and single.stdout.count("--out") == 1
    waited = sh("convert-wait", "60")
    assert waited.returncode == 0 and "L2 31_E.py: ok" in waited.stdout and "shard" not in waited.stdout
    assert json.loads((out / "convert_kb.json").read_text())["args"]["shard"] == "0/1"


def test_a_row_names_the_sources_of_its_candidates_and_its_answer(tmp_path):
    from drtriton_ray.search.runs import convert_one
    from drtriton_ray.verify import Limits, WorkerPool

    args = argparse.Namespace(device="cpu", budget_s=60.0, k=2, sources="lowering", model=None, samples=1)
    args.__dict__.update(max_tokens=256, seed=0, cache=None)
    with WorkerPool("cpu", size=1, limits=Limits(task_timeout_s=120), root=str(tmp_path)) as pool:
        r = convert_one(ROOT / "tests/capture/problems/rmsnorm.py", args, pool)
    assert r["captured"] and not r["kept_original"] and r["correct"], r
    assert r["candidates"]["lowering"]["correct"] > 0 and set(r["candidates"]) == {"lowering"}
    assert r["chosen"] == {"lowering": r["triton_fragments"]} and r["triton_fragments"] > 0


# what `bench/convert.py --levels 2 --count 0 --device cpu --sources lowering` records of the experiment
RUN_ARGS = ARGS | {"count": "0", "sources": "lowering", "budget_s": "120.0", "k": "5", "model": "None"}
RUN_ARGS |= {"samples": "4", "max_tokens": "1024", "device": "cpu"}


def test_resume_keeps_the_rows_done_and_refuses_another_experiment(tmp_path):
    (tmp_path / "level2").mkdir()
    for name in ("3_A.py", "8_B.py"):
        (tmp_path / "level2" / name).write_text("")
    earlier = tmp_path / "earlier.json"
    rows = [row("3_A.py", 1.5, 0.9, 20.0), row("8_B.py", 1.0, 1.2, 30.0, answered=False)]
    earlier.write_text(json.dumps({"args": RUN_ARGS | {"shard": "0/2,1/2"}, "levels": {"2": {"rows": rows}}}))
    run = ["--kernelbench", str(tmp_path), "--levels", "2", "--count", "0", "--device", "cpu", "--workers", "1"]
    out = tmp_path / "out.json"
    done = bench(*run, "--sources", "lowering", "--resume", str(earlier), "--out", str(out))
    assert done.returncode == 0, done.stderr
    kept = json.loads(out.read_text())["levels"]["2"]["rows"]
    assert kept == [dict(r, resumed_from=str(earlier)) for r in rows]  # both done before: nothing converted again
    other = bench(*run, "--sources", "lowering", "--budget-s", "30", "--resume", str(earlier), "--out", str(out))
    assert other.returncode == 1 and "Traceback" not in other.stderr
    assert "not an output of this experiment (budget_s differ)" in other.stderr
