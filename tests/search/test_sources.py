"""Candidate sources without a model: the lowering, launch-config variants, and the refine source's choices."""

import ast
import textwrap
from pathlib import Path

from search_graphs import mlp_block, norm_block

from drtriton_ray.search.fragments import enumerate_fragments
from drtriton_ray.search.inductor import InductorSource
from drtriton_ray.search.sources import (
    Attempt,
    Budget,
    Candidate,
    ConfigSource,
    LoweringSource,
    RefineSource,
    VerdictSummary,
    block_sizes,
    config_variants,
    feedback,
)


def fragments():
    return [f for f in enumerate_fragments(mlp_block()) if not f.skip]


def test_lowering_proposes_for_registry_fragments_only():
    src = LoweringSource()
    frags = fragments()
    cands = src.propose(frags, Budget(100, 60))
    with_torch = [f for f in frags if "mul.Tensor" in f.ops]
    assert len(cands) == len(frags) - len(with_torch) and all(c.source == "lowering" for c in cands)
    assert all("class ModelNew" in c.code for c in cands)
    assert sum(src.stats.failed.values()) == len(with_torch)
    assert len(LoweringSource().propose(frags, Budget(2, 60))) == 2  # the budget caps it


def test_config_variants_parse_differ_and_keep_block_literals_consistent():
    """A candidate launching with literal BLOCK sizes (how models write kernels) gets BLOCK x2 / /2 variants whose
    grid follows the block, and num_warps / num_stages variants."""
    code = (Path(__file__).resolve().parents[1] / "verify" / "candidates" / "good_relu.py").read_text()
    base = ast.unparse(ast.parse(code))
    variants = config_variants(code, 6)
    assert len(variants) == 6
    texts = [v for v, _ in variants]
    assert len(set(texts)) == 6 and base not in texts
    for text, note in variants:
        tree = ast.parse(text)
        if note.startswith("BLOCK x2"):
            assert 4096 not in block_sizes(tree) and 8192 in block_sizes(tree)
            assert "triton.cdiv(n, 8192)" in text  # the grid follows the block
        if "num_warps=8" in note:
            assert "num_warps=8" in text
    assert config_variants("import torch\nx = 1\n") == []  # no launch, nothing to vary


def test_lowering_candidates_vary_in_warps_and_stages():
    """The lowering launches with its setup's (tuned) tile sizes, so only warps and stages vary there."""
    (f,) = [f for f in fragments() if f.ops == ["GELU", "Add"]]
    code = LoweringSource().propose([f], Budget(1, 60))[0].code
    notes = [note for _, note in config_variants(code, 6)]
    assert notes and all(n.startswith(("num_warps", "num_stages")) for n in notes)


def test_lowering_candidates_vary_their_tuned_kernels_and_stay_correct():
    """A fragment with a Linear: variants set the matmul kernel's tiles (lower/tuning.py's candidates) where the
    emitter would put a tuned config, and every variant still verifies (the interpreter keeps its own tiles)."""
    from drtriton_ray.verify import Task, WorkerPool

    (f,) = [f for f in fragments() if f.ops == ["Linear", "GELU"]]
    code = LoweringSource().propose([f], Budget(1, 60))[0].code
    variants = config_variants(code, 3)
    assert len(variants) == 3 and all(note.startswith("matmul_kernel {") for _, note in variants)
    assert all("config={'BM'" in text for text, _ in variants)
    with WorkerPool("cpu", size=1) as pool:
        verdicts = pool.verify([Task(f.source, text, seed=1, timing=False) for text, _ in variants[:2]])
    assert all(v.correct for v in verdicts), [v.reason for v in verdicts]


def summary(status="correct", ms=None, eager=None):
    return VerdictSummary(status, "r", status == "correct", ms, eager)


def test_config_source_varies_the_fastest_correct_candidate_once():
    f = fragments()[1]
    a = Attempt(Candidate(f.hash, "lowering", LoweringSource().propose([f], Budget(1, 9))[0].code), summary(ms=2.0))
    src = ConfigSource(variants=2)
    first = src.propose([f], Budget(10, 60), [a])
    assert len(first) == 2 and all(c.parent == a.candidate.id for c in first)
    assert src.propose([f], Budget(10, 60), [a]) == []  # varied already
    assert ConfigSource().propose([f], Budget(10, 60), []) == []  # nothing verified: nothing to vary


