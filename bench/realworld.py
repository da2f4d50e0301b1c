"""`drtriton convert` over the real-world suite (tests/realworld/suite.toml and programs/: Hugging Face blocks,
bf16/fp16, causal masks built in forward, cross-entropy with ignore_index, MoE routing, in-place ops, ...): per
program, whether it is captured, how many Triton fragments its answer holds, whether the answer re-verifies, on a GPU
its eager, compile and answer times, and whether the answer is right at shapes it was never verified at.

    python bench/realworld.py --device cpu --budget-s 60 --out realworld.json
    python bench/realworld.py --device cuda --sizes llm --dtype bfloat16 --only hf_llama_rmsnorm,rmsnorm

The manifest (suite.toml) gives each program its kinds, LLM sizes and dynamic dims; the variants it declares (e.g.
a file's bfloat16 twin) are programs of their own. `--sizes llm` rewrites each program's module-level size
constants to its LLM sizes before converting; `--dtype` rewrites its `dtype = torch....` constant. One verifier
pool serves every program; a program's failure (a capture error, a rejected request, any exception) is recorded in
its row and the run goes on. `--out` is rewritten after every program.

The shape-generality check: each answer's ModelNew, loaded with the original Model's state_dict, is called at two
other values of the program's dynamic size constants (+1, and x2 at small sizes or /2 at LLM sizes) and compared with
the original in eager PyTorch: "right", "wrong" (max abs error, or a wrong shape), "refused" (it raised), or
"broken" (the answer did not load or take the state_dict). It runs in a child process (an out-of-bounds kernel
must not take the bench down), with TRITON_INTERPRET=1 on CPU."""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import save  # noqa: E402  (bench/, the script's own folder)

from drtriton_ray.eval.realworld import Program, assigned, constants, set_constant, suite  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "tests" / "realworld" / "suite.toml"
TOLERANCE = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 3e-2}  # atol = rtol, by the output's dtype
DTYPES = ("float32", "float16", "bfloat16")
OUTCOMES = ("right", "wrong", "refused", "broken")


def suite_programs(only: str | None) -> dict[str, Program]:
    """Name -> program of the suite (files and the variants the manifest declares), or of the ones named."""
    programs = suite(MANIFEST)
    if not only:
        return programs
    wanted = [n.strip().removesuffix(".py") for n in only.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in programs]
    if unknown:
        sys.exit(f"error: no program {', '.join(unknown)} in {MANIFEST}")
    return {n: programs[n] for n in wanted}


def sized_source(program: Program, sizes: str, dtype: str | None) -> str:
    """The program at its small sizes or its LLM sizes, in its own dtype or `dtype` (where it declares one)."""
    source = program.source
    if sizes == "llm":
        for name, value in program.llm_sizes.items():
            source = set_constant(source, name, repr(value))
    if dtype and "dtype" in assigned(source):
        source = set_constant(source, "dtype", f"torch.{dtype}")
    return source


def other_shapes(program: Program, source: str, sizes: str) -> list[dict]:
    """Two assignments of the program's dynamic constants that the answer (of `source`) was not verified at."""
    values = constants(source)
    second = (lambda v: v * 2) if sizes == "small" else (lambda v: max(1, v // 2))
    return [{d: values[d] + 1 for d in program.dynamic}, {d: second(values[d]) for d in program.dynamic}]


def one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}"[:300]


def crash_excerpt(e: BaseException) -> str:
    """The innermost frames of a traceback, where it went through drtriton_ray: where the product crashed."""
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if "drtriton_ray" in f.filename]
    keep = (ours or frames)[-3:]
    lines = [f"{Path(f.filename).name}:{f.lineno} {f.name}: {f.line}" for f in keep]
    return " | ".join(lines + [one_line(e)])


def reverify(pool, problem: str, answer: str, device: str, policy: str):
    """The answer judged again by the verifier under the policy the search judged it by (hybrid: PyTorch nodes
    kept beside Triton kernels, as a kept original is all PyTorch)."""
    from drtriton_ray.verify import Task

    task = Task(problem, answer, policy=policy, seed=0, timing=device.startswith("cuda"))
    return pool.verify([task])[0]


