// Pure view logic of the dashboard (no DOM, no network): colour scale,
// number and time formatting, job summaries, log decoding, chart series.
// Unit-tested in format.test.ts.

import type { Job, JobSpec, NodeAdmin, NodeView } from "./types";

/**
 * Colour of a GPU tile for a utilization in percent (0-100; clamped):
 * HSL hue from 210 (idle, blue) through 120 (green) to 0 (busy, red), so
 * idle GPUs stand out as cool and saturated ones as hot. Returns "hsl(h, s%, l%)".
 */
export function utilColor(pct: number): string {
  const p = Math.min(100, Math.max(0, Number.isFinite(pct) ? pct : 0));
  const hue = Math.round(210 - 2.1 * p);
  return `hsl(${hue}, 70%, ${p === 0 ? 88 : 62}%)`;
}

/** Bytes as a short binary size: 0 B, 512 B, 1.5 KiB, 80 GiB, 1.2 TiB. */
export function formatBytes(bytes: number | string): string {
  let b = Number(bytes);
  if (!Number.isFinite(b) || b < 0) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) {
    b /= 1024;
    i++;
  }
  if (i === 0) return `${b} B`;
  const text = b >= 100 || Number.isInteger(b) ? b.toFixed(0) : b.toFixed(1);
  return `${text} ${units[i]}`;
}

