// drtriton convert: the page of the conversion service. Plain JS, no build step; highlight.js and Chart.js are
// vendored under /static/vendor/. The HTTP contract is the service's /v1/* routes (docs/serve.md).
"use strict";

(function () {
  const POLL_MS = 1000;
  const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
  const $ = (id) => document.getElementById(id);

  const page = {
    jobId: null,
    state: "idle",
    pollTimer: null,
    pollFailures: 0,
    createdAt: null, // epoch seconds of the job's creation (the time axis of the chart)
    fragmentSamples: [], // [{x: seconds, y: fragments done}] seen by this page's polls
    verifiedSamples: [], // [{x: seconds, y: candidates verified}] likewise
    device: null, // the service's device (GET /healthz): cpu verifies without timing, so it has no speedups
    chart: null,
    lastStatus: null,
  };
  window.drtritonPage = page; // for debugging and the browser test

  // ---------- small helpers ----------

  function epochSeconds(value) {
    if (value === null || value === undefined) return null;
    if (typeof value === "number") return value > 1e12 ? value / 1000 : value;
    const ms = Date.parse(value);
    return Number.isNaN(ms) ? null : ms / 1000;
  }

  function fmtSpeedup(x, finished) {
    if (x === null || x === undefined) return finished ? "not timed" : "not measured yet";
    return `${Number(x).toFixed(2)}x`;
  }

  function fmtSeconds(s) {
    if (s === null || s === undefined || Number.isNaN(s)) return "-";
    if (s < 60) return `${s.toFixed(1)} s`;
    return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  }

  function setText(id, text) {
    $(id).textContent = text === null || text === undefined || text === "" ? "-" : String(text);
  }

  function showError(message) {
    const box = $("error");
    box.textContent = message;
    box.hidden = false;
  }

  function clearError() {
    const box = $("error");
    box.textContent = "";
    box.hidden = true;
  }

  // The message of a failed response: FastAPI's {"detail": ...} (a string, or a list of validation errors).
  async function responseMessage(resp) {
    const text = await resp.text();
    let detail = text;
    try {
      const body = JSON.parse(text);
      detail = body && body.detail !== undefined ? body.detail : body;
    } catch (e) {
      // not JSON: the text as it is
    }
    if (Array.isArray(detail)) {
      detail = detail
        .map((d) => {
          if (d && typeof d === "object" && "msg" in d) {
            const loc = Array.isArray(d.loc) ? d.loc.filter((p) => p !== "body").join(".") : "";
            return loc ? `${loc}: ${d.msg}` : d.msg;
          }
          return typeof d === "string" ? d : JSON.stringify(d);
        })
        .join("; ");
    } else if (detail && typeof detail === "object") {
      detail = JSON.stringify(detail);
    }
    let message = `${resp.status} ${resp.statusText || ""}`.trim() + (detail ? `: ${detail}` : "");
    if (resp.status === 429) {
      const retry = resp.headers.get("Retry-After");
      message += retry ? ` (the service is busy: retry after ${retry} s)` : " (the service is busy: retry later)";
    }
    return message;
  }

  function setBusy(busy) {
    $("start").disabled = busy;
    $("cancel").disabled = !busy;
  }

  // ---------- the program: sample, upload ----------

  async function loadSample(force) {
    const source = $("source");
    try {
      const resp = await fetch("/v1/sample");
      if (!resp.ok) throw new Error(await responseMessage(resp));
      const text = await resp.text();
      if (force || source.value.trim() === "") {
        source.value = text;
        source.dataset.sample = "loaded";
      }
    } catch (e) {
      source.placeholder = "Paste a PyTorch program here (class Model, get_inputs, get_init_inputs).";
      showError(`Could not load the sample program: ${e.message}`);
    }
  }

  async function onFileChosen(event) {
    const file = event.target.files && event.target.files[0];
    if (!file) return;
    try {
      $("source").value = await file.text();
      $("source").dataset.sample = "file";
      clearError();
    } catch (e) {
      showError(`Could not read ${file.name}: ${e.message}`);
    }
  }

  // Tab in the editor indents by four spaces instead of leaving the text area.
  function onSourceKey(event) {
    if (event.key !== "Tab" || event.shiftKey || event.ctrlKey || event.altKey || event.metaKey) return;
    event.preventDefault();
    const el = event.target;
    const start = el.selectionStart;
    el.setRangeText("    ", start, el.selectionEnd, "end");
  }

  // ---------- options ----------

  function readOptions() {
    const options = {};
    const budget = parseFloat($("budget").value);
    if (!Number.isNaN(budget)) options.budget_s = budget;
    const k = parseInt($("k").value, 10);
    if (!Number.isNaN(k)) options.k = k;
    const samples = parseInt($("samples").value, 10);
    if (!Number.isNaN(samples)) options.samples = samples;
    const maxCandidates = parseInt($("max-candidates").value, 10);
    if (!Number.isNaN(maxCandidates)) options.max_candidates = maxCandidates;
    options.sources = Array.from(document.querySelectorAll('input[name="sources"]:checked')).map((el) => el.value);
    return options;
  }

  // ---------- the chart ----------

  function makeChart() {
    if (typeof Chart === "undefined") {
      $("chart-note").textContent = "Chart.js did not load: the chart is off.";
      return null;
    }
    const css = getComputedStyle(document.documentElement);
    const accent = css.getPropertyValue("--accent").trim() || "#1f6feb";
    const muted = css.getPropertyValue("--muted").trim() || "#8b949e";
    return new Chart($("chart"), {
      type: "line",
      data: {
        datasets: [
          {
            label: "best speedup vs eager",
            data: [],
            borderColor: accent,
            backgroundColor: accent,
            stepped: true,
            pointRadius: 2,
            yAxisID: "y",
          },
          {
            label: "eager (1.0x)",
            data: [],
            borderColor: muted,
            borderDash: [6, 4],
            pointRadius: 0,
            borderWidth: 1,
            yAxisID: "y",
          },
          {
            label: "fragments verified",
            data: [],
            borderColor: "#2da44e",
            backgroundColor: "rgba(45, 164, 78, 0.12)",
            fill: true,
            stepped: true,
            pointRadius: 0,
            borderWidth: 1.5,
            yAxisID: "y1",
          },
          {
            label: "candidates verified",
            data: [],
            borderColor: "#bf8700",
            borderDash: [5, 3],
            stepped: true,
            pointRadius: 0,
            borderWidth: 2,
            order: -1, // drawn over the fragments, which it often matches
            yAxisID: "y1",
          },
        ],
      },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        parsing: false,
        interaction: { mode: "nearest", intersect: false },
        scales: {
          x: { type: "linear", min: 0, title: { display: true, text: "seconds" } },
          y: { type: "linear", suggestedMin: 0, suggestedMax: 1.5, title: { display: true, text: "speedup (x)" } },
          y1: {
            type: "linear",
            position: "right",
            min: 0,
            grid: { drawOnChartArea: false },
            ticks: { precision: 0 },
            title: { display: true, text: "fragments, candidates" },
          },
        },
        plugins: {
          legend: {
            position: "bottom",
            // hidden lines (no speedups on a CPU service) leave the legend instead of showing struck through
            labels: { boxWidth: 12, filter: (item, data) => !data.datasets[item.datasetIndex].hidden },
          },
        },
      },
    });
  }

  // The counts at this poll, for the chart's progress lines (the service keeps a history of speedups only).
  function sampleProgress(status) {
    const progress = status.progress || {};
    const now = clientSeconds(status);
    if (now === null) return;
    if (!page.fragmentSamples.length) {
      page.fragmentSamples.push({ x: 0, y: 0 });
      page.verifiedSamples.push({ x: 0, y: 0 });
    }
    page.fragmentSamples.push({ x: now, y: progress.fragments_done || 0 });
    page.verifiedSamples.push({ x: now, y: progress.verified || 0 });
  }

  function updateChart(status) {
    const progress = status.progress || {};
    const history = Array.isArray(progress.history) ? progress.history : [];
    const speedups = history
      .filter((h) => h && h.best_speedup_vs_eager !== null && h.best_speedup_vs_eager !== undefined)
      .map((h) => ({ x: Number(h.t), y: Number(h.best_speedup_vs_eager) }));
    const now = clientSeconds(status);
    const tMax = Math.max(
      1,
      now || 0,
      ...history.map((h) => Number(h.t) || 0),
      ...page.fragmentSamples.map((p) => p.x),
    );
    // the step line runs on to the latest time: the best so far holds until something beats it
    if (speedups.length) speedups.push({ x: tMax, y: speedups[speedups.length - 1].y });
    const finished = TERMINAL.has(status.state);
    // no speedups to draw (a CPU service, or nothing timed yet at the end): the chart shows the search's progress
    const untimed = page.device === "cpu" || (finished && !speedups.length);
    if (page.device === "cpu") {
      $("chart-note").textContent =
        "CPU service: candidates are verified by the Triton interpreter, not timed, so there is no speedup to draw; " +
        "the chart shows the search: fragments with a verified candidate and candidates verified over time.";
    } else if (untimed) {
      $("chart-note").textContent = "Nothing was timed: the chart shows fragments verified and candidates over time.";
    } else {
      $("chart-note").textContent =
        "Best verified fragment speedup against eager PyTorch over time (left axis); fragments with a verified " +
        "candidate and candidates verified (right axis).";
    }
    if (!page.chart) return;
    page.chart.data.datasets[0].hidden = untimed;
    page.chart.data.datasets[1].hidden = untimed;
    page.chart.options.scales.y.display = !untimed;
    page.chart.data.datasets[0].data = speedups;
    page.chart.data.datasets[1].data = [
      { x: 0, y: 1 },
      { x: tMax, y: 1 },
    ];
    page.chart.data.datasets[2].data = page.fragmentSamples.slice();
    page.chart.data.datasets[3].data = page.verifiedSamples.slice();
    page.chart.options.scales.y1.suggestedMax = Math.max(1, progress.fragments_total || 0, progress.verified || 0);
    page.chart.update("none");
  }

  // Seconds since the job was created, at the time of this status.
  function clientSeconds(status) {
    const created = epochSeconds(status.created_at);
    if (created === null) return null;
    const end = TERMINAL.has(status.state) ? epochSeconds(status.updated_at) : Date.now() / 1000;
    return end === null ? null : Math.max(0, end - created);
  }

  // ---------- status ----------

  function renderStatus(status) {
    page.lastStatus = status;
    page.state = status.state;
    const finished = TERMINAL.has(status.state);
    const progress = status.progress || {};
    const badge = $("state");
    badge.textContent = status.state;
    badge.dataset.state = status.state;
    badge.className = `state state-${status.state}`;
    setText("job-id", status.id);
    setText("stage", progress.stage);
    setText("detail", progress.detail);
    const total = progress.fragments_total || 0;
    const done = progress.fragments_done || 0;
    $("progress").max = Math.max(total, 1);
    $("progress").value = total ? done : 0;
    setText("fragments", total ? `${done} / ${total}` : progress.stage ? "counting..." : "-");
    renderCandidates(progress.candidates);
    setText("verified", progress.verified);
    setText("best-eager", fmtSpeedup(progress.best_speedup_vs_eager, finished));
    setText("best-compile", fmtSpeedup(progress.best_speedup_vs_compile, finished));
    setText("elapsed", fmtSeconds(clientSeconds(status)));
    sampleProgress(status);
    updateChart(status);
  }

  function renderCandidates(candidates) {
    const box = $("candidates");
    box.textContent = "";
    const entries = candidates && typeof candidates === "object" ? Object.entries(candidates) : [];
    if (!entries.length) {
      box.textContent = "-";
      return;
    }
    for (const [source, n] of entries) {
      const chip = document.createElement("span");
      chip.className = "chip";
      chip.dataset.source = source;
      chip.textContent = `${source}: ${n}`;
      box.appendChild(chip);
    }
  }

  async function renderResult(status) {
    const result = status.result || {};
    const id = status.id;
    const base = `/v1/conversions/${encodeURIComponent(id)}`;
    const kept = !!result.kept_original;
    const verdict = $("verdict");
    verdict.className = `verdict ${kept ? "verdict-kept" : "verdict-converted"}`;
    verdict.textContent = kept
      ? "Kept the original program: no verified Triton module beat it."
      : `Converted: a verified Triton module${result.policy ? ` (${result.policy} verification)` : ""}.`;
    setText("kept-original", kept ? "yes" : "no");
    setText("reason", result.reason);
    setText(
      "policy",
      result.policy
        ? `${result.policy}${result.policy === "hybrid" ? " (some operators stay in PyTorch)" : " (every operator in Triton)"}`
        : null,
    );
    setText("from-cache", result.from_cache ? "yes" : "no");
    setText("speedup-eager", fmtSpeedup(result.speedup_vs_eager, true));
    setText("speedup-compile", fmtSpeedup(result.speedup_vs_compile, true));
    $("download").href = `${base}/solution.py`;
    $("download").setAttribute("download", "solution.py");
    $("report-link").href = `${base}/report`;
    $("report-link").setAttribute("download", `report-${id}.json`);
    $("result").hidden = false;
    try {
      const resp = await fetch(`${base}/solution.py`);
      if (!resp.ok) throw new Error(await responseMessage(resp));
      const code = $("code");
      code.textContent = await resp.text();
      code.removeAttribute("data-highlighted");
      code.className = "language-python";
      if (typeof hljs !== "undefined") hljs.highlightElement(code);
      code.dataset.loaded = "true";
    } catch (e) {
      showError(`Could not fetch the solution: ${e.message}`);
    }
  }

  function finish(status) {
    stopPolling();
    setBusy(false);
    if (status.state === "succeeded") {
      renderResult(status);
    } else if (status.state === "failed") {
      showError(`Conversion failed: ${status.error || "the service gave no reason"}`);
    } else if (status.state === "cancelled") {
      setText("detail", (status.progress && status.progress.detail) || "cancelled");
    }
  }

  // ---------- polling ----------

  function stopPolling() {
    if (page.pollTimer) clearTimeout(page.pollTimer);
    page.pollTimer = null;
  }

  async function poll() {
    const id = page.jobId;
    if (!id) return;
    let status;
    try {
      const resp = await fetch(`/v1/conversions/${encodeURIComponent(id)}`, { cache: "no-store" });
      if (resp.status === 404) {
        stopPolling();
        setBusy(false);
        showError(`The service does not know conversion ${id} (it may have restarted): ${await responseMessage(resp)}`);
        return;
      }
      if (!resp.ok) throw new Error(await responseMessage(resp));
      status = await resp.json();
      page.pollFailures = 0;
    } catch (e) {
      page.pollFailures += 1;
      if (page.pollFailures >= 3) showError(`Lost contact with the service, still trying: ${e.message}`);
      if (page.jobId === id) page.pollTimer = setTimeout(poll, POLL_MS * Math.min(page.pollFailures, 5));
      return;
    }
    if (page.jobId !== id) return; // a newer job replaced this one while the request was out
    if (page.pollFailures === 0 && $("error").textContent.startsWith("Lost contact")) clearError();
    renderStatus(status);
    if (TERMINAL.has(status.state)) finish(status);
    else page.pollTimer = setTimeout(poll, POLL_MS);
  }

  function follow(id) {
    stopPolling();
    page.jobId = id;
    page.fragmentSamples = [];
    page.verifiedSamples = [];
    page.pollFailures = 0;
    $("result").hidden = true;
    $("code").textContent = "";
    delete $("code").dataset.loaded;
    setText("job-id", id);
    setBusy(true);
    if (location.hash !== `#job=${id}`) history.replaceState(null, "", `#job=${encodeURIComponent(id)}`);
    poll();
  }

  // ---------- start, cancel ----------

  async function onStart(event) {
    event.preventDefault();
    clearError();
    const options = readOptions();
    if (!options.sources.length) {
      showError("Choose at least one candidate source.");
      return;
    }
    $("start").disabled = true;
    let body;
    try {
      const resp = await fetch("/v1/conversions", {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify({ source: $("source").value, options }),
      });
      if (!resp.ok) {
        showError(`The service refused the conversion: ${await responseMessage(resp)}`);
        $("start").disabled = false;
        return;
      }
      body = await resp.json();
    } catch (e) {
      showError(`Could not reach the service: ${e.message}`);
      $("start").disabled = false;
      return;
    }
    renderStatus({ id: body.id, state: body.state || "queued", progress: {} });
    follow(body.id);
  }

  async function onCancel() {
    const id = page.jobId;
    if (!id) return;
    $("cancel").disabled = true;
    try {
      const resp = await fetch(`/v1/conversions/${encodeURIComponent(id)}`, { method: "DELETE" });
      if (!resp.ok && resp.status !== 409) showError(`Could not cancel: ${await responseMessage(resp)}`);
    } catch (e) {
      showError(`Could not reach the service to cancel: ${e.message}`);
    }
    // the next poll shows the cancelled state (or the state it reached first)
  }

  async function onCopy() {
    const text = $("code").textContent;
    try {
      await navigator.clipboard.writeText(text);
      $("copy").textContent = "Copied";
    } catch (e) {
      const range = document.createRange();
      range.selectNodeContents($("code"));
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      $("copy").textContent = "Selected: press Ctrl+C";
    }
    setTimeout(() => ($("copy").textContent = "Copy code"), 2000);
  }

  // ---------- start-up ----------

  async function loadService() {
    try {
      const resp = await fetch("/healthz");
      if (!resp.ok) return;
      const health = await resp.json();
      page.device = health.device || null;
      const what =
        page.device === "cpu"
          ? "CPU: candidates verified by the Triton interpreter, not timed"
          : `${page.device}: verified and timed against eager and torch.compile`;
      $("service").textContent = `Service: ${what}; ${health.active} conversion(s) queued or running.`;
      if (page.lastStatus) updateChart(page.lastStatus);
    } catch (e) {
      // the page works without it
    }
  }

  function init() {
    page.chart = makeChart();
    $("convert-form").addEventListener("submit", onStart);
    $("cancel").addEventListener("click", onCancel);
    $("file").addEventListener("change", onFileChosen);
    $("reload-sample").addEventListener("click", () => loadSample(true));
    $("source").addEventListener("keydown", onSourceKey);
    $("copy").addEventListener("click", onCopy);
    loadSample(false);
    loadService();
    const match = /^#job=(.+)$/.exec(location.hash);
    if (match) follow(decodeURIComponent(match[1])); // a reload keeps following its conversion
    document.body.dataset.ready = "true";
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
