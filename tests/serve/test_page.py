"""The service's web page (drtriton_ray/serve/static) in a real browser: Debian's Chromium driven by Playwright,
against the real service (tests/serve/conftest.py's `service`: Ray Serve on 127.0.0.1, CPU verifier). The sample is
preloaded, a conversion runs with live progress to a highlighted, downloadable answer, a cancel stops one, and an
empty program shows the service's error.

Chromium comes from Debian (`apt-get install -y chromium`; `make test` installs it as root when missing), never
from `playwright install` (no internet here). DRTRITON_PAGE_SCREENSHOT=PATH keeps a screenshot of the finished
conversion (docs/results/serve-page.png is made so)."""

import os
import re
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason="no Chromium: install it with `apt-get install -y chromium` (`make test` does so as root)",
)

# Snapshots of what the status panel shows, taken on every change (the test reads them after the run).
RECORD = """() => {
  window.__seen = [];
  const snap = () => window.__seen.push([
    document.getElementById('state').textContent,
    document.getElementById('stage').textContent,
    document.getElementById('fragments').textContent,
    document.getElementById('verified').textContent,
  ].join(' | '));
  new MutationObserver(snap).observe(document.getElementById('status'),
                                     {subtree: true, childList: true, characterData: true});
}"""


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--headless=new", "--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture
def page(browser, service):
    """A fresh page on the service's URL, its sample loaded; fails the test on any script error."""
    client, _ = service
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(str(client.base_url))
    expect(pg.locator("body")).to_have_attribute("data-ready", "true")
    expect(pg.locator("#source")).to_have_attribute("data-sample", "loaded")
    yield pg
    context.close()
    assert not errors, f"script errors on the page: {errors}"


def set_options(pg, budget_s: float, k: int) -> None:
    pg.fill("#budget", str(budget_s))
    pg.fill("#k", str(k))
    for source in ("configs", "model", "refine"):  # a CPU service without a model: the lowering alone
        pg.uncheck(f"#src-{source}")
    pg.check("#src-lowering")


def test_cancel_stops_a_conversion(page):
    set_options(page, budget_s=60, k=5)
    page.click("#start")
    expect(page.locator("#cancel")).to_be_enabled()
    page.click("#cancel")
    expect(page.locator("#state")).to_have_text("cancelled", timeout=60_000)
    expect(page.locator("#start")).to_be_enabled()
    expect(page.locator("#cancel")).to_be_disabled()
    expect(page.locator("#result")).to_be_hidden()
    expect(page.locator("#error")).to_be_hidden()


def test_a_conversion_in_the_page(page, service, tmp_path):
    client, _ = service
    sample = client.get("/v1/sample").text
    assert page.input_value("#source") == sample  # preloaded from GET /v1/sample
    set_options(page, budget_s=60, k=2)
    page.evaluate(RECORD)
    page.click("#start")
    expect(page.locator("#job-id")).not_to_have_text("none yet")
    expect(page.locator("#result")).to_be_visible(timeout=90_000)
    expect(page.locator("#state")).to_have_text("succeeded")
    expect(page.locator("#code")).to_have_attribute("data-loaded", "true")

    # progress changed while it ran: several distinct panels, from queued or running to succeeded
    seen = list(dict.fromkeys(page.evaluate("window.__seen")))
    states = [s.split(" | ")[0] for s in seen]
    assert states[-1] == "succeeded" and {"queued", "running"} & set(states), seen
    assert len(seen) >= 3, seen
    done, total = map(int, re.fullmatch(r"(\d+) / (\d+)", page.inner_text("#fragments")).groups())
    assert 0 < done <= total
    assert page.locator('#candidates .chip[data-source="lowering"]').count() == 1
    assert int(page.inner_text("#verified")) > 0
    chart = page.evaluate("window.drtritonPage.chart.data.datasets.map(d => d.data.length)")
    assert chart[2] >= 2, chart  # fragments over time (CPU: nothing is timed, so no speedup points)

    # the verdict and the highlighted answer
    kept = page.inner_text("#kept-original") == "yes"
    assert page.inner_text("#verdict").startswith("Kept the original" if kept else "Converted")
    assert page.inner_text("#policy").split()[0] in ("strict", "hybrid") or kept
    assert page.inner_text("#from-cache") == "no"
    code = page.locator("#code")
    expect(code).to_have_class(re.compile(r"\bhljs\b"))
    assert code.locator("span.hljs-keyword").count() > 5  # highlight.js marked up the Python
    shown = page.evaluate("document.getElementById('code').textContent")

    # the download is the service's solution.py, as shown
    with page.expect_download() as info:
        page.click("#download")
    download = info.value
    assert download.suggested_filename == "solution.py"
    text = Path(download.path()).read_text()
    assert text == shown == client.get(f"/v1/conversions/{page.inner_text('#job-id')}/solution.py").text
    if kept:
        assert text == sample
    else:
        assert text.startswith("import ") and re.search(r"^class ModelNew\(", text, re.M)
        assert "@triton.jit" in text

    page.evaluate("window.scrollTo(0, 0)")
    shot = tmp_path / "serve-page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 50_000
    if os.environ.get("DRTRITON_PAGE_SCREENSHOT"):
        shutil.copy(shot, os.environ["DRTRITON_PAGE_SCREENSHOT"])


def test_an_empty_program_shows_the_services_error(page):
    page.fill("#source", "")
    page.click("#start")
    error = page.locator("#error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("422")
    expect(error).to_contain_text("source is empty")
    expect(page.locator("#state")).to_have_text("idle")  # no job was made
    expect(page.locator("#start")).to_be_enabled()

    page.fill("#source", "import torch\n")  # not KernelBench format: the service's own check says why
    page.click("#start")
    expect(error).to_contain_text("get_inputs")


def test_upload_and_the_sample_button(page, tmp_path):
    program = tmp_path / "mine.py"
    program.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    pass\n")
    page.set_input_files("#file", str(program))
    expect(page.locator("#source")).to_have_value(program.read_text())
    page.click("#reload-sample")
    expect(page.locator("#source")).to_have_value(re.compile(r"^import torch[\s\S]*def get_init_inputs"))
