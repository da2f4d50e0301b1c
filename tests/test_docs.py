"""The docs stay a door and guides: word budgets (README and the guides in docs/*.md, counted as `wc -w` does),
relative links that reach a file, and no pointer to the project's private reference notes."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX = 1_200
GUIDES_MAX = 12_000  # docs/*.md together, docs/architecture.md included; result pages (docs/results/) apart
GUIDE_MAX = 2_500
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
PRIVATE_REFERENCE = ("REFERENCE §", "REFERENCE.md")


def words(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").split())


def guides() -> list[Path]:
    return sorted((ROOT / "docs").glob("*.md"))


def all_docs() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans, where `kernel[grid](x)` is code, not a link."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            kept.append(CODE_SPAN.sub("", line))
    return "\n".join(kept)


def broken_links(path: Path) -> list[str]:
    """The relative link targets in `path` whose file does not exist."""
    broken = []
    for target in LINK.findall(prose(path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or an anchor in the same page
        file = target.split("#", 1)[0].split("?", 1)[0]
        if not (path.parent / file).exists():
            broken.append(target)
    return broken


def test_readme_within_budget():
    assert words(README) <= README_MAX, f"README.md has {words(README)} words, budget {README_MAX}"


def test_guides_within_budget():
    counts = {p.name: words(p) for p in guides()}
    assert counts, "no guide found in docs/"
    over = {name: n for name, n in counts.items() if n > GUIDE_MAX}
    assert not over, f"guides over {GUIDE_MAX} words: {over}"
    total = sum(counts.values())
    assert total <= GUIDES_MAX, f"docs/*.md have {total} words together, budget {GUIDES_MAX}: {counts}"


def test_relative_links_reach_files():
    broken = [f"{p.relative_to(ROOT)}: {target}" for p in all_docs() for target in broken_links(p)]
    assert not broken, "links to missing files:\n" + "\n".join(broken)


def test_no_private_reference():
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in all_docs()
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if any(marker in line for marker in PRIVATE_REFERENCE)
    ]
    assert not found, f"mentions of the private reference notes (say what they refer to instead): {found}"


def test_link_checker_finds_a_missing_file(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](page.md) [web](https://x.org) [anchor](#a) `kernel[grid](x)`\n```\n[code](nope.md)\n```\n"
        "[gone](gone.md#a) ![img](sub/pic.png)\n",
        encoding="utf-8",
    )
    assert broken_links(page) == ["gone.md#a", "sub/pic.png"]
