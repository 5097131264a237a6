// The trainctl dashboard: one page, hash routes, each view a function that
// renders into #view and returns a cleanup (timers, streams, charts).
//   #/cluster        every GPU a tile (utilization colour, memory, temperature, jobs)
//   #/jobs?...       job list with filters (state, name, sweep) and cancel
//   #/jobs/ID        job detail: ranks, live log (follow), GPU utilization chart
//   #/sweeps?sweep=  sweep comparison chart (metric vs hyper-parameter)
//   #/submit         submit form
import "./style.css";
import { Chart, registerables } from "chart.js";
import * as api from "./api";
import { fill, h } from "./dom";
import {
  base64ToBytes,
  filterJobs,
  formatBytes,
  formatDuration,
  isFinalState,
  jobUtilization,
  logTickLabel,
  paramNames,
  resourceText,
  runTimeMs,
  shortEnum,
  sweepIds,
  sweepPoints,
  usagePoints,
  utilColor,
  type JobFilter,
  type UtilPoint,
} from "./format";
import type { Job, JobSpec, MetricSeries, NodeView } from "./types";

Chart.register(...registerables);

/** How often views poll the gateway, ms. */
const REFRESH_MS = 2000;
const JOB_STATES = ["PENDING", "SCHEDULED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"];

type Cleanup = () => void;
const view = document.getElementById("view")!;
const status = document.getElementById("status")!;

function showError(e: unknown): void {
  status.textContent = e instanceof Error ? e.message : String(e);
  status.className = "status error";
}
function showOk(): void {
  status.textContent = `updated ${new Date().toLocaleTimeString()}`;
  status.className = "status";
}

/** Runs `fn` now and every REFRESH_MS until the cleanup is called. */
function poll(fn: () => Promise<void>): Cleanup {
  let stopped = false;
  let timer: number | undefined;
  const tick = async () => {
    try {
      await fn();
      showOk();
    } catch (e) {
      showError(e);
    }
    if (!stopped) timer = window.setTimeout(tick, REFRESH_MS);
  };
  void tick();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}

function stateBadge(state: string): HTMLElement {
  const s = shortEnum(state, "JOB_STATE_");
  return h("span", { class: `badge state-${s.toLowerCase()}`, "data-testid": "job-state" }, s);
}

function jobLink(id: string, text?: string): HTMLElement {
  return h("a", { href: `#/jobs/${id}` }, text ?? `#${id}`);
}

function cancelButton(job: Job, after: () => void): HTMLElement | null {
  if (isFinalState(job.state)) return null;
  return h(
    "button",
    {
      class: "danger",
      "data-testid": `cancel-${job.id}`,
      onclick: async (e: Event) => {
        (e.target as HTMLButtonElement).disabled = true;
        try {
          await api.cancelJob(job.id);
          after();
        } catch (err) {
          showError(err);
        }
      },
    },
    "Cancel",
  );
}

// ------------------------------------------------------------------ cluster

function gpuTile(v: NodeView, i: number): HTMLElement {
  const g = v.node.gpus![i];
  const tasks = v.gpu_tasks?.[i]?.tasks ?? [];
  const total = Number(g.memory_total_bytes);
  const used = Number(g.memory_used_bytes);
  const reserved = tasks.reduce((s, t) => s + Number(t.reserved_bytes), 0);
  const pct = (x: number) => `${total > 0 ? Math.min(100, (100 * x) / total) : 0}%`;
  return h(
    "div",
    {
      class: "tile",
      "data-testid": "gpu-tile",
      "data-node": v.node.name,
      "data-gpu": g.index,
      style: `background:${utilColor(g.utilization_pct)}`,
      title: `${g.uuid}\n${g.power_w.toFixed(0)} W`,
    },
    h("div", { class: "tile-head" }, h("b", {}, `GPU ${g.index}`), h("span", { class: "util" }, `${g.utilization_pct}%`)),
    h("div", { class: "model" }, g.name),
    h(
      "div",
      { class: "membar", title: "measured use (dark) and reserved by jobs (outline)" },
      reserved > 0 ? h("div", { class: "reserved", style: `width:${pct(reserved)}` }) : null,
      h("div", { class: "used", style: `width:${pct(used)}` }),
    ),
    h("div", { class: "small" }, `${formatBytes(used)} / ${formatBytes(total)} · reserved ${formatBytes(reserved)}`),
    h("div", { class: "small" }, `${g.temperature_c} °C · ${g.power_w.toFixed(0)} W`),
    h(
      "div",
      { class: "tile-jobs" },
      tasks.map((t) =>
        h("a", { href: `#/jobs/${t.job_id}`, class: "chip", "data-testid": "gpu-job" }, `${t.job_name || "#" + t.job_id} r${t.rank}`),
      ),
    ),
  );
}

