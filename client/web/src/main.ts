// The trainctl dashboard: one page, hash routes, each view a function that
// renders into #view and returns a cleanup (timers, streams, charts).
//   #/cluster        every GPU a tile (utilization colour, memory, temperature, jobs);
//                    each node's state (ready, lost, draining, drained, down) with
//                    why, and Drain…/Resume buttons (admins)
//   #/jobs?...       job list with filters (state, name, sweep) and cancel
//   #/jobs/ID        job detail: ranks, a terminal beside a running rank
//                    (terminal.ts), live log (follow), GPU utilization and
//                    memory over time, metric curves (every key vs step)
//   #/sweeps?sweep=  sweep comparison chart (metric vs hyper-parameter) and the
//                    trials' curves of one metric overlaid; opens on the newest
//                    sweep, both charts on the sweep's metric
//   #/submit         submit form
//   #/usage?by=      GPU-hours allocated and used per day by user or project
//                    (the 6 largest over the window), and the window's table
import "./style.css";
import * as api from "./api";
import { Plot, curveOptions, gpuHoursOptions, scatterOptions, usageOptions } from "./charts";
import { fill, h } from "./dom";
import {
  base64ToBytes,
  checkDrainForm,
  filterJobs,
  formatBytes,
  formatDuration,
  formatMetric,
  isFinalState,
  jobStateLabel,
  jobUtilization,
  nodeActions,
  checkDownForm,
  type NodeButton,
  nodeAdminLine,
  nodeShownState,
  paramNames,
  resourceText,
  runTimeMs,
  shortEnum,
  sweepIds,
  sweepPoints,
  utilColor,
  type JobFilter,
} from "./format";
import { TerminalSession } from "./terminal";
import { align, metricCurves, sweepMetric, sweepsNewestFirst, trialCurves, usageSeries } from "./series";
import type { Job, JobSpec, JobUsageSample, MetricSeries, NodeView } from "./types";

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