def convert_program(program: Program, source: str, args, pool) -> tuple[dict, str | None]:
    """One program's row (conversion part) and its answer's source (None where conversion failed): the program
    converted from `source`, its text at the sizes and dtype asked for."""
    from drtriton_ray.capture.errors import CaptureError
    from drtriton_ray.convert import ConversionError, convert
    from drtriton_ray.search.runs import report_fields

    row = {"program": program.name, "kinds": list(program.kinds), "captured": False, "triton_fragments": 0}
    t0 = time.monotonic()
    try:
        result = convert(source, device=args.device, budget_s=args.budget_s, sources=args.sources.split(","),
                         k=args.k, cache=args.cache, seed=args.seed, verifier=pool,
                         dynamic=list(program.dynamic))  # fmt: skip
    except (CaptureError, ConversionError) as e:
        row.update(error=one_line(e), wall_s=time.monotonic() - t0)
        return row, None
    except Exception as e:  # noqa: BLE001 (a product crash: recorded, the run goes on)
        row.update(error=one_line(e), crash=crash_excerpt(e), wall_s=time.monotonic() - t0)
        return row, None
    r = result.report
    e2e = r.end_to_end or {}
    row.update(
        **report_fields(r),
        reason=" ".join(str(r.reason).split())[:300],
        search_correct=e2e.get("correct"),
        policy=e2e.get("policy"),
        general=r.general,  # every kernel verified at the other sizes too (None: no dim varies)
        memory_bound=memory_bound(r.program.get("ops", [])),
        verified_shapes=len(r.shapes or []),  # the sizes the answer was verified at, its own first
        candidates=r.candidates,  # per source: what it proposed, what verified, why fragments got nothing
        rejected=r.rejected,  # the candidates the verifier refused, with its reasons
        tiling=[tile(p) for p in r.tiling],  # which nodes are Triton (and whose kernels) and which stay PyTorch
        wall_s=r.wall_s,
    )
    return row, result.module_source


def tile(piece: dict) -> str:
    """A tiling piece in a row: its operators, then triton (the candidate source of its kernels) or torch."""
    origin = f"({piece['origin']})" if piece.get("origin") else ""
    return f"{'+'.join(piece['ops'])}: {piece['kind']}{origin}"


def judge_answer(row: dict, program: Program, source: str, answer: str, args, pool) -> None:
    """The answer re-verified at its sample shape (times on a GPU), then called at other shapes; a kept original,
    which is the program itself, timed as it is (its eager time against compile's)."""
    if row.get("kept_original", True):
        judge_original(row, source, pool)
        row["other_shapes"] = shape_check(source, answer, other_shapes(program, source, args.sizes), args.device)
        return
    try:
        verdict = reverify(pool, source, answer, args.device, row.get("policy") or "hybrid")
        row.update(correct=verdict.correct, verdict=verdict.status, verdict_reason=verdict.reason[:300])
        row.update(eager_ms=verdict.eager_ms, compile_ms=verdict.compile_ms, answer_ms=verdict.candidate_ms)
        row.update(speedup_vs_eager=verdict.speedup_vs_eager, speedup_vs_compile=verdict.speedup_vs_compile)
        row.update(bytes_moved=verdict.bytes_moved, answer_gbps=gbps(verdict.bytes_moved, verdict.candidate_ms))
        row.update(compile_gbps=gbps(verdict.bytes_moved, verdict.compile_ms))
        if args.peak_gbps and row["answer_gbps"]:
            row["roofline"] = row["answer_gbps"] / args.peak_gbps
    except Exception as e:  # noqa: BLE001
        row.update(correct=False, verdict="error", verdict_reason=one_line(e))
    row["other_shapes"] = shape_check(source, answer, other_shapes(program, source, args.sizes), args.device)


def judge_original(row: dict, source: str, pool) -> None:
    """A kept original's row: right by construction (it is the program), its speed the program's eager time
    against torch.compile's (the verifier's reference times, GPU only): the suite's geomean counts every program."""
    times = pool.time_reference(source) or {}
    eager, compiled = times.get("eager_ms"), times.get("compile_ms")
    row.update(correct=True, verdict="original", eager_ms=eager, compile_ms=compiled, answer_ms=eager)
    if eager and compiled:
        row.update(speedup_vs_eager=1.0, speedup_vs_compile=compiled / eager)