function clusterView(): Cleanup {
  const body = h("div", {});
  fill(view, h("h2", {}, "Cluster"), h("p", { class: "legend" }, "Tile colour: GPU utilization, ",
    h("span", { class: "swatch", style: `background:${utilColor(0)}` }), " idle … ",
    h("span", { class: "swatch", style: `background:${utilColor(50)}` }), " 50% … ",
    h("span", { class: "swatch", style: `background:${utilColor(100)}` }), " 100%"), body);
  return poll(async () => {
    const nodes = await api.listNodes();
    const gpus = nodes.reduce((s, v) => s + (v.node.gpus?.length ?? 0), 0);
    fill(
      body,
      h("p", { "data-testid": "cluster-summary" }, `${nodes.length} nodes, ${gpus} GPUs`),
      nodes.map((v) =>
        h(
          "section",
          { class: "node", "data-testid": "node" },
          h(
            "h3",
            {},
            v.node.name,
            " ",
            h("span", { class: `badge node-${shortEnum(v.node.state, "NODE_STATE_").toLowerCase()}` }, shortEnum(v.node.state, "NODE_STATE_")),
            v.node.fake_gpus ? h("span", { class: "badge fake" }, "fake GPUs") : null,
            h("span", { class: "small" }, ` ${v.node.address}`),
          ),
          h("div", { class: "tiles" }, (v.node.gpus ?? []).map((_, i) => gpuTile(v, i))),
        ),
      ),
    );
  });
}

// ------------------------------------------------------------------ jobs

