"""One program of each kind of user code the real-world suite covers, converted end to end on CPU by
bench/realworld.py (the lowering as the source, every program's dynamic sizes declared): each is captured, its
answer holds Triton kernels and re-verifies, it was verified at its own sizes and at two or more others, and called
at two sizes it was never verified at it is right or refuses with an error, never silently wrong."""

import json
import subprocess
import sys
from pathlib import Path

from test_programs import PROGRAMS, REQUIRED_KINDS, USER_CODE_KINDS

# hf, bf16, fp16, causal_mask, embedding_layernorm, cross_entropy_ignore_index, moe_router, inplace, modulelist,
# einsum_attention, tuple_output: each kind of user code once (the LLM operators' kinds run in the GPU bench)
CI_PROGRAMS = [
    "hf_llama_rmsnorm_bf16",
    "swiglu_fp16",
    "hf_llama_rotary",
    "causal_mask_triu",
    "embed_pos_layernorm",
    "cross_entropy_ignore_index",
    "moe_router",
    "inplace_ops",
    "modulelist_mlp",
    "einsum_attention",
]


def test_the_ci_programs_cover_every_kind_of_user_code():
    assert USER_CODE_KINDS <= REQUIRED_KINDS
    assert USER_CODE_KINDS <= {kind for name in CI_PROGRAMS for kind in PROGRAMS[name].kinds}


def test_one_program_of_each_kind_converts_general_and_right_at_unseen_shapes(tmp_path):
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "realworld.json"
    args = ["--only", ",".join(CI_PROGRAMS), "--budget-s", "60", "--k", "2", "--out", str(out)]
    done = subprocess.run([sys.executable, str(root / "bench" / "realworld.py"), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["program"]: row for row in json.loads(out.read_text())["rows"]}
    assert sorted(rows) == sorted(CI_PROGRAMS)
    for name, row in rows.items():
        assert row["captured"] and row["triton_fragments"] >= 1 and row["correct"], (name, row)
        assert row["verified_shapes"] >= 3, (name, row)  # its own sizes and two others at least
        outcomes = [s["outcome"] for s in row["other_shapes"]]
        assert len(outcomes) == 2 and set(outcomes) <= {"right", "refused"}, (name, row["other_shapes"])
