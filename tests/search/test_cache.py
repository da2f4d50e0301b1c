"""The persistent cache: misses, hits, merging what two runs learnt, program results, an fsspec URI."""

from drtriton_ray.search.cache import Cache, Entry, program_key


def best(ms, code="c"):
    return {"code": code, "source": "lowering", "note": "", "outcome": {"status": "correct", "candidate_ms": ms}}


def test_miss_then_hit(tmp_path):
    cache = Cache(tmp_path, "cpu-interpreter")
    assert cache.get("f1") is None and cache.misses == 1
    cache.put(Entry("f1", "cpu-interpreter", cache.version, best(None), {"id1": "correct"}))
    again = Cache(tmp_path, "cpu-interpreter").get("f1")
    assert again.best["code"] == "c" and again.tried == {"id1": "correct"}
    assert Cache(tmp_path, "NVIDIA H100").get("f1") is None  # another machine
    assert Cache(tmp_path, "cpu-interpreter", version="other").get("f1") is None  # another code version


def test_put_merges_with_what_is_there(tmp_path):
    cache = Cache(tmp_path, "gpu")
    cache.put(Entry("f", "gpu", cache.version, best(2.0, "slow"), {"a": "correct"}))
    cache.put(Entry("f", "gpu", cache.version, best(1.0, "fast"), {"b": "value_mismatch"}))
    cache.put(Entry("f", "gpu", cache.version, None, {"c": "runtime_error"}))
    e = cache.get("f")
    assert e.best["code"] == "fast" and set(e.tried) == {"a", "b", "c"}


def test_program_results_and_keys(tmp_path):
    cache = Cache(tmp_path, "cpu-interpreter")
    k1 = program_key("src", {"k": 5})
    assert k1 == program_key("src", {"k": 5}) and k1 != program_key("src", {"k": 4})
    assert cache.get_result(k1) is None
    cache.put_result(k1, {"module_source": "x"})
    assert cache.get_result(k1) == {"module_source": "x"}


def test_an_fsspec_uri():
    cache = Cache("memory://drtriton-test-cache", "cpu-interpreter")
    cache.put(Entry("f", "cpu-interpreter", cache.version, best(None), {}))
    assert Cache("memory://drtriton-test-cache", "cpu-interpreter").get("f").best is not None


def test_verdicts_about_the_machine_are_not_remembered():
    """A candidate the verifier could not judge (the reference out of memory, a CUDA error) is tried again next
    run; one it judged wrong is not."""
    from drtriton_ray.search.cache import judged

    tried = {"a": "value_mismatch", "b": "verifier_limit", "c": "device_error", "d": "correct", "e": "timeout"}
    assert judged(tried) == {"a": "value_mismatch", "d": "correct", "e": "timeout"}