function jobsView(params: URLSearchParams): Cleanup {
  const f: JobFilter = { state: params.get("state") ?? "", name: params.get("name") ?? "", sweep: params.get("sweep") ?? "" };
  let jobs: Job[] = [];
  const table = h("div", {});
  const sweepSel = h("select", { "data-testid": "filter-sweep" });
  const render = () => {
    const shown = filterJobs(jobs, f);
    const now = Date.now();
    const sweeps = sweepIds(jobs);
    fill(sweepSel, h("option", { value: "" }, "all sweeps"), sweeps.map((s) => h("option", { value: s }, s)));
    sweepSel.value = f.sweep;
    fill(
      table,
      h("p", { class: "small" }, `${shown.length} of ${jobs.length} jobs`),
      h(
        "table",
        { "data-testid": "jobs-table" },
        h("thead", {}, h("tr", {}, ["id", "name", "user", "state", "reason", "kind", "resources", "sweep", "submitted", "run time", ""].map((c) => h("th", {}, c)))),
        h(
          "tbody",
          {},
          shown.map((j) =>
            h(
              "tr",
              { "data-testid": "job-row", "data-job": j.id },
              h("td", {}, jobLink(j.id)),
              h("td", {}, jobLink(j.id, j.spec?.name || "(unnamed)")),
              h("td", {}, j.spec?.user ?? ""),
              h("td", {}, stateBadge(j.state)),
              h("td", { class: "reason", title: j.reason ?? "" }, j.reason ?? ""),
              h("td", {}, shortEnum(j.kind, "JOB_KIND_").toLowerCase()),
              h("td", {}, resourceText(j.spec ?? {})),
              h("td", {}, j.spec?.sweep_id ? h("a", { href: `#/sweeps?sweep=${encodeURIComponent(j.spec.sweep_id)}` }, j.spec.sweep_id) : ""),
              h("td", {}, new Date(Number(j.submit_time_ms)).toLocaleTimeString()),
              h("td", {}, runTimeMs(j, now) ? formatDuration(runTimeMs(j, now)) : ""),
              h("td", {}, cancelButton(j, refresh)),
            ),
          ),
        ),
      ),
    );
  };
  const setFilter = () => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
    history.replaceState(null, "", `#/jobs${q.toString() ? "?" + q : ""}`);
    render();
  };
  const stateSel = h(
    "select",
    { "data-testid": "filter-state", onchange: (e: Event) => ((f.state = (e.target as HTMLSelectElement).value), setFilter()) },
    h("option", { value: "" }, "all states"),
    h("option", { value: "ACTIVE" }, "not finished"),
    JOB_STATES.map((s) => h("option", { value: `JOB_STATE_${s}` }, s.toLowerCase())),
  );
  stateSel.value = f.state;
  sweepSel.addEventListener("change", () => ((f.sweep = sweepSel.value), setFilter()));
  const nameInput = h("input", {
    type: "search",
    placeholder: "name contains…",
    value: f.name,
    "data-testid": "filter-name",
    oninput: (e: Event) => ((f.name = (e.target as HTMLInputElement).value), setFilter()),
  });
  fill(view, h("h2", {}, "Jobs"), h("div", { class: "filters" }, stateSel, nameInput, sweepSel), table);
  let refresh = () => {};
  const stop = poll(async () => {
    jobs = await api.listJobs({ limit: 1000 });
    render();
  });
  refresh = () => void api.listJobs({ limit: 1000 }).then((j) => ((jobs = j), render()), showError);
  return stop;
}

// ------------------------------------------------------------------ job detail

function kv(rows: [string, Node | string | number | null | undefined][]): HTMLElement {
  return h("dl", { class: "kv" }, rows.filter(([, v]) => v !== null && v !== undefined && v !== "").flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v as Node | string)]));
}

function lineChart(canvas: HTMLCanvasElement, label: string): Chart<"line", UtilPoint[]> {
  return new Chart<"line", UtilPoint[]>(canvas, {
    type: "line",
    data: { datasets: [{ label, data: [], parsing: { xAxisKey: "t", yAxisKey: "pct" }, borderColor: "#2a6fdb", backgroundColor: "rgba(42,111,219,0.15)", fill: true, pointRadius: 0, tension: 0.2 }] },
    options: {
      animation: false,
      maintainAspectRatio: false,
      scales: {
        x: { type: "linear", title: { display: true, text: "seconds since this page opened" } },
        y: { min: 0, max: 100, title: { display: true, text: "GPU utilization (%)" } },
      },
    },
  });
}

function metricTable(series: MetricSeries[]): HTMLElement {
  const num = (x: number) => (Math.abs(x) >= 1e4 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(3) : String(Number(x.toPrecision(5))));
  return h(
    "table",
    {},
    h("thead", {}, h("tr", {}, ["metric", "last", "at step", "min", "max", "points"].map((c) => h("th", {}, c)))),
    h("tbody", {}, series.map((m) => h("tr", {}, h("td", {}, m.key), h("td", {}, num(m.last)), h("td", {}, m.last_step), h("td", {}, num(m.min)), h("td", {}, num(m.max)), h("td", {}, m.count)))),
  );
}

