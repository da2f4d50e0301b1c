"""Verdict records (JSON, Arrow) and the KernelBench aggregates."""

import json
import math

import pyarrow as pa
import pytest

from drtriton_ray.verify.metrics import summarize
from drtriton_ray.verify.verdict import CheckResult, Status, Verdict, arrow_schema, to_arrow


def verdict(status=Status.CORRECT, eager=None, compile_=None, name="p"):
    return Verdict(
        status=status.value,
        name=name,
        speedup_vs_eager=eager,
        speedup_vs_compile=compile_,
        checks=[CheckResult("problem", True)],
        seed=7,
    )


def test_json_round_trip():
    v = verdict(eager=2.0)
    d = json.loads(v.to_json())
    assert d["correct"] is True and d["status"] == "correct" and d["speedup_vs_compile"] is None
    assert Verdict.from_dict(d) == v


def test_arrow_table_matches_schema():
    table = to_arrow([verdict(eager=1.5), verdict(Status.VALUE_MISMATCH)])
    assert table.schema == arrow_schema()
    assert table.column("correct").to_pylist() == [True, False]
    assert table.column("checks").type == pa.list_(
        pa.struct([("name", pa.string()), ("passed", pa.bool_()), ("detail", pa.string())])
    )


def test_fast_p_and_geomean_over_all_problems():
    vs = [
        verdict(eager=3.0, compile_=1.2),
        verdict(eager=1.2, compile_=0.5),
        verdict(Status.VALUE_MISMATCH),
        verdict(Status.MISSING),
    ]
    s = summarize(vs)
    assert s["acc"] == 0.5
    assert s["fast_p_vs_eager"] == {"0": 0.5, "1": 0.5, "1.5": 0.25, "2": 0.25}
    assert s["fast_p_vs_compile"] == {"0": 0.5, "1": 0.25, "1.5": 0.0, "2": 0.0}
    # failures count as 1.0x (fallback to the reference)
    assert math.isclose(s["geomean_speedup_vs_eager"], (3.0 * 1.2) ** 0.25)


def test_no_timings_means_no_speed_figures():
    s = summarize([verdict(), verdict(Status.NOT_FAITHFUL)])
    assert s["fast_p_vs_eager"]["0"] == 0.5 and s["fast_p_vs_eager"]["1"] is None
    assert s["geomean_speedup_vs_compile"] is None
    with pytest.raises(ValueError):
        summarize([])