def test_feedback_says_what_failed_or_how_fast():
    assert "value_mismatch" in feedback(VerdictSummary("value_mismatch", "output 0 off"))
    text = feedback(VerdictSummary("correct", "", True, 2.0, 1.0, 0.5))
    assert "2.0000 ms" in text and "eager 1.0000 ms" in text and "torch.compile 0.5000 ms" in text


def test_refine_picks_the_models_attempt_that_can_improve():
    f = fragments()[0]
    src = RefineSource(policy=None)
    fast = Attempt(Candidate(f.hash, "model", "a"), summary(ms=0.5, eager=1.0))
    slow = Attempt(Candidate(f.hash, "model", "b"), summary(ms=2.0, eager=1.0))
    broken = Attempt(Candidate(f.hash, "model", "c"), summary("runtime_error"))
    lowering = Attempt(Candidate(f.hash, "lowering", "d"), summary("runtime_error"))
    assert src.pick(f, [fast, lowering]) is None  # faster than eager already; the lowering is not the model's
    assert src.pick(f, [fast, slow, broken]) is slow
    assert src.pick(f, [broken]) is broken
    bad = Attempt(Candidate(f.hash, "model", "e"), summary("bad_problem"))
    assert src.pick(f, [bad]) is None


def test_refine_asks_the_model_a_second_turn(tiny_dir):
    from drtriton_ray.search.sources import PolicyModel

    f = fragments()[0]
    policy = PolicyModel(tiny_dir, max_tokens=8)
    try:
        policy.warm()  # what the service's Policy replica does first: the engine is loaded before any search
        assert policy.engine is not None and policy.generate_s == 0
        src = RefineSource(policy, seed=0)
        failed = Attempt(Candidate(f.hash, "model", "class ModelNew: pass"), summary("runtime_error"))
        cands = src.propose([f], Budget(4, 60), [failed])
        assert src.stats.asked == 1 and policy.generate_s > 0
        assert all(c.parent == failed.candidate.id and c.source == "refine" for c in cands)
        assert src.propose([f], Budget(4, 60), [failed]) == [] and src.stats.asked == 1  # one second turn each
    finally:
        policy.close()


def test_proposals_made_after_the_seconds_ran_out_get_one_batch_judged(pool):
    """A model's decoding can use up the seconds: its answers, already paid for, still get one verifier batch (and
    no more); a spent candidate count stops everything."""
    from drtriton_ray.search.search import Search
    from drtriton_ray.search.settings import ConversionSettings

    frags = [f for f in fragments() if "mul.Tensor" not in f.ops]
    candidates = LoweringSource().propose(frags, Budget(100, 60))
    assert len(candidates) > 2
    late = Search(ConversionSettings(budget_s=0.0, batch=2, cache=None), pool)
    late.fragments = {f.hash: f for f in frags}
    late.run(candidates)
    assert late.budget().spent and late.verified == 2 and len(late.attempts) == 2
    assert all(a.outcome.status for a in late.attempts)
    none_left = Search(ConversionSettings(budget_s=60.0, max_candidates=0, batch=2, cache=None), pool)
    none_left.fragments = {f.hash: f for f in frags}
    none_left.run(candidates)
    assert none_left.verified == 0


def test_a_spent_budget_still_gets_the_lowerings_candidates_judged_the_largest_fragments_first(pool):
    """A cold start (workers, capture) can spend the seconds before any source runs: round one still has the lowering
    propose, since its candidates cost nothing to make, and its first batch is the largest fragments' (the pieces the
    tiling wants), not the single nodes'. Sources that cost seconds are not asked."""
    from drtriton_ray.search.search import Search
    from drtriton_ray.search.settings import ConversionSettings

    frags = [f for f in fragments() if "mul.Tensor" not in f.ops]
    late = Search(ConversionSettings(budget_s=0.0, batch=2, cache=None), pool)
    late.fragments = {f.hash: f for f in frags}
    sources = {"lowering": LoweringSource(), "inductor": InductorSource("cuda", pool)}
    late.propose_all(sources, frags)
    largest = sorted((f.size for f in frags), reverse=True)[:2]
    assert late.verified == 2 and [late.fragments[a.candidate.fragment].size for a in late.attempts] == largest
    assert sources["lowering"].stats.asked == len(frags) and sources["inductor"].stats.asked == 0


