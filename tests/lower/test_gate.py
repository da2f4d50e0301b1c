"""The lowering's CPU gate in CI: `bench/lowering.py` as docs/results/lowering.md runs it (small profile, seed 7,
every operator of level 1, 200 level-2 and 100 level-5 programs, the strict verifier in the Triton interpreter). The
lowering writes every SFT answer and a search source, so all of level 1 and at least 99% of levels 2 and 5 must
verify, as issue 29 asks (a level-2 or level-5 miss has been a near-tie of the verifier's, not a wrong kernel). A few
minutes of CI."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_strict_verifier_accepts_the_lowering_of_every_level(tmp_path):
    out = tmp_path / "gate.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "lowering.py"), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    levels = {row["level"]: row for row in json.loads(out.read_text())["levels"]}
    assert (levels[1]["drawn"], levels[1]["correct"]) == (67, 67), levels[1]["failures"]
    for level, count in ((2, 200), (5, 100)):
        row = levels[level]
        assert row["correct"] >= 0.99 * count, (level, row["not_drawn"], row["failures"])