# operators whose time is arithmetic rather than memory traffic; a program with none (and no PyTorch node, whose
# cost is unknown) is memory-bound, and its answer is judged by the bandwidth it reaches
CONTRACTIONS = ("Matmul", "Bmm", "Linear", "Conv", "Einsum", "Baddbmm", "Addmm", "Torch")


def memory_bound(ops: list[str]) -> bool:
    return bool(ops) and not any(op.startswith(CONTRACTIONS) for op in ops)


def gbps(nbytes, ms) -> float | None:
    return nbytes / (ms * 1e6) if nbytes and ms else None


def copy_gbps(device: str) -> float:
    """The device's memory bandwidth as a large copy reaches it (read and write counted), best of ten: the roofline
    the memory-bound answers are held to."""
    import torch

    src = torch.empty(2**28, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    best = math.inf
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end))
    return gbps(2 * src.nbytes, best)


def shape_check(source: str, answer: str, shapes: list[dict], device: str) -> list[dict]:
    """Run `check_shapes` in a child process; a child that dies counts each unchecked shape as wrong."""
    env = dict(os.environ)
    if not device.startswith("cuda"):
        env["TRITON_INTERPRET"] = "1"
    request = json.dumps({"source": source, "answer": answer, "shapes": shapes, "device": device})
    try:
        done = subprocess.run([sys.executable, __file__, "--shape-check"], input=request, capture_output=True,
                              text=True, env=env, timeout=900)  # fmt: skip
    except subprocess.TimeoutExpired:
        return [dict(shape=s, outcome="refused", detail="timed out after 900 s") for s in shapes]
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    results = [json.loads(x) for x in lines]
    tail = " ".join(done.stderr.strip().splitlines()[-1:])[:200]
    for s in shapes[len(results) :]:
        results.append(dict(shape=s, outcome="wrong", detail=f"the process died (exit {done.returncode}): {tail}"))
    return results


def load_source(text: str, name: str):
    """Import `text` from a file of its own: compiled Triton reads a @jit function's source from its file (exec'd
    text works only in the interpreter)."""
    import importlib.util
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="realworld-")) / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and triton's source lookup need the module registered
    spec.loader.exec_module(module)
    return module


def compare(expected, got) -> tuple[str, str]:
    import torch

    exp = expected if isinstance(expected, (tuple, list)) else (expected,)
    out = got if isinstance(got, (tuple, list)) else (got,)
    if len(exp) != len(out):
        return "wrong", f"{len(out)} outputs, expected {len(exp)}"
    worst = 0.0
    for e, g in zip(exp, out):
        if not isinstance(g, torch.Tensor) or tuple(g.shape) != tuple(e.shape):
            return "wrong", f"shape {tuple(getattr(g, 'shape', ()))}, expected {tuple(e.shape)}"
        g = g.detach().to("cpu")
        if not e.is_floating_point():
            if not torch.equal(g.to(e.dtype), e):
                return "wrong", "integer output differs"
            continue
        tol = TOLERANCE.get(str(e.dtype).removeprefix("torch."), 1e-3)
        err = (g.float() - e.float()).abs().nan_to_num(nan=math.inf)
        err = err.masked_fill(torch.isinf(e.float()) & (g.float() == e.float()), 0.0)
        worst = max(worst, float(err.max()) if err.numel() else 0.0)
        if not torch.allclose(g.float(), e.float(), atol=tol, rtol=tol, equal_nan=True):
            return "wrong", f"max abs error {worst:.3g}"
    return "right", f"max abs error {worst:.3g}"