/** A duration in ms as "850 ms", "42 s", "3 m 05 s", "2 h 07 m", "3 d 4 h". */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return "?";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} m ${String(s % 60).padStart(2, "0")} s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h} h ${String(m % 60).padStart(2, "0")} m`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

/**
 * A metric value in at most 5 significant digits, in exponent form when tiny
 * or huge: "0.25", "1.2346", "3.000e-5", "1.200e+4".
 */
export function formatMetric(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  return Math.abs(x) >= 1e4 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(3) : String(Number(x.toPrecision(5)));
}

/** "JOB_STATE_RUNNING" -> "RUNNING" (any enum name minus its prefix). */
export function shortEnum(name: string | undefined, prefix: string): string {
  if (!name) return "";
  return name.startsWith(prefix) ? name.slice(prefix.length) : name;
}

/**
 * A job's state as the dashboard shows it: the short state name, but
 * "STOPPED EARLY" for a sweep trial the early-stopping rule (ASHA) ended,
 * which a user's cancel is not (Job.stopped_early_at_step, as the CLI says).
 */
export function jobStateLabel(job: Pick<Job, "state" | "stopped_early_at_step">): string {
  if (job.state === "JOB_STATE_CANCELLED" && Number(job.stopped_early_at_step ?? 0) > 0) {
    return "STOPPED EARLY";
  }
  return shortEnum(job.state, "JOB_STATE_");
}

/** True for SUCCEEDED, FAILED and CANCELLED (docs/design.md §2). */
export function isFinalState(state: string): boolean {
  return ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"].includes(state);
}

/** What a job asked for, as the CLI says it: "1/4 GPU", "2 x 4 GPUs", "8 GPUs". */
export function resourceText(spec: JobSpec): string {
  const nodes = Number(spec.nodes ?? 0);
  const perNode = Number(spec.gpus_per_node ?? 0);
  if (nodes > 0 && perNode > 0) return `${nodes} x ${perNode} GPUs`;
  const gpus = Number(spec.gpus ?? 0);
  if (gpus > 1) return `${gpus} GPUs`;
  const frac = Number(spec.gpu_fraction ?? 0);
  if (frac > 0 && frac < 1) {
    for (const d of [2, 3, 4, 5, 6, 8, 10, 16]) {
      const n = frac * d;
      if (Math.abs(n - Math.round(n)) < 1e-9) return `${Math.round(n)}/${d} GPU`;
    }
    return `${frac.toFixed(3)} GPU`;
  }
  const mem = Number(spec.gpu_memory_bytes ?? 0);
  if (mem > 0) return `${formatBytes(mem)} GPU memory`;
  return "1 GPU";
}

/** Run time of a job in ms: end (or now, if still running) - start; 0 if never started. */
export function runTimeMs(job: Job, nowMs: number): number {
  const start = Number(job.start_time_ms ?? 0);
  if (start <= 0) return 0;
  const end = Number(job.end_time_ms ?? 0);
  return Math.max(0, (end > 0 ? end : nowMs) - start);
}

/** The filters of the job list; empty fields match everything. */
export interface JobFilter {
  state: string; // a JobState name, "" for all, "ACTIVE" for the non-final ones
  name: string; // substring of the name, case-insensitive
  sweep: string; // exact sweep id
}

/** Jobs matching `f`, in the order given. */
export function filterJobs(jobs: Job[], f: JobFilter): Job[] {
  const name = f.name.trim().toLowerCase();
  return jobs.filter((j) => {
    if (f.state === "ACTIVE" ? isFinalState(j.state) : f.state && j.state !== f.state) return false;
    if (name && !(j.spec?.name ?? "").toLowerCase().includes(name)) return false;
    if (f.sweep && (j.spec?.sweep_id ?? "") !== f.sweep) return false;
    return true;
  });
}

/** Sweep ids of `jobs`, sorted, without duplicates or the empty id. */
export function sweepIds(jobs: Job[]): string[] {
  return [...new Set(jobs.map((j) => j.spec?.sweep_id ?? "").filter((s) => s))].sort();
}

/** Base64 (protobuf JSON `bytes`) to raw bytes. */
export function base64ToBytes(b64: string): Uint8Array {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/**
 * Splits newline-delimited JSON as it arrives: feed() takes the text of the
 * next network chunk and returns the complete lines' parsed values; a partial
 * last line waits for the next chunk. Blank lines are skipped.
 */
export class NdjsonSplitter {
  private rest = "";
  feed(text: string): unknown[] {
    this.rest += text;
    const lines = this.rest.split("\n");
    this.rest = lines.pop() ?? "";
    return lines.filter((l) => l.trim() !== "").map((l) => JSON.parse(l));
  }
}

/**
 * Mean utilization (%) over the GPUs a job's tasks use right now, from the
 * node samples of ListNodes; null when none of its GPUs is found (not placed,
 * node gone).
 */
export function jobUtilization(job: Job, nodes: NodeView[]): number | null {
  const wanted = new Set<string>();
  for (const t of job.tasks ?? []) for (const u of t.gpu_uuids ?? []) wanted.add(u);
  let sum = 0;
  let n = 0;
  for (const v of nodes) {
    for (const g of v.node.gpus ?? []) {
      if (wanted.has(g.uuid)) {
        sum += Number(g.utilization_pct ?? 0);
        n++;
      }
    }
  }
  return n === 0 ? null : sum / n;
}

/** How a sweep parameter is drawn: numbers on a linear or log axis, else categories. */
export type AxisKind = "linear" | "logarithmic" | "category";

/**
 * Axis for the values of one hyper-parameter: "logarithmic" when all are
 * positive numbers spanning at least a factor of 100 (learning rates, weight
 * decay), "linear" for other numbers, "category" otherwise.
 */
export function paramAxis(values: string[]): AxisKind {
  const nums = values.map((v) => Number(v));
  if (values.length === 0 || nums.some((x) => !Number.isFinite(x)) || values.some((v) => v.trim() === ""))
    return "category";
  const min = Math.min(...nums);
  const max = Math.max(...nums);
  return min > 0 && max / min >= 100 ? "logarithmic" : "linear";
}

/** Names of the hyper-parameters of a sweep's trials, sorted. */
export function paramNames(trials: Job[]): string[] {
  const s = new Set<string>();
  for (const t of trials) for (const k of Object.keys(t.spec?.params ?? {})) s.add(k);
  return [...s].sort();
}

/** Chart point of a sweep trial: x the parameter value, y the metric, id the job. */
export interface SweepPoint {
  x: number | string;
  y: number;
  id: string;
  state: string;
}

/**
 * Points of the sweep comparison chart: for each trial that has parameter
 * `param` and a metric value, (param value, metric). `metric` maps a job to
 * its value or null (not known yet). Numeric axes get numbers.
 */
export function sweepPoints(
  trials: Job[],
  param: string,
  metric: (j: Job) => number | null,
): { axis: AxisKind; points: SweepPoint[] } {
  const withParam = trials.filter((t) => (t.spec?.params ?? {})[param] !== undefined);
  const axis = paramAxis(withParam.map((t) => t.spec!.params![param]));
  const points: SweepPoint[] = [];
  for (const t of withParam) {
    const y = metric(t);
    if (y === null || !Number.isFinite(y)) continue;
    const raw = t.spec!.params![param];
    points.push({ x: axis === "category" ? raw : Number(raw), y, id: t.id, state: t.state });
  }
  return { axis, points };
}

/**
 * Tick label on a logarithmic axis: the value for 1, 2 and 5 times a power
 * of ten, "" for the ticks between (so labels never overlap).
 */
export function logTickLabel(v: number): string {
  if (!(v > 0)) return "";
  const m = v / 10 ** Math.floor(Math.log10(v) + 1e-9);
  return [1, 2, 5].some((x) => Math.abs(m - x) < 1e-6) ? String(Number(v.toPrecision(6))) : "";
}

// ------------------------------------------------------------------ nodes

/**
 * A node's state as `trainctl nodes` shows it: its service state when an
 * admin (or the coordinator) took it out of service ("draining", "drained",
 * "down"), else its liveness ("ready", "lost").
 */
export function nodeShownState(v: Pick<NodeView, "node" | "service_state">): string {
  switch (v.service_state) {
    case "NODE_SERVICE_STATE_DRAINING":
      return "draining";
    case "NODE_SERVICE_STATE_DRAINED":
      return "drained";
    case "NODE_SERVICE_STATE_DOWN":
      return "down";
    default:
      return shortEnum(v.node.state, "NODE_STATE_").toLowerCase();
  }
}

/**
 * A coarse age as the CLI writes it, without a zero second part: "45s",
 * "5m", "12m5s", "2h", "3h4m", "2d3h". Negative counts as 0.
 */
export function formatAge(ms: number): string {
  const s = Math.max(0, Math.floor((Number.isFinite(ms) ? ms : 0) / 1000));
  const two = (big: number, bigUnit: string, small: number, smallUnit: string) =>
    small > 0 ? `${big}${bigUnit}${small}${smallUnit}` : `${big}${bigUnit}`;
  if (s < 60) return `${s}s`;
  if (s < 3600) return two(Math.floor(s / 60), "m", s % 60, "s");
  if (s < 86400) return two(Math.floor(s / 3600), "h", Math.floor((s % 3600) / 60), "m");
  return two(Math.floor(s / 86400), "d", Math.floor((s % 86400) / 3600), "h");
}

/**
 * Why a node is out of service, as `trainctl nodes` says it under its table:
 * "DRAIN by alice 5m ago: swap PSU, deadline in 25m" (", deadline passed"
 * once it is; " (automatic)" for the coordinator's own drains; no "by" part
 * when no user is known: authentication off). "" for a node in service.
 */
export function nodeAdminLine(admin: NodeAdmin | null | undefined, nowMs: number): string {
  if (!admin || !admin.state || admin.state === "NODE_ADMIN_STATE_UNSPECIFIED") return "";
  const what = admin.state === "NODE_ADMIN_STATE_DOWN" ? "DOWN" : "DRAIN";
  const by = admin.by ? ` by ${admin.by}` : "";
  let out = `${what}${by} ${formatAge(nowMs - Number(admin.since_ms ?? 0))} ago: ${admin.reason ?? ""}`;
  const deadline = Number(admin.deadline_ms ?? 0);
  if (deadline > 0) out += deadline > nowMs ? `, deadline in ${formatAge(deadline - nowMs)}` : ", deadline passed";
  if (admin.automatic) out += " (automatic)";
  return out;
}

/** A node admin button of the cluster view. */
export type NodeButton = "drain" | "down" | "resume";

/**
 * Which admin buttons a node gets, as Slurm's node states allow them: in
 * service, Drain and Down; draining or drained, Resume and Down (stop what
 * still runs there now); down, Resume.
 */
export function nodeActions(v: Pick<NodeView, "service_state">): NodeButton[] {
  switch (v.service_state) {
    case "NODE_SERVICE_STATE_DOWN":
      return ["resume"];
    case "NODE_SERVICE_STATE_DRAINING":
    case "NODE_SERVICE_STATE_DRAINED":
      return ["resume", "down"];
    default:
      return ["drain", "down"];
  }
}

/**
 * A drain deadline as typed in the dashboard: "" (none: 0), seconds ("90"),
 * or a duration of h/m/s parts ("30m", "2h", "1h30m", "1.5h"). Returns whole
 * seconds, or null when the text is none of those or under a second.
 */
export function parseDeadline(text: string): number | null {
  const t = text.trim().toLowerCase();
  if (t === "") return 0;
  let seconds: number;
  if (/^\d+(\.\d+)?$/.test(t)) {
    seconds = Number(t);
  } else if (/^(\d+(\.\d+)?[hms])+$/.test(t)) {
    const unit: Record<string, number> = { h: 3600, m: 60, s: 1 };
    seconds = 0;
    for (const [, n, u] of t.matchAll(/(\d+(?:\.\d+)?)([hms])/g)) seconds += Number(n) * unit[u];
  } else {
    return null;
  }
  seconds = Math.floor(seconds);
  return seconds >= 1 ? seconds : null;
}

/** A node admin reason as typed: required, at most 1024 bytes (the coordinator's limit). */
function checkReason(reason: string): string | { error: string } {
  const r = reason.trim();
  if (r === "") return { error: "a reason is required (it is shown to users whose jobs wait)" };
  if (new TextEncoder().encode(r).length > 1024) return { error: "the reason is longer than 1024 bytes" };
  return r;
}

/**
 * Checks the drain form: a reason is required (at most 1024 bytes, as the
 * coordinator allows), the deadline optional (parseDeadline). Returns what
 * UpdateNodes gets, or an error message for the user.
 */
export function checkDrainForm(reason: string, deadline: string): { reason: string; deadline_s: number } | { error: string } {
  const r = checkReason(reason);
  if (typeof r !== "string") return r;
  const d = parseDeadline(deadline);
  if (d === null) return { error: `deadline "${deadline.trim()}" is not a duration (e.g. 30m, 2h, 1h30m), or empty for none` };
  return { reason: r, deadline_s: d };
}

/**
 * Checks the form in its Down mode (no deadline: down stops what runs on
 * the node at once, Slurm's state=DOWN): the reason as for a drain.
 * Returns what UpdateNodes gets, or an error message for the user.
 */
export function checkDownForm(reason: string): { reason: string } | { error: string } {
  const r = checkReason(reason);
  return typeof r === "string" ? { reason: r } : r;
}