function stateBadge(state: string, stoppedEarlyAtStep?: string): HTMLElement {
  const s = shortEnum(state, "JOB_STATE_");
  const label = jobStateLabel({ state, stopped_early_at_step: stoppedEarlyAtStep });
  return h("span", { class: `badge state-${s.toLowerCase()}`, "data-testid": "job-state" }, label);
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

// Node admin actions (drain, down, resume). There is no whoami API: the buttons
// show until the coordinator answers PERMISSION_DENIED, then stay hidden for
// the session while the token box holds the token that was refused.
const DENIED_KEY = "trainctl.nodeActionsDeniedFor";
const nodeActionsDenied = () => sessionStorage.getItem(DENIED_KEY) === api.getToken();

/** A node's section of the cluster view; kept across refreshes so that an open drain form keeps what is typed. */
interface NodeCard {
  section: HTMLElement;
  update(v: NodeView, denied: boolean, nowMs: number): void;
}

function nodeCard(name: string, refresh: () => void, denied: () => void): NodeCard {
  const head = h("h3", {});
  const reasonLine = h("div", { class: "admin-reason", "data-testid": "node-reason", hidden: true });
  const tiles = h("div", { class: "tiles" });
  const buttons = h("span", { class: "node-buttons" });
  const msg = h("span", { class: "status error", "data-testid": "node-action-error" });
  const reason = h("input", { name: "reason", size: 32, placeholder: "reason (required), e.g. swap PSU", "data-testid": "drain-reason" });
  const deadline = h("input", { name: "deadline", size: 14, placeholder: "deadline: 30m, 2h", "data-testid": "drain-deadline", title: "Optional: after this long, what still runs on the node is requeued (no restart used). Empty: running jobs finish." });
  const submit = h("button", { type: "submit", class: "danger", "data-testid": "drain-submit" }, "Drain");
  // The form drains (reason, optional deadline) or downs (reason only).
  let mode: "drain" | "down" = "drain";
  const setError = (text: string) => (msg.textContent = text);
  // Runs one UpdateNodes call from `button`; on success refreshes the view.
  const act = async (button: HTMLButtonElement, action: "NODE_ACTION_DRAIN" | "NODE_ACTION_RESUME" | "NODE_ACTION_DOWN", reasonText = "", deadlineS = 0) => {
    button.disabled = true;
    setError("");
    try {
      await api.updateNodes({ nodes: [name], action, reason: reasonText || undefined, deadline_s: deadlineS > 0 ? String(deadlineS) : undefined });
      form.hidden = true;
      reason.value = deadline.value = "";
      refresh();
    } catch (e) {
      setError(`${action.replace("NODE_ACTION_", "").toLowerCase()} failed: ${e instanceof Error ? e.message : String(e)}`);
      if (api.isPermissionDenied(e)) {
        sessionStorage.setItem(DENIED_KEY, api.getToken());
        form.hidden = true;
        denied();
      }
    } finally {
      button.disabled = false;
    }
  };
  const form: HTMLFormElement = h(
    "form",
    {
      class: "drain-form",
      hidden: true,
      "data-testid": "drain-form",
      onsubmit: (e: Event) => {
        e.preventDefault();
        if (mode === "down") {
          const checked = checkDownForm(reason.value);
          if ("error" in checked) return setError(checked.error);
          return void act(submit, "NODE_ACTION_DOWN", checked.reason);
        }
        const checked = checkDrainForm(reason.value, deadline.value);
        if ("error" in checked) return setError(checked.error);
        void act(submit, "NODE_ACTION_DRAIN", checked.reason, checked.deadline_s);
      },
    },
    reason,
    deadline,
    submit,
    h("button", { type: "button", onclick: () => ((form.hidden = true), setError("")) }, "Cancel"),
  );
  // Opens the form for a drain or a down.
  const open = (m: "drain" | "down") => {
    mode = m;
    deadline.hidden = m === "down";
    submit.textContent = m === "down" ? "Down now" : "Drain";
    setError("");
    form.hidden = false;
    reason.focus();
  };
  const drainButton = h(
    "button",
    { "data-testid": "node-drain", title: "No new jobs on this node; running jobs finish (admins)", onclick: () => open("drain") },
    "Drain…",
  );
  const downButton = h(
    "button",
    { "data-testid": "node-down", class: "danger", title: "Out of service now: what runs there is stopped and requeued, no restart used (admins)", onclick: () => open("down") },
    "Down…",
  );
  const resumeButton: HTMLButtonElement = h(
    "button",
    { "data-testid": "node-resume", title: "Put the node back in service (admins)", onclick: () => void act(resumeButton, "NODE_ACTION_RESUME") },
    "Resume",
  );
  const byAction: Record<NodeButton, HTMLElement> = { drain: drainButton, down: downButton, resume: resumeButton };
  let shown = "";
  return {
    section: h("section", { class: "node", "data-testid": "node", "data-node": name }, head, reasonLine, h("div", { class: "node-actions" }, buttons, form, msg), tiles),
    update(v, isDenied, nowMs) {
      const state = nodeShownState(v);
      fill(
        head,
        v.node.name,
        " ",
        h("span", { class: `badge node-${state}`, "data-testid": "node-state" }, state),
        v.node.fake_gpus ? h("span", { class: "badge fake" }, "fake GPUs") : null,
        h("span", { class: "small" }, ` ${v.node.address}`),
      );
      const line = nodeAdminLine(v.node.admin, nowMs);
      reasonLine.textContent = line;
      reasonLine.hidden = line === "";
      // The buttons change only with the actions they offer, so a click in
      // flight or an open form is not disturbed by a refresh.
      const actions = isDenied ? [] : nodeActions(v);
      if (actions.join(",") !== shown) {
        shown = actions.join(",");
        fill(buttons, actions.map((a) => byAction[a]));
        if (!actions.includes(mode)) form.hidden = true;
      }
      fill(tiles, (v.node.gpus ?? []).map((_, i) => gpuTile(v, i)));
    },
  };
}

function clusterView(): Cleanup {
  const summary = h("p", { "data-testid": "cluster-summary" });
  const note = h(
    "p",
    { class: "small", "data-testid": "node-actions-note", hidden: true },
    "node actions need an admin token: the coordinator refused this token's drain, down or resume (put an admin's token in the token box to get the buttons back)",
  );
  const list = h("div", {});
  fill(view, h("h2", {}, "Cluster"), h("p", { class: "legend" }, "Tile colour: GPU utilization, ",
    h("span", { class: "swatch", style: `background:${utilColor(0)}` }), " idle … ",
    h("span", { class: "swatch", style: `background:${utilColor(50)}` }), " 50% … ",
    h("span", { class: "swatch", style: `background:${utilColor(100)}` }), " 100%"), summary, note, list);
  const cards = new Map<string, NodeCard>();
  let last: NodeView[] = [];
  let order = "";
  const render = (nodes: NodeView[]) => {
    last = nodes;
    const gpus = nodes.reduce((s, v) => s + (v.node.gpus?.length ?? 0), 0);
    summary.textContent = `${nodes.length} nodes, ${gpus} GPUs`;
    const denied = nodeActionsDenied();
    note.hidden = !denied;
    const now = Date.now();
    for (const v of nodes) {
      let c = cards.get(v.node.name);
      if (!c) cards.set(v.node.name, (c = nodeCard(v.node.name, refresh, () => render(last))));
      c.update(v, denied, now);
    }
    const names = nodes.map((v) => v.node.name);
    for (const n of [...cards.keys()]) if (!names.includes(n)) cards.delete(n);
    // Sections are re-placed only when the node list changes (moving one
    // would take the focus from its drain form).
    if (names.join("\n") !== order) {
      order = names.join("\n");
      fill(list, names.map((n) => cards.get(n)!.section));
    }
  };
  const update = async () => render(await api.listNodes());
  const refresh = () => void update().then(showOk, showError);
  return poll(update);
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
              h("td", {}, stateBadge(j.state, j.stopped_early_at_step)),
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

function metricTable(series: MetricSeries[]): HTMLElement {
  return h(
    "table",
    {},
    h("thead", {}, h("tr", {}, ["metric", "last", "at step", "min", "max", "points"].map((c) => h("th", {}, c)))),
    h("tbody", {}, series.map((m) => h("tr", {}, h("td", {}, m.key), h("td", {}, formatMetric(m.last)), h("td", {}, m.last_step), h("td", {}, formatMetric(m.min)), h("td", {}, formatMetric(m.max)), h("td", {}, m.count)))),
  );
}

function jobDetailView(id: string): Cleanup {
  const info = h("div", {});
  const ranks = h("div", {});
  const logBox = h("pre", { class: "log", "data-testid": "log" });
  const rankSel = h("select", { "data-testid": "log-rank" }, h("option", { value: "0" }, "rank 0"));
  const followBox = h("input", { type: "checkbox", checked: true, "data-testid": "log-follow" });
  const logState = h("span", { class: "small", "data-testid": "log-state" });
  const usageBox = h("div", { class: "chart", "data-testid": "usage-chart" });
  const liveNote = "Mean over the job's GPUs, from the agents' live samples while this page is open (utilization only).";
  const chartNote = h("p", { class: "small", "data-testid": "chart-note" }, liveNote);
  const findings = h("ul", { class: "findings", "data-testid": "usage-findings" });
  const metricNote = h("p", { class: "small", "data-testid": "metric-note" });
  const metricBox = h("div", { class: "chart", "data-testid": "metric-chart" });
  const metricTableBox = h("div", {});
  const metricsBox = h("div", { "data-testid": "metrics", hidden: true }, h("h3", {}, "Metrics"), metricNote, metricBox, metricTableBox);
  // The terminal: exec into a running rank (`trainctl exec -it`).
  const termRank = h("select", { "data-testid": "terminal-rank" }, h("option", { value: "0" }, "rank 0"));
  const termCmd = h("input", { type: "text", size: 40, placeholder: "command (empty: the login shell)", "data-testid": "terminal-command" });
  const termOpen = h("button", { type: "button", disabled: true, "data-testid": "terminal-open" }, "Open terminal");
  const termClose = h("button", { type: "button", hidden: true, "data-testid": "terminal-close" }, "Close");
  const termState = h("span", { class: "small", "data-testid": "terminal-state" }, "the job must be running");
  const termBox = h("div", { class: "terminal", hidden: true, "data-testid": "terminal" });
  let session: TerminalSession | null = null;
  let running = false;
  const endTerminal = () => {
    session?.close();
    session = null;
    termBox.hidden = true;
    termClose.hidden = true;
    termOpen.disabled = !running;
  };
  termOpen.addEventListener("click", () => {
    endTerminal();
    termBox.hidden = false;
    termClose.hidden = false;
    termOpen.disabled = true;
    session = new TerminalSession(termBox, id, Number(termRank.value), termCmd.value, api.getToken(), (text, final) => {
      termState.textContent = text;
      if (final) termOpen.disabled = !running;
    });
  });
  termClose.addEventListener("click", () => {
    endTerminal();
    termState.textContent = "closed";
  });
  fill(
    view,
    h("h2", {}, `Job #${id}`),
    info,
    h("h3", {}, "Ranks"),
    ranks,
    h("h3", {}, "Terminal"),
    h("div", { class: "filters" }, termRank, termCmd, termOpen, termClose, termState),
    termBox,
    h("h3", {}, "GPU utilization and memory"),
    chartNote,
    usageBox,
    findings,
    metricsBox,
    h("h3", {}, "Log"),
    h("div", { class: "filters" }, rankSel, h("label", {}, followBox, " follow"), logState),
    logBox,
  );
  const usagePlot = new Plot(usageBox);
  const metricPlot = new Plot(metricBox, 280);
  const live: JobUsageSample[] = []; // ListNodes samples, without a history

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
  let metricsSeen = ""; // the summaries the metric chart was drawn for
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
        ["state", stateBadge(job.state, job.stopped_early_at_step)],
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
    const wasRunning = running;
    running = job.state === "JOB_STATE_RUNNING";
    if (running !== wasRunning && !session) {
      termOpen.disabled = !running;
      termState.textContent = running ? "" : "the job must be running";
    }
    if (ws !== worldSize) {
      fill(rankSel, Array.from({ length: ws }, (_, r) => h("option", { value: String(r) }, `rank ${r}`)));
      fill(termRank, Array.from({ length: ws }, (_, r) => h("option", { value: String(r) }, `rank ${r}`)));
      if (worldSize === -1) startLog();
      worldSize = ws;
    }
    // The coordinator's history (GetJobUsage) where it has one, else the
    // live node samples gathered while this page is open.
    const [usage, metrics] = await Promise.all([api.getJobUsage(id), api.getMetricSummary(id)]);
    const samples = usage?.samples ?? [];
    if (samples.length > 0) {
      history = true;
      const total = Math.max(0, ...samples.map((x) => Number(x.gpu_memory_total_bytes ?? 0)));
      usagePlot.draw("history", () => usageOptions(total), usageSeries(samples));
      const period = Number(usage!.sample_period_ms ?? 0) / 1000;
      chartNote.textContent =
        `Mean GPU utilization over the job's GPUs and the GPU memory it uses, from the coordinator's history of this job: ` +
        `${samples.length} samples${period > 0 ? `, one every ${period} s` : ""}. Hover for the values at a time.`;
      fill(findings, (usage!.findings ?? []).map((f) => h("li", {}, h("b", {}, f.code), " ", f.message)));
    } else if (!history) {
      const u = jobUtilization(job, nodes);
      if (u !== null && !isFinalState(job.state)) {
        live.push({ time_ms: String(now), gpu_util_pct: u });
        usagePlot.draw("live", () => usageOptions(0), usageSeries(live));
      } else if (live.length === 0) {
        chartNote.textContent = `${liveNote} No samples: the job is ${isFinalState(job.state) ? "finished" : "not placed yet"}.`;
      }
    }
    // Metric curves: every point (GetMetrics) again only when the summaries
    // say something new was reported.
    const seen = (metrics ?? []).map((m) => `${m.key}:${m.count}:${m.last_step}`).join(",");
    if (metrics && metrics.length > 0 && seen !== metricsSeen) {
      const full = await api.getMetrics(id);
      if (full) {
        metricsSeen = seen;
        const { attempt, curves } = metricCurves(full);
        const { labels, data } = align(curves);
        metricPlot.draw(labels.join("\n"), () => curveOptions("step", "value", labels), data);
        metricNote.textContent =
          `Every key the job reported, against its step (attempt ${attempt}; steps restart with an attempt). ` +
          "Click a name in the legend to hide its curve: the y axis rescales to the others.";
      }
      metricsBox.hidden = false;
      fill(metricTableBox, metricTable(metrics));
    }
  });
  return () => {
    stop();
    abort?.abort();
    session?.close();
    usagePlot.destroy();
    metricPlot.destroy();
  };
}