def test_warps_and_stages_variants_of_a_launch_with_a_config_dict_override_it():
    """The lowering's tuned wrappers launch `kernel[grid](*args, **meta)` with num_warps inside meta (on a GPU); a
    variant's num_warps goes into that dict rather than beside it, where the launch would raise TypeError (got
    multiple values for keyword argument 'num_warps')."""
    code = textwrap.dedent(
        """
        def run(kernel, x):
            meta = {'BLOCK': 1024, 'num_warps': 4}
            kernel[(1,)](x, **meta)
        """
    )
    variants = dict((note, text) for text, note in config_variants(code, 6))
    assert {"num_warps=8", "num_warps=2", "num_stages=3"} <= set(variants)

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **kw: launched.append(kw)

    for note, text in variants.items():
        launched: list = []
        namespace: dict = {}
        exec(compile(text, "variant", "exec"), namespace)
        namespace["run"](Kernel(), 0)
        (kw,) = launched
        option, value = note.split("=")
        assert kw[option] == int(value) and kw["BLOCK"] == 1024, (note, kw)
        assert option == "num_warps" or kw["num_warps"] == 4


def test_summary_gives_the_bandwidth_reached_and_survives_the_cache():
    """A timed verdict's least memory traffic and time a call give the GB/s the report and `drtriton convert` print;
    the summary, as the cache stores it, rebuilds (older entries without bytes_moved too); untimed: nothing."""
    from types import SimpleNamespace

    from drtriton_ray.search.cli import timed_rows

    verdict = SimpleNamespace(status="correct", reason="", correct=True, candidate_ms=0.5, eager_ms=2.0,
                              compile_ms=0.6, speedup_vs_eager=4.0, speedup_vs_compile=1.2, general=True,
                              bytes_moved=2_000_000_000)  # fmt: skip
    s = VerdictSummary.of(verdict)
    assert s.gbps() == 4000.0 and VerdictSummary(**s.to_dict()) == s
    old = {k: v for k, v in s.to_dict().items() if k != "bytes_moved"}
    assert VerdictSummary(**old).gbps() is None
    rows = dict(timed_rows({**s.to_dict(), "gbps": s.gbps()}))
    assert rows["ms eager / torch.compile / answer"] == "2 / 0.6 / 0.5"
    assert rows["memory traffic"] == "2000 MB a call at least, 4000 GB/s reached"
    assert timed_rows({**VerdictSummary("correct", "", True).to_dict(), "gbps": None}) == []


def test_lowering_adds_a_one_pass_variant_for_norms_of_rows_up_to_4096():
    """A fragment with a norm of 1,025 to 4,096 values a row gets a second lowering candidate (its rows read once,
    lower/passes.py one_pass_norms) after every fragment's own; the verifier's timings choose. Short rows get one."""
    wide = [f for f in enumerate_fragments(norm_block(3000)) if not f.skip]
    cands = LoweringSource().propose(wide, Budget(100, 60))
    notes = [c.note for c in cands]
    assert notes.count("reference lowering") == len(wide) and notes.count("reference lowering, norms in one pass") == 2
    assert all("row_norm_persistent" in c.code for c in cands if c.note.endswith("one pass"))
    assert [c.note for c in LoweringSource().propose(wide, Budget(len(wide), 60))] == ["reference lowering"] * len(wide)
    narrow = [f for f in enumerate_fragments(norm_block(512)) if not f.skip]
    assert {c.note for c in LoweringSource().propose(narrow, Budget(100, 60))} == {"reference lowering"}