function jobDetailView(id: string): Cleanup {
  const info = h("div", {});
  const ranks = h("div", {});
  const logBox = h("pre", { class: "log", "data-testid": "log" });
  const rankSel = h("select", { "data-testid": "log-rank" }, h("option", { value: "0" }, "rank 0"));
  const followBox = h("input", { type: "checkbox", checked: true, "data-testid": "log-follow" });
  const logState = h("span", { class: "small", "data-testid": "log-state" });
  const canvas = h("canvas", {});
  const liveNote = "Mean over the job's GPUs, from the agents' live samples while this page is open.";
  const chartNote = h("p", { class: "small", "data-testid": "chart-note" }, liveNote);
  const findings = h("ul", { class: "findings", "data-testid": "usage-findings" });
  const metricsBox = h("div", { "data-testid": "metrics" });
  fill(
    view,
    h("h2", {}, `Job #${id}`),
    info,
    h("h3", {}, "Ranks"),
    ranks,
    h("h3", {}, "GPU utilization"),
    chartNote,
    h("div", { class: "chart" }, canvas),
    findings,
    metricsBox,
    h("h3", {}, "Log"),
    h("div", { class: "filters" }, rankSel, h("label", {}, followBox, " follow"), logState),
    logBox,
  );
  const chart = lineChart(canvas, "GPU utilization (%)");
  const t0 = Date.now();

  // The log: one stream at a time, restarted when the rank or follow changes.
  let abort: AbortController | null = null;
  const startLog = () => {
    abort?.abort();
    const ctl = new AbortController();
    abort = ctl;
    logBox.textContent = "";
    logState.textContent = followBox.checked ? "following…" : "reading…";
    const decoder = new TextDecoder();
    let attempt = -1;
    api
      .streamLogs(id, Number(rankSel.value), followBox.checked, (c) => {
        if (attempt >= 0 && c.attempt !== attempt) logBox.append(`\n--- attempt ${c.attempt} ---\n`);
        attempt = c.attempt;
        logBox.append(decoder.decode(base64ToBytes(c.data ?? ""), { stream: true })); // empty bytes come as null
        logBox.scrollTop = logBox.scrollHeight;
      }, ctl.signal)
      .then(
        () => {
          if (abort === ctl) logState.textContent = "end of log";
        },
        (e) => {
          if (abort === ctl && !ctl.signal.aborted) logState.textContent = `log: ${e instanceof Error ? e.message : e}`;
        },
      );
  };
  rankSel.addEventListener("change", startLog);
  followBox.addEventListener("change", startLog);

  let worldSize = -1;
  let history = false; // the chart shows the coordinator's history
  const stop = poll(async () => {
    const [job, nodes] = await Promise.all([api.getJob(id), api.listNodes()]);
    const now = Date.now();
    const spec = job.spec ?? {};
    // A pending job: why it waits, where the coordinator can say (WhyJob).
    const w = job.state === "JOB_STATE_PENDING" ? await api.whyJob(id) : null;
    const why = w
      ? h(
          "div",
          { class: "why", "data-testid": "why" },
          h("b", {}, "Why it waits: "),
          w.summary,
          w.queue ? h("div", { class: "small" }, `queue ${w.queue}, place ${w.position ?? "?"}`) : null,
          w.quota ? h("div", { class: "small" }, `quota: ${w.quota}`) : null,
          w.reservation ? h("div", { class: "small" }, `reservation: ${w.reservation} (job #${w.reservation_job_id})` + (Number(w.reservation_eta_ms) > 0 ? `, from ${new Date(Number(w.reservation_eta_ms)).toLocaleTimeString()}` : "")) : null,
          h("ul", { class: "small" }, (w.nodes ?? []).map((n) => h("li", {}, n))),
        )
      : null;
    fill(
      info,
      kv([
        ["name", spec.name || "(unnamed)"],
        ["state", stateBadge(job.state)],
        ["reason", job.reason],
        ["kind", shortEnum(job.kind, "JOB_KIND_").toLowerCase()],
        ["resources", resourceText(spec)],
        ["command", h("code", {}, (spec.command ?? []).join(" "))],
        ["attempt", String(job.attempt)],
        ["submitted", new Date(Number(job.submit_time_ms)).toLocaleString()],
        ["run time", runTimeMs(job, now) ? formatDuration(runTimeMs(job, now)) : null],
        ["sweep", spec.sweep_id ? h("a", { href: `#/sweeps?sweep=${encodeURIComponent(spec.sweep_id)}` }, spec.sweep_id) : null],
        ["params", Object.entries(spec.params ?? {}).map(([k, v]) => `${k}=${v}`).join(" ")],
        ["master", job.master_addr ? `${job.master_addr}:${job.master_port}` : null],
      ]),
      cancelButton(job, () => undefined),
      why,
    );
    const tasks = job.tasks ?? [];
    fill(
      ranks,
      tasks.length === 0
        ? h("p", { class: "small" }, "not placed yet")
        : h(
            "table",
            { "data-testid": "ranks-table" },
            h("thead", {}, h("tr", {}, ["rank", "node", "local rank", "GPUs", "state", "pid", "exit", "message"].map((c) => h("th", {}, c)))),
            h(
              "tbody",
              {},
              tasks.map((t) =>
                h(
                  "tr",
                  { "data-testid": "rank-row" },
                  h("td", {}, t.rank),
                  h("td", {}, t.node),
                  h("td", {}, t.local_rank),
                  h("td", {}, (t.gpu_indices ?? []).join(",")),
                  h("td", {}, shortEnum(t.state, "TASK_STATE_")),
                  h("td", {}, t.pid || ""),
                  h("td", {}, t.state === "TASK_STATE_EXITED" ? (t.signal ? `signal ${t.signal}` : t.exit_code) : ""),
                  h("td", {}, t.message ?? ""),
                ),
              ),
            ),
          ),
    );
    const ws = Math.max(1, tasks.length);
    if (ws !== worldSize) {
      fill(rankSel, Array.from({ length: ws }, (_, r) => h("option", { value: String(r) }, `rank ${r}`)));
      if (worldSize === -1) startLog();
      worldSize = ws;
    }
    // The coordinator's history (GetJobUsage) where it has one, else the
    // live node samples gathered while this page is open.
    const [usage, metrics] = await Promise.all([api.getJobUsage(id), api.getMetricSummary(id)]);
    if (usage && (usage.samples?.length ?? 0) > 0) {
      history = true;
      chart.data.datasets[0].data = usagePoints(usage.samples!, Number(job.start_time_ms ?? 0));
      (chart.options.scales!.x as any).title.text = "seconds since the job started";
      chartNote.textContent = "Mean over the job's GPUs, from the coordinator's utilization history of this job.";
      fill(findings, (usage.findings ?? []).map((f) => h("li", {}, h("b", {}, f.code), " ", f.message)));
      chart.update();
    } else if (!history) {
      const u = jobUtilization(job, nodes);
      if (u !== null && !isFinalState(job.state)) {
        chart.data.datasets[0].data.push({ t: Math.round((now - t0) / 100) / 10, pct: u });
        chart.update();
      } else if (chart.data.datasets[0].data.length === 0) {
        chartNote.textContent = `${liveNote} No samples: the job is ${isFinalState(job.state) ? "finished" : "not placed yet"}.`;
      }
    }
    if (metrics && metrics.length > 0) fill(metricsBox, h("h3", {}, "Metrics"), metricTable(metrics));
  });
  return () => {
    stop();
    abort?.abort();
    chart.destroy();
  };
}