// ------------------------------------------------------------------ sweeps

function sweepsView(params: URLSearchParams): Cleanup {
  const sweepSel = h("select", { "data-testid": "sweep-select" });
  const paramSel = h("select", { "data-testid": "sweep-param" });
  const metricSel = h("select", { "data-testid": "sweep-metric" }, h("option", { value: "runtime" }, "run time (s)"));
  const curveSel = h("select", { "data-testid": "sweep-curve-metric" });
  const curveNote = h("p", { class: "small", "data-testid": "sweep-curve-note" });
  const table = h("div", {});
  const scatterBox = h("div", { class: "chart", "data-testid": "sweep-chart" });
  const curveBox = h("div", { class: "chart", "data-testid": "sweep-curves" });
  fill(
    view,
    h("h2", {}, "Sweeps"),
    h("div", { class: "filters" }, sweepSel, " x: ", paramSel, " y: ", metricSel),
    h("p", { class: "small" }, "Each point is a trial (job) of the sweep; its hyper-parameters are JobSpec.params. The charts open on the sweep's metric (the one its --early-stop names, else loss or the first reported); the metrics the trials reported join run time among the y choices."),
    scatterBox,
    h("h3", {}, "Trial curves"),
    h("div", { class: "filters" }, "metric: ", curveSel),
    curveNote,
    curveBox,
    table,
  );
  const scatter = new Plot(scatterBox);
  const curvePlot = new Plot(curveBox, 280);
  let all: Job[] = [];
  let sweep = params.get("sweep") ?? "";
  // Whether the user picked the comparison's y or the curves' metric for this
  // sweep; until then both follow the sweep's metric (sweepMetric).
  let yPicked = false;
  let curvePicked = false;
  const trialsOf = (s: string) => all.filter((j) => j.spec?.sweep_id === s);
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
  // Each trial's history of one key ("id\nkey"), fetched again only when the
  // trial's summary of that key changed.
  const histories = new Map<string, { seen: string; series: MetricSeries | undefined }>();
  const fetchCurves = async (trials: Job[], key: string) => {
    for (const t of trials.slice(0, 200)) {
      const m = summaries.get(t.id)?.series.find((x) => x.key === key);
      if (!m || histories.get(`${t.id}\n${key}`)?.seen === `${m.count}:${m.last_step}`) continue;
      const r = await api.getMetrics(t.id, key);
      if (r === null) return;
      histories.set(`${t.id}\n${key}`, { seen: `${m.count}:${m.last_step}`, series: r.find((x) => x.key === key) });
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
  // The keys the trials reported, and the sweep's own metric (its spec's
  // early_stop.metric) before any trial reported it.
  const reportedKeys = (trials: Job[]) => [...new Set(trials.flatMap((t) => (summaries.get(t.id)?.series ?? []).map((m) => m.key)))].sort();
  const metricKeys = (trials: Job[]) => {
    const keys = reportedKeys(trials);
    const own = sweepMetric(trials, keys);
    return own && !keys.includes(own) ? [...keys, own].sort() : keys;
  };
  // The curve select keeps the user's choice, else shows the sweep's metric.
  const curveKey = (trials: Job[], keys: string[]) =>
    curvePicked && keys.includes(curveSel.value) ? curveSel.value : sweepMetric(trials, reportedKeys(trials));
  const render = () => {
    const ids = sweepsNewestFirst(all);
    if (!sweep && ids.length) sweep = ids[0];
    fill(sweepSel, ids.length ? ids.map((s) => h("option", { value: s }, s)) : h("option", { value: "" }, "no sweeps yet"));
    sweepSel.value = sweep;
    const trials = trialsOf(sweep);
    const names = paramNames(trials);
    const param = names.includes(paramSel.value) ? paramSel.value : names[0] ?? "";
    fill(paramSel, names.map((n) => h("option", { value: n }, n)));
    paramSel.value = param;
    const keys = metricKeys(trials);
    const own = sweepMetric(trials, reportedKeys(trials));
    const chosen = yPicked ? metricSel.value : own ? `m:${own}` : "runtime";
    fill(metricSel, h("option", { value: "runtime" }, "run time (s)"), keys.map((k) => h("option", { value: `m:${k}` }, `${k} (last)`)));
    metricSel.value = chosen === "runtime" || keys.some((k) => `m:${k}` === chosen) ? chosen : "runtime";

    // The comparison: one point per trial at (param value, metric).
    const yLabel = metricSel.selectedOptions[0]?.textContent ?? "";
    const { axis, points } = sweepPoints(trials, param, metric);
    const categories = axis === "category" ? [...new Set(points.map((p) => String(p.x)))].sort() : [];
    const xy = points
      .map((p): [number, number] => [axis === "category" ? categories.indexOf(String(p.x)) : Number(p.x), p.y])
      .sort((a, b) => a[0] - b[0]);
    const label = `${sweep}: ${points.length} trials with a value`;
    scatter.draw([axis, param, yLabel, label, ...categories].join("\n"), () => scatterOptions(axis, param, yLabel, label, categories), [
      xy.map(([x]) => x),
      xy.map(([, y]) => y),
    ]);

    // The trials' curves of one key, overlaid.
    const key = curveKey(trials, keys);
    fill(curveSel, keys.length ? keys.map((k) => h("option", { value: k }, k)) : h("option", { value: "" }, "no metrics reported"));
    curveSel.value = key;
    const curves = key ? trialCurves(trials.slice(0, 200), (id) => histories.get(`${id}\n${key}`)?.series) : [];
    if (curves.length > 0) {
      const { labels, data } = align(curves);
      curvePlot.draw([key, ...labels].join("\n"), () => curveOptions("step", key, labels), data);
      curveNote.textContent =
        `${curves.length} of ${trials.length} trials reported ${key}: one curve per trial (its newest attempt, lowest reporting rank)` +
        `${trials.length > 200 ? ", the first 200 trials" : ""}. Click a trial in the legend to hide it.`;
    } else {
      curvePlot.clear();
      curveNote.textContent = `No trial of this sweep has reported ${key || "a metric"} yet (trainctl report, or trainctl_report_metric() in the training loop).`;
    }

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
  // Fetches what the shown sweep needs (summaries, then the chosen key's
  // histories), then draws.
  const update = async () => {
    const trials = trialsOf(sweep);
    await fetchSummaries(trials);
    await fetchCurves(trials, curveKey(trials, metricKeys(trials)));
    render();
  };
  sweepSel.addEventListener("change", () => {
    sweep = sweepSel.value;
    yPicked = curvePicked = false;
    history.replaceState(null, "", `#/sweeps?sweep=${encodeURIComponent(sweep)}`);
    render();
    void update().catch(showError);
  });
  paramSel.addEventListener("change", render);
  metricSel.addEventListener("change", () => ((yPicked = true), render()));
  curveSel.addEventListener("change", () => ((curvePicked = true), void update().catch(showError)));
  const stop = poll(async () => {
    all = await api.listJobs({ limit: 1000 });
    if (!sweep) sweep = sweepsNewestFirst(all)[0] ?? "";
    await update();
  });
  return () => {
    stop();
    scatter.destroy();
    curvePlot.destroy();
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
  const workdir = h("input", { name: "workdir", placeholder: "/home/me/project (empty: a private scratch dir)", "data-testid": "submit-workdir" });
  const env = h("textarea", { name: "env", rows: 2, placeholder: "NAME=value, one per line", "data-testid": "submit-env" });
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
        // A web submit carries no shell environment: only what is given here
        // (the task also gets the node's PATH and the account's HOME).
        if (workdir.value.trim() !== "") spec.workdir = workdir.value.trim();
        const vars: Record<string, string> = {};
        for (const line of env.value.split("\n")) {
          const t = line.trim();
          if (t === "") continue;
          const eq = t.indexOf("=");
          if (eq <= 0) {
            msg.textContent = `env: "${t}" is not NAME=value`;
            msg.className = "status error";
            return;
          }
          vars[t.slice(0, eq)] = t.slice(eq + 1);
        }
        if (Object.keys(vars).length > 0) spec.env = vars;
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
    field("working directory (absolute)", workdir),
    field("environment (NAME=value per line)", env),
    h("button", { type: "submit", "data-testid": "submit-button" }, "Submit"),
    msg,
  );
  fill(view, h("h2", {}, "Submit a job"), form);
  return () => undefined;
}

// ------------------------------------------------------------------ usage

function usageView(params: URLSearchParams): Cleanup {
  const days = 14;
  const bySel = h("select", { "data-testid": "usage-by" }, h("option", { value: "user" }, "user"), h("option", { value: "project" }, "project"));
  (bySel as HTMLSelectElement).value = params.get("by") === "project" ? "project" : "user";
  const note = h("p", { class: "small", "data-testid": "usage-note" });
  const box = h("div", { class: "chart", "data-testid": "usage-chart" });
  const table = h("div", { "data-testid": "usage-table" });
  fill(
    view,
    h("h2", {}, "GPU usage"),
    h("div", { class: "filters" }, "by: ", bySel),
    h("p", { class: "small" }, `Allocated GPU-hours per day over the last ${days} days (GPUs x wall time; a fraction counts its share, a gang every GPU), the 6 largest groups; the table adds the used GPU-hours (GPU activity x share x time) and efficiency. A user sees only their own jobs.`),
    box,
    note,
    table,
  );
  const plot = new Plot(box, 260);
  let stopped = false;
  const load = async () => {
    const by = (bySel as HTMLSelectElement).value;
    history.replaceState(null, "", `#/usage?by=${by}`);
    const dayMs = 86400 * 1000;
    const end = Math.ceil(Date.now() / dayMs) * dayMs;
    try {
      const perDay = await Promise.all(
        Array.from({ length: days }, (_, i) => api.getUsage(by, end - (days - i) * dayMs, end - (days - i - 1) * dayMs)),
      );
      const whole = await api.getUsage(by, end - days * dayMs, end);
      if (stopped) return;
      const top = (whole.rows ?? []).slice(0, 6).map((r) => r.key);
      const xs = perDay.map((_, i) => (end - (days - i) * dayMs) / 1000);
      const ys = top.map((key) => perDay.map((d) => (d.rows ?? []).find((r) => r.key === key)?.allocated_gpu_hours ?? 0));
      plot.draw(`${by}:${top.join(",")}`, () => gpuHoursOptions(top.map((k) => k || "(none)")), [xs, ...ys]);
      note.textContent = whole.only_user ? `Only user ${whole.only_user}'s jobs.` : "";
      const rows = [...(whole.rows ?? []), ...((whole.rows ?? []).length > 1 && whole.total ? [whole.total] : [])];
      fill(
        table,
        h(
          "table",
          {},
          h("tr", {}, ...[by, "allocated GPU-h", "used GPU-h", "efficiency", "jobs", "failed", "preempted"].map((c) => h("th", {}, c))),
          ...rows.map((r) =>
            h(
              "tr",
              { "data-testid": "usage-row" },
              h("td", {}, r.key || "-"),
              h("td", {}, (r.allocated_gpu_hours ?? 0).toFixed(2)),
              h("td", {}, (r.used_gpu_hours ?? 0).toFixed(2)),
              h("td", {}, `${((r.efficiency ?? 0) * 100).toFixed(1)}%`),
              h("td", {}, r.jobs ?? "0"),
              h("td", {}, r.failed ?? "0"),
              h("td", {}, r.preempted ?? "0"),
            ),
          ),
        ),
      );
    } catch (e) {
      if (!stopped) note.textContent = `usage: ${(e as Error).message}`;
    }
  };
  bySel.addEventListener("change", () => void load());
  void load();
  return () => {
    stopped = true;
    plot.destroy();
  };
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
  else if (path === "/usage") cleanup = usageView(params);
  else cleanup = clusterView();
}

const token = document.getElementById("token") as HTMLInputElement;
token.value = api.getToken();
token.addEventListener("change", () => api.setToken(token.value.trim()));
window.addEventListener("hashchange", route);
route();
