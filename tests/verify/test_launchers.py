"""The pool's launcher store (verify/launchers.py): what a worker may report, how a worker's Triton finds a stored
launcher, and the builder refusing to run where Triton has no per-signature launchers (this machine's Triton)."""

import os

import pytest

from drtriton_ray.verify.launchers import LAUNCHER_NAME, STORE_ENV, LauncherStore, spec_of, valid_spec

GOOD = {"signature": ["*fp32", "*fp32", "i32", "constexpr"], "constants": [[[3], 1024]]}


@pytest.mark.parametrize(
    "spec",
    [
        GOOD,
        {"signature": [["*fp16", "*bf16"], "i64", "fp32"], "constants": []},  # a tuple argument
        {"signature": [], "constants": []},
    ],
)
def test_launchers_triton_would_generate_are_accepted(spec):
    assert valid_spec(spec)


@pytest.mark.parametrize(
    "spec",
    [
        {"signature": ['int x; system("id"); int'], "constants": []},  # C in a type: never reaches a compiler
        {"signature": ["*fp32 ; evil"], "constants": []},
        {"signature": ["tensordesc<fp32[64, 64]>"], "constants": []},  # descriptors stay with the workers
        {"signature": ["i32"], "constants": [[[0], object()]]},
        {"signature": ["i32"], "constants": [["x", 1]]},
        {"signature": ["i32"]},
        {"signature": "i32", "constants": []},
        {"signature": ["i32"] * 300, "constants": []},
        ["*fp32"],
    ],
)
def test_anything_else_a_worker_reports_is_refused(spec):
    assert not valid_spec(spec)


def test_a_kernels_launcher_is_described_by_its_signature():
    import triton
    import triton.language as tl
    from triton.compiler import ASTSource

    @triton.jit
    def add(x, y, n, BLOCK: tl.constexpr):
        pass

    src = ASTSource(add, {"x": "*fp32", "y": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {(3,): 128})
    spec = spec_of(src, type("Metadata", (), {"tensordesc_meta": None})())
    assert spec == {"signature": ["*fp32", "*fp32", "i32", "constexpr"], "constants": [[[3], 128]]}
    assert spec_of(src, type("Metadata", (), {"tensordesc_meta": [{"swizzle": 0}]})()) is None
    assert spec_of(type("Odd", (), {"signature": None})(), None) is None  # read inside a launch: never raises


def test_a_workers_triton_finds_a_stored_launcher_it_did_not_build(tmp_path, monkeypatch):
    from drtriton_ray.verify.launcher_cache import StoreCacheManager

    own, store = tmp_path / "own", tmp_path / "store"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(own))
    monkeypatch.setenv(STORE_ENV, str(store))
    manager = StoreCacheManager("KEY")
    name = LAUNCHER_NAME + ".so"
    assert manager.get_file(name) is None
    (store / "KEY").mkdir(parents=True)
    (store / "KEY" / name).write_bytes(b"built by the pool")
    (store / "KEY" / "kernel.cubin").write_bytes(b"not a launcher")
    assert manager.get_file(name) == str(store / "KEY" / name)
    assert manager.get_file("kernel.cubin") is None  # only launchers come from the store
    mine = manager.put(b"built here", name)
    assert manager.get_file(name) == mine and os.path.dirname(mine).startswith(str(own))  # its own first


def test_the_store_builds_each_valid_report_once_and_says_when_it_cannot(tmp_path):
    store = LauncherStore(str(tmp_path / "launchers"))
    try:
        store.add([GOOD, dict(GOOD), {"signature": ["no such type"], "constants": []}])
        store.wait()
        assert len(store.known) == 1 and store.refused == 1
        assert store.summary()["reported"] == 1
        # This machine's Triton launches through one generic launcher: the builder says so and builds nothing.
        assert store.built == 0 and store.errors and "exited 3" in store.errors[0], store.errors
        store.add([GOOD])
        store.wait()
        assert len(store.errors) == 1  # a launcher reported again is not built again
    finally:
        store.close()


def test_the_shared_store_is_in_the_users_cache_per_triton_and_python(tmp_path, monkeypatch):
    """The store outlives a pool (a restarted service, a second convert find what the first built); its folder is
    per Triton and Python version, since a launcher is a C extension of both."""
    import sys
    from importlib import metadata

    from drtriton_ray.verify.launchers import default_root

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = default_root()
    assert root == str(
        tmp_path / "cache" / "drtriton-ray" / "launchers" / f"triton-{metadata.version('triton')}-"
        f"{sys.implementation.cache_tag}"
    )
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_root().startswith(str(tmp_path / "home" / ".cache" / "drtriton-ray" / "launchers"))


def test_a_store_folder_that_cannot_be_made_leaves_the_pool_its_own(tmp_path, caplog):
    """A read-only or odd home never stops a pool: it keeps a store of its own, which goes with it, and says so."""
    from types import SimpleNamespace

    from drtriton_ray.verify import WorkerPool

    (tmp_path / "cache").write_text("a file where the store's parent folder would be")
    pool = SimpleNamespace(root=str(tmp_path / "pool"))
    store = WorkerPool._launcher_store(pool, str(tmp_path / "cache" / "launchers"))
    try:
        assert store.root == str(tmp_path / "pool" / "launchers") and os.path.isdir(store.root)
        assert "unusable" in caplog.text and "keeps its own" in caplog.text
    finally:
        store.close()