// ------------------------------------------------------------------ sweeps

function sweepsView(params: URLSearchParams): Cleanup {
  const sweepSel = h("select", { "data-testid": "sweep-select" });
  const paramSel = h("select", { "data-testid": "sweep-param" });
  const metricSel = h("select", { "data-testid": "sweep-metric" }, h("option", { value: "runtime" }, "run time (s)"));
  const table = h("div", {});
  const canvas = h("canvas", {});
  fill(
    view,
    h("h2", {}, "Sweeps"),
    h("div", { class: "filters" }, sweepSel, " x: ", paramSel, " y: ", metricSel),
    h("p", { class: "small" }, "Each point is a trial (job) of the sweep; its hyper-parameters are JobSpec.params. The metrics the trials reported (where the coordinator records them) join run time among the y choices."),
    h("div", { class: "chart" }, canvas),
    table,
  );
  const chart = new Chart(canvas, {
    type: "scatter",
    data: { datasets: [{ label: "trials", data: [] as { x: number; y: number }[], pointRadius: 5, backgroundColor: "#2a6fdb" }] },
    options: { animation: false, maintainAspectRatio: false, scales: { x: { type: "linear" }, y: { title: { display: true, text: "run time (s)" } } } },
  });
  let all: Job[] = [];
  let sweep = params.get("sweep") ?? "";
  // Metrics the trials reported (GetMetrics summaries, where the coordinator
  // has them); a final trial's summary is fetched once.
  const summaries = new Map<string, { final: boolean; series: MetricSeries[] }>();
  const fetchSummaries = async (trials: Job[]) => {
    for (const t of trials.slice(0, 200)) {
      if (summaries.get(t.id)?.final) continue;
      const series = await api.getMetricSummary(t.id);
      if (series === null) return; // no metrics endpoint (or an error): run time only
      summaries.set(t.id, { final: isFinalState(t.state), series });
    }
  };
  const metric = (j: Job): number | null => {
    if (metricSel.value.startsWith("m:")) {
      const m = summaries.get(j.id)?.series.find((x) => `m:${x.key}` === metricSel.value);
      return m ? m.last : null;
    }
    const ms = runTimeMs(j, Date.now());
    return ms > 0 ? ms / 1000 : null;
  };
  const render = () => {
    const ids = sweepIds(all);
    if (!sweep && ids.length) sweep = ids[ids.length - 1];
    fill(sweepSel, ids.length ? ids.map((s) => h("option", { value: s }, s)) : h("option", { value: "" }, "no sweeps yet"));
    sweepSel.value = sweep;
    const trials = all.filter((j) => j.spec?.sweep_id === sweep);
    const names = paramNames(trials);
    const param = names.includes(paramSel.value) ? paramSel.value : names[0] ?? "";
    fill(paramSel, names.map((n) => h("option", { value: n }, n)));
    paramSel.value = param;
    const keys = [...new Set(trials.flatMap((t) => (summaries.get(t.id)?.series ?? []).map((m) => m.key)))].sort();
    const chosen = metricSel.value;
    fill(metricSel, h("option", { value: "runtime" }, "run time (s)"), keys.map((k) => h("option", { value: `m:${k}` }, `${k} (last)`)));
    metricSel.value = keys.some((k) => `m:${k}` === chosen) ? chosen : "runtime";
    (chart.options.scales!.y as any).title.text = metricSel.selectedOptions[0]?.textContent ?? "";
    const { axis, points } = sweepPoints(trials, param, metric);
    chart.options.scales!.x = {
      type: axis,
      title: { display: true, text: param },
      ticks: axis === "logarithmic" ? { callback: (v: number | string) => logTickLabel(Number(v)) } : {},
    } as never;
    if (axis === "category") (chart.options.scales!.x as any).labels = [...new Set(points.map((p) => String(p.x)))].sort();
    chart.data.datasets[0].data = points as never;
    chart.data.datasets[0].label = `${sweep}: ${points.length} trials with a value`;
    chart.update();
    fill(
      table,
      h(
        "table",
        { "data-testid": "sweep-table" },
        h("thead", {}, h("tr", {}, ["trial", "state", ...names, "run time", metricSel.value === "runtime" ? "" : (metricSel.selectedOptions[0]?.textContent ?? "")].map((c) => h("th", {}, c)))),
        h(
          "tbody",
          {},
          trials.map((t) =>
            h("tr", {}, h("td", {}, jobLink(t.id)), h("td", {}, stateBadge(t.state)), names.map((n) => h("td", {}, t.spec?.params?.[n] ?? "")), h("td", {}, runTimeMs(t, Date.now()) ? formatDuration(runTimeMs(t, Date.now())) : ""), h("td", {}, metricSel.value === "runtime" ? "" : String(metric(t) ?? ""))),
          ),
        ),
      ),
    );
  };
  sweepSel.addEventListener("change", () => {
    sweep = sweepSel.value;
    history.replaceState(null, "", `#/sweeps?sweep=${encodeURIComponent(sweep)}`);
    render();
  });
  paramSel.addEventListener("change", render);
  metricSel.addEventListener("change", render);
  const stop = poll(async () => {
    all = await api.listJobs({ limit: 1000 });
    if (!sweep) sweep = sweepIds(all).at(-1) ?? "";
    await fetchSummaries(all.filter((j) => j.spec?.sweep_id === sweep));
    render();
  });
  return () => {
    stop();
    chart.destroy();
  };
}