def check_shapes() -> int:
    """Child side of `shape_check`: one JSON line per shape on stdout."""
    import torch

    req = json.loads(sys.stdin.read())
    device = req["device"]
    program = load_source(req["source"], "realworld_program")
    torch.manual_seed(0)
    model = program.Model(*program.get_init_inputs()).to(device).eval()
    try:
        answer = load_source(req["answer"], "realworld_answer")
        new = answer.ModelNew(*program.get_init_inputs()).to(device).eval()
        new.load_state_dict(model.state_dict())
    except Exception as e:  # noqa: BLE001
        for shape in req["shapes"]:
            print(json.dumps({"shape": shape, "outcome": "broken", "detail": one_line(e)}), flush=True)
        return 0
    for shape in req["shapes"]:
        for name, value in shape.items():
            setattr(program, name, value)
        torch.manual_seed(1)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in program.get_inputs()]
        with torch.no_grad():
            expected = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
            expected = tuple(e.to("cpu") for e in expected) if isinstance(expected, tuple) else expected.to("cpu")
            try:
                got = new(*inputs)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                outcome, detail = compare(expected, got)
            except Exception as e:  # noqa: BLE001 (a clear error is the acceptable refusal)
                outcome, detail = "refused", one_line(e)
        print(json.dumps({"shape": shape, "outcome": outcome, "detail": detail}), flush=True)
    return 0


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v]
    return math.exp(statistics.mean(math.log(v) for v in values)) if values else None


def summary(rows: list[dict]) -> dict:
    answers = [r for r in rows if r.get("captured") and not r.get("kept_original", True)]
    shapes = [s["outcome"] for r in answers for s in r.get("other_shapes", [])]
    originals = [s["outcome"] for r in rows if r not in answers for s in r.get("other_shapes", [])]
    return {
        "programs": len(rows),
        "captured": sum(bool(r["captured"]) for r in rows),
        "with_triton": sum(r["triton_fragments"] > 0 for r in rows),
        "triton_answers": len(answers),
        "correct_at_sample": sum(bool(r.get("correct")) for r in answers),
        "answers_reverified_correct": sum(bool(r.get("correct")) for r in answers),
        "failed": sum("error" in r for r in rows),
        "other_shapes": {k: shapes.count(k) for k in OUTCOMES},  # of the Triton answers
        "other_shapes_kept_original": {k: originals.count(k) for k in OUTCOMES},
        "geomean_vs_eager": geomean([r.get("speedup_vs_eager") for r in answers if r.get("correct")]),
        "geomean_vs_compile": geomean([r.get("speedup_vs_compile") for r in answers if r.get("correct")]),
        # issue 45's measure: every program timed, a kept original at its own speed
        "geomean_vs_compile_all": geomean([r.get("speedup_vs_compile") for r in rows if r.get("correct")]),
        "below_0.9x_compile": sum((r.get("speedup_vs_compile") or 1) < 0.9 for r in rows if r.get("correct")),
        # memory-bound correct answers, and those reaching 85% of the copy bandwidth (GPU)
        "memory_bound": sum(bool(r.get("memory_bound") and r.get("correct")) for r in answers),
        "memory_bound_at_85pct": sum((r.get("roofline") or 0) >= 0.85 for r in answers if r.get("memory_bound")),
    }


