"""The one `--set` parser (drtriton_ray/overrides.py) that jobs/train.py, jobs/sft.py and the RL config share:
typed YAML values, nested keys, nothing lost around an override, and a clear one-line error for a bad one."""

import subprocess
import sys
from pathlib import Path

import pytest

from drtriton_ray.overrides import OverrideError, apply_overrides, load_yaml_with_overrides, parse_override, set_dotted

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "item, path, value",
    [
        ("rollout.group_size=8", ["rollout", "group_size"], 8),
        ("algo.lr=0.5", ["algo", "lr"], 0.5),
        ("algo.lr=1e-6", ["algo", "lr"], "1e-6"),  # YAML 1.1: no dot, a string (pydantic reads it as a float)
        ("trainer.use_gpu=true", ["trainer", "use_gpu"], True),
        ("run.name=abc", ["run", "name"], "abc"),
        ("run.name='8'", ["run", "name"], "8"),  # quoted: a string, not an int
        ("run.name=", ["run", "name"], None),  # empty: null
        ("run.name=a=b", ["run", "name"], "a=b"),  # the first '=' splits key from value
        ("data=[a.parquet, b.parquet]", ["data"], ["a.parquet", "b.parquet"]),
        ("synth={profile: small, seed: 3}", ["synth"], {"profile": "small", "seed": 3}),
        ("a.b.c.d=null", ["a", "b", "c", "d"], None),
        (" run . name =x", ["run", "name"], "x"),  # spaces around key parts are dropped
    ],
)
def test_typed_values_and_nested_keys(item, path, value):
    assert parse_override(item) == (path, value)


def test_nothing_lost():
    raw = {"run": {"name": "demo", "total_steps": 3}, "algo": {"name": "drpo"}, "model": {"path": "m"}}
    out = apply_overrides(
        raw, ["run.total_steps=5", "algo.lr=0.1", "new.section.key=1", "top=2", "run.name=first", "run.name=second"]
    )
    assert out is raw  # in place, as load_config relies on
    assert raw == {
        "run": {"name": "second", "total_steps": 5},
        "algo": {"name": "drpo", "lr": 0.1},
        "model": {"path": "m"},
        "new": {"section": {"key": 1}},
        "top": 2,
    }


def test_empty_config_and_no_overrides():
    assert apply_overrides(None, []) == {}
    assert apply_overrides(None, ["a=1"]) == {"a": 1}
    assert apply_overrides({"a": 1}, []) == {"a": 1}


@pytest.mark.parametrize(
    "item, words",
    [
        ("foo", "--set 'foo': expected SECTION.KEY=VALUE or KEY=VALUE (no '=' in it)"),
        ("=3", "the key '' has an empty part"),
        ("a..b=1", "the key 'a..b' has an empty part"),
        (".a=1", "the key '.a' has an empty part"),
        ("a.=1", "the key 'a.' has an empty part"),
        ("run.name=[1,", "--set 'run.name=[1,': the value '[1,' is not valid YAML"),
        ("run.name={a: 1", "is not valid YAML"),
        ("run.name.deeper=1", "--set 'run.name.deeper=1': run.name is not a section (it holds 'demo')"),
    ],
)
def test_bad_override_names_itself(item, words):
    raw = {"run": {"name": "demo"}}
    with pytest.raises(OverrideError) as e:
        apply_overrides(raw, ["run.total_steps=4", item])
    assert words in str(e.value) and "\n" not in str(e.value)
    assert isinstance(e.value, ValueError)  # callers that catch ValueError keep working
    if "not a section" not in words:
        assert raw == {"run": {"name": "demo"}}  # every item is checked before any is applied


def test_set_dotted_direct():
    raw = {"rollout": {"n": 1}}
    set_dotted(raw, "rollout.group_size", 8)
    set_dotted(raw, ["run", "name"], "x")
    assert raw == {"rollout": {"n": 1, "group_size": 8}, "run": {"name": "x"}}
    with pytest.raises(OverrideError, match="run.name is not a section"):
        set_dotted(raw, "run.name.deeper", 1)


def test_config_not_a_mapping(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(OverrideError, match=r"c.yaml must hold a mapping of fields, not a list"):
        load_yaml_with_overrides(str(path), [])
    with pytest.raises(OverrideError, match="must hold a mapping"):
        apply_overrides(["a"], [])
    path.write_text("")
    assert load_yaml_with_overrides(str(path), ["x.y=1"]) == {"x": {"y": 1}}


def test_rl_config_uses_the_shared_parser(tmp_path):
    from drtriton_ray.rl import config

    assert config.set_dotted is set_dotted
    with pytest.raises(OverrideError, match="no '=' in it"):
        config.load_config(str(ROOT / "configs" / "cpu-demo.yaml"), ["algo.name"])


def _job(script, *args):
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / script), *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


@pytest.mark.parametrize("script, config", [("train.py", "configs/cpu-demo.yaml"), ("sft.py", "{sft}")])
def test_jobs_print_one_line_and_exit_2(tmp_path, script, config):
    """Both jobs, before starting Ray: a bad --set is one `error:` line naming it, exit 2."""
    sft = tmp_path / "sft.yaml"
    sft.write_text("model: m\ndata: []\n")
    r = _job(
        script,
        "--config",
        config.replace("{sft}", str(sft)),
        "--set",
        "run_name.x=1" if script == "sft.py" else "run.name.deeper=1",
        "--set",
        "foo",
    )
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines == ["error: --set 'foo': expected SECTION.KEY=VALUE or KEY=VALUE (no '=' in it)"], r.stderr