// ------------------------------------------------------------------ submit

function submitView(): Cleanup {
  const msg = h("p", { class: "status", "data-testid": "submit-error" });
  const field = (label: string, input: HTMLElement) => h("label", { class: "field" }, h("span", {}, label), input);
  const name = h("input", { name: "name", placeholder: "my-experiment", "data-testid": "submit-name" });
  const command = h("textarea", { name: "command", rows: 3, placeholder: "python train.py --lr 3e-4", "data-testid": "submit-command" });
  const shape = h(
    "select",
    { name: "shape", "data-testid": "submit-shape" },
    h("option", { value: "fraction" }, "share of one GPU (experiment)"),
    h("option", { value: "gpus" }, "whole GPUs (gang if > 1)"),
    h("option", { value: "nodes" }, "nodes x GPUs per node (gang)"),
  );
  const amount = h("input", { name: "amount", value: "0.25", "data-testid": "submit-amount" });
  const perNode = h("input", { name: "per_node", value: "1", type: "number", min: "1" });
  const priority = h("input", { name: "priority", value: "0", type: "number" });
  const restarts = h("input", { name: "max_restarts", value: "0", type: "number", min: "0" });
  const form = h(
    "form",
    {
      "data-testid": "submit-form",
      onsubmit: async (e: Event) => {
        e.preventDefault();
        const spec: JobSpec = {
          name: name.value.trim(),
          command: ["sh", "-c", command.value],
          priority: Number(priority.value),
          max_restarts: Number(restarts.value),
        };
        if (shape.value === "fraction") spec.gpu_fraction = Number(amount.value);
        else if (shape.value === "gpus") spec.gpus = Number(amount.value);
        else {
          spec.nodes = Number(amount.value);
          spec.gpus_per_node = Number(perNode.value);
        }
        try {
          const id = await api.submitJob(spec);
          location.hash = `#/jobs/${id}`;
        } catch (err) {
          msg.textContent = err instanceof Error ? err.message : String(err);
          msg.className = "status error";
        }
      },
    },
    field("name", name),
    field("command (run with sh -c)", command),
    field("resources", shape),
    field("amount (share, GPUs or nodes)", amount),
    field("GPUs per node (nodes only)", perNode),
    field("priority (higher runs first)", priority),
    field("max restarts", restarts),
    h("button", { type: "submit", "data-testid": "submit-button" }, "Submit"),
    msg,
  );
  fill(view, h("h2", {}, "Submit a job"), form);
  return () => undefined;
}

// ------------------------------------------------------------------ router

let cleanup: Cleanup = () => undefined;
function route(): void {
  cleanup();
  const [path, query] = (location.hash.slice(1) || "/cluster").split("?");
  const params = new URLSearchParams(query ?? "");
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", path.startsWith(a.getAttribute("href")!.slice(1)));
  const m = path.match(/^\/jobs\/(\d+)$/);
  if (m) cleanup = jobDetailView(m[1]);
  else if (path === "/jobs") cleanup = jobsView(params);
  else if (path === "/sweeps") cleanup = sweepsView(params);
  else if (path === "/submit") cleanup = submitView();
  else cleanup = clusterView();
}

const token = document.getElementById("token") as HTMLInputElement;
token.value = api.getToken();
token.addEventListener("change", () => api.setToken(token.value.trim()));
window.addEventListener("hashchange", route);
route();