def test_candidates_the_verifier_refuses_are_reported_with_where_and_why(pool):
    """A wrong candidate (the lowering's, its result doubled) is verified, refused, and listed in the report's
    `rejected`: its fragment, its source and the verifier's reason in one line; the right ones are not listed."""
    from drtriton_ray.search.search import ConversionReport, Search
    from drtriton_ray.search.settings import ConversionSettings

    graph = mlp_block()
    frags = [f for f in enumerate_fragments(graph) if not f.skip and f.size == 1 and "mul.Tensor" not in f.ops][:2]
    right, other = LoweringSource().propose(frags, Budget(100, 60))
    doubled = "\n\n_drt_forward = ModelNew.forward\nModelNew.forward = lambda self, *a: _drt_forward(self, *a) * 2\n"
    wrong = Candidate(other.fragment, "lowering", other.code + doubled, "doubled")
    search = Search(ConversionSettings(budget_s=60.0, batch=4, cache=None), pool)
    search.fragments = {f.hash: f for f in frags}
    search.run([right, wrong])
    report = ConversionReport(device="cpu", settings={})
    search.describe(report, graph, {"train": frags}, {})
    (refused,) = report.rejected
    assert refused["fragment"] == search.fragments[wrong.fragment].name and refused["note"] == "doubled"
    assert refused["source"] == "lowering" and refused["status"] != "correct"
    assert refused["reason"] and "\n" not in refused["reason"]


def test_an_answer_slower_than_compile_is_checked_against_the_whole_programs_runners_up():
    """Search.runners_up: where the answer is no faster than torch.compile on a GPU, the whole program as one
    fragment by its fastest verified candidates (not the refused, not the one the answer already runs), each with
    its own source as the piece's origin; none where the answer is faster, or was never checked whole."""
    from drtriton_ray.search.assembly import Piece
    from drtriton_ray.search.search import ConversionReport, Search, e2e_ms
    from drtriton_ray.search.settings import ConversionSettings

    graph = mlp_block()
    frags = [f for f in enumerate_fragments(graph) if not f.skip]
    whole = next(f for f in frags if (f.start, f.end) == (0, 5))
    part = next(f for f in frags if (f.start, f.end) == (0, 3))
    search = Search(ConversionSettings(device="cuda", machine="H200", cache=None), verifier=None)
    search.fragments = {f.hash: f for f in frags}

    def attempt(f, source, ms, correct=True):
        outcome = VerdictSummary("correct" if correct else "incorrect", correct=correct, candidate_ms=ms, general=True)
        return Attempt(Candidate(f.hash, source, f"# {source} {ms}"), outcome)

    search.attempts = [
        attempt(whole, "lowering", 0.10),
        attempt(whole, "inductor", 0.08),
        attempt(whole, "model", 0.12),
        attempt(whole, "refine", 0.01, correct=False),
        attempt(part, "lowering", 0.02),
    ]
    placed = {"train": frags}
    split = [Piece(0, 3, "triton", part.hash, 0.02), Piece(3, 5, "torch")]
    slower = ConversionReport("cuda", {}, end_to_end={"candidate_ms": 0.2}, kept_original=False, speedup_vs_compile=0.8)
    alternatives = search.runners_up(graph, placed, split, {(0, 3): (part, "# lowering 0.02")}, slower)
    assert [(c[(0, 5)][1], o[whole.hash]) for _, c, o in alternatives] == [
        ("# inductor 0.08", "inductor"),
        ("# lowering 0.1", "lowering"),
    ]
    assert all(p == [Piece(0, 5, "triton", whole.hash, p[0].ms)] for p, _, _ in alternatives)
    # the answer already runs the fastest whole-program candidate: the next two
    runs = search.runners_up(
        graph, placed, [Piece(0, 5, "triton", whole.hash, 0.08)], {(0, 5): (whole, "# inductor 0.08")}, slower
    )
    assert [c[(0, 5)][1] for _, c, _ in runs] == ["# lowering 0.1", "# model 0.12"]
    faster = ConversionReport("cuda", {}, end_to_end={"candidate_ms": 0.2}, kept_original=False, speedup_vs_compile=1.3)
    assert search.runners_up(graph, placed, split, {}, faster) == []
    assert search.runners_up(graph, placed, split, {}, ConversionReport("cuda", {})) == []  # never checked whole
    assert e2e_ms(slower) == 0.2 and e2e_ms(ConversionReport("cuda", {})) == float("inf")