def fmt(value, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def shapes_cell(row: dict) -> str:
    return " ".join(s["outcome"] for s in row.get("other_shapes", [])) or "-"


def result_table(rows: list[dict], device: str) -> Table:
    t = Table(title=f"real-world suite: {len(rows)} programs")
    timed = device.startswith("cuda")
    heads = ["program", "kinds", "captured", "triton", "correct", "other shapes"]
    heads += ["eager ms", "compile ms", "answer ms", "vs eager", "vs compile", "GB/s", "x peak"] if timed else []
    for h in heads + ["failure"]:
        t.add_column(h)
    for r in rows:
        correct = "-" if "correct" not in r else ("yes" if r["correct"] else "NO")
        origins = ",".join(sorted(set(r.get("origins") or [])))  # the sources of the answer's kernels
        triton = f"{r['triton_fragments']} {origins}".strip()
        cells = [r["program"], ",".join(r["kinds"]), "yes" if r["captured"] else "no", triton]
        cells += [correct, shapes_cell(r)]
        if timed:
            cells += [fmt(r.get("eager_ms")), fmt(r.get("compile_ms")), fmt(r.get("answer_ms"))]
            cells += [fmt(r.get("speedup_vs_eager"), ".2f"), fmt(r.get("speedup_vs_compile"), ".2f")]
            bound = "" if r.get("memory_bound") else "*"  # not memory-bound: the roofline is not its limit
            cells += [fmt(r.get("answer_gbps"), ".0f"), fmt(r.get("roofline"), ".2f") + bound]
        t.add_row(*cells, failure(r)[:160])
    return t


def failure(row: dict) -> str:
    """One line: the conversion's error, else the re-verification's refusal, else why the original was kept."""
    if row.get("error"):
        return row["error"]
    if "correct" in row and not row["correct"]:
        return f"re-verify: {row.get('verdict')}: {row.get('verdict_reason')}"
    return row.get("reason", "") if row.get("kept_original", True) else ""


def summary_table(s: dict) -> Table:
    t = Table(title="summary")
    t.add_column("measure")
    t.add_column("value", justify="right")
    keys = ("programs", "captured", "with_triton", "triton_answers", "correct_at_sample", "answers_reverified_correct")
    for key in keys + ("failed",):
        t.add_row(key.replace("_", " "), str(s[key]))
    for key, n in s["other_shapes"].items():
        t.add_row(f"Triton answers at other shapes: {key}", str(n))
    for key, n in s["other_shapes_kept_original"].items():
        t.add_row(f"kept originals at other shapes: {key}", str(n))
    t.add_row("geomean vs eager (correct answers)", fmt(s["geomean_vs_eager"], ".2f"))
    t.add_row("geomean vs compile (correct answers)", fmt(s["geomean_vs_compile"], ".2f"))
    t.add_row("geomean vs compile (every program, originals kept too)", fmt(s["geomean_vs_compile_all"], ".2f"))
    t.add_row("programs below 0.9x compile", str(s["below_0.9x_compile"]))
    t.add_row("memory-bound answers at >= 85% of peak", f"{s['memory_bound_at_85pct']} of {s['memory_bound']}")
    return t


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=None, help="comma-separated program names (default: the whole suite)")
    ap.add_argument("--sizes", choices=("small", "llm"), default="small")
    ap.add_argument("--dtype", choices=DTYPES, default=None, help="override each program's dtype constant")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--budget-s", type=float, default=120.0, help="search seconds per program")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--sources", default="lowering")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default=None, help="search cache (default: none, so a rerun measures the search)")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="verifier wall clock per task")
    ap.add_argument("--out", default=None)
    ap.add_argument("--answers", type=Path, default=None, help="a folder to write each answer (NAME.py) into")
    ap.add_argument("--peak-gbps", type=float, default=None, help="the roofline's bandwidth (GPU default: measured)")
    ap.add_argument("--shape-check", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main() -> int:
    args = parse_args()
    if args.shape_check:
        return check_shapes()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from report import finish  # bench/, the script's own folder

    from drtriton_ray.verify import Limits, WorkerPool

    programs = suite_programs(args.only)
    if args.peak_gbps is None and args.device.startswith("cuda"):
        args.peak_gbps = copy_gbps(args.device)
    size = args.workers or (4 if args.device.startswith("cuda") else 2)
    rows: list[dict] = []
    record = {k: str(v) for k, v in vars(args).items() if k != "shape_check"}
    with WorkerPool(args.device, size=size, limits=Limits(task_timeout_s=args.timeout_s), name="realworld") as pool:
        pool.wait_ready()  # the workers' start-up is not the first program's search budget
        for name, program in programs.items():
            source = sized_source(program, args.sizes, args.dtype)
            row, answer = convert_program(program, source, args, pool)
            if answer is not None and args.answers:
                args.answers.mkdir(parents=True, exist_ok=True)
                (args.answers / f"{name}.py").write_text(answer)
            if answer is not None:
                judge_answer(row, program, source, answer, args, pool)
            rows.append(row)
            print(f"{name}: {row.get('error') or row.get('reason')} triton {row['triton_fragments']} "
                  f"correct {row.get('correct')} shapes {shapes_cell(row)} {row['wall_s']:.0f}s",
                  file=sys.stderr, flush=True)  # fmt: skip
            save(args.out, {"args": record, "rows": rows, "summary": summary(rows)})
    data = {"args": record, "rows": rows, "summary": summary(rows)}
    return finish([result_table(rows, args.device), summary_table(data["summary"])], data, args.out)


if __name__ == "__main__":
    sys.exit(main())
