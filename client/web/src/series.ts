// The data of the dashboard's charts, shaped for uPlot (no DOM, no network).
// uPlot draws "aligned" data: one x array shared by every series, sorted
// ascending, and one y array per series with null where that series has no
// point at that x. Unit-tested in series.test.ts.

import type { Job, JobUsageSample, MetricSeries } from "./types";

/** x values, then one y array per series (null: no point at that x). */
export type Aligned = [number[], ...(number | null)[][]];

/** One line of a chart: a legend label and its (x, y) points in any order. */
export interface Curve {
  label: string;
  points: [number, number][];
}

/**
 * Aligns curves on the sorted union of their x values. Where a curve has
 * several points at one x (a step reported twice), the last one given wins,
 * as a re-reported value replaces the earlier one.
 */
export function align(curves: Curve[]): { labels: string[]; data: Aligned } {
  const xs = [...new Set(curves.flatMap((c) => c.points.map(([x]) => x)))].sort((a, b) => a - b);
  const at = new Map(xs.map((x, i) => [x, i]));
  const ys = curves.map((c) => {
    const y: (number | null)[] = new Array(xs.length).fill(null);
    for (const [x, v] of c.points) y[at.get(x)!] = v;
    return y;
  });
  return { labels: curves.map((c) => c.label), data: [xs, ...ys] };
}

/** The newest attempt that has points in `series`, -1 when none has. */
export function newestAttempt(series: MetricSeries[]): number {
  let a = -1;
  for (const s of series) for (const p of s.points ?? []) a = Math.max(a, Number(p.attempt ?? 0));
  return a;
}

/** (step, value) points of one key in one attempt, by the rank that reported them. */
function byRank(s: MetricSeries, attempt: number): Map<number, [number, number][]> {
  const ranks = new Map<number, [number, number][]>();
  for (const p of s.points ?? []) {
    if (Number(p.attempt ?? 0) !== attempt) continue;
    const r = Number(p.rank ?? 0);
    if (!ranks.has(r)) ranks.set(r, []);
    ranks.get(r)!.push([Number(p.step ?? 0), p.value]);
  }
  return ranks;
}

/**
 * A job's metric curves vs step (GetMetrics with points): every key of the
 * newest attempt that reported anything (steps restart with an attempt, so
 * attempts are not mixed), in key order. A key reported by one rank is one
 * curve labelled with the key; a key several ranks reported is one curve per
 * rank, "loss (rank 1)".
 */
export function metricCurves(series: MetricSeries[]): { attempt: number; curves: Curve[] } {
  const attempt = newestAttempt(series);
  const curves: Curve[] = [];
  for (const s of [...series].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))) {
    const ranks = byRank(s, attempt);
    const sorted = [...ranks.keys()].sort((a, b) => a - b);
    for (const r of sorted)
      curves.push({ label: sorted.length > 1 ? `${s.key} (rank ${r})` : s.key, points: ranks.get(r)! });
  }
  return { attempt, curves };
}

/** A trial's legend label: "#12 lr=0.001 bs=64" (its id, then its params by name). */
export function trialLabel(job: Job): string {
  const params = Object.entries(job.spec?.params ?? {})
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([k, v]) => `${k}=${v}`);
  return [`#${job.id}`, ...params].join(" ");
}

/**
 * The sweep overlay: one curve per trial of one metric key vs step, from the
 * trial's newest attempt and its lowest reporting rank (rank 0 in a plain
 * training loop). `series` maps a job id to its history of that key (or
 * undefined: none yet); trials without points get no curve. Trials in the
 * order given.
 */
export function trialCurves(trials: Job[], series: (id: string) => MetricSeries | undefined): Curve[] {
  const curves: Curve[] = [];
  for (const t of trials) {
    const s = series(t.id);
    if (!s) continue;
    const ranks = byRank(s, newestAttempt([s]));
    if (ranks.size === 0) continue;
    curves.push({ label: trialLabel(t), points: ranks.get(Math.min(...ranks.keys()))! });
  }
  return curves;
}

/**
 * The job usage chart from the coordinator's history (GetJobUsage samples,
 * oldest first): x in Unix seconds (uPlot's time axis), then the job's mean
 * GPU utilization (%) and its GPU memory in use (bytes; null where a sample
 * has none).
 */
export function usageSeries(samples: JobUsageSample[]): Aligned {
  return [
    samples.map((s) => Number(s.time_ms) / 1000),
    samples.map((s) => s.gpu_util_pct ?? 0),
    samples.map((s) => (s.gpu_memory_used_bytes === undefined ? null : Number(s.gpu_memory_used_bytes))),
  ];
}

/**
 * Sweep ids of `jobs`, newest first: by the submit time of their newest
 * trial (then by its job id, which grows with submission).
 */
export function sweepsNewestFirst(jobs: Job[]): string[] {
  const newest = new Map<string, [number, number]>();
  for (const j of jobs) {
    const s = j.spec?.sweep_id;
    if (!s) continue;
    const key: [number, number] = [Number(j.submit_time_ms ?? 0), Number(j.id)];
    const cur = newest.get(s);
    if (!cur || key[0] > cur[0] || (key[0] === cur[0] && key[1] > cur[1])) newest.set(s, key);
  }
  return [...newest.entries()]
    .sort(([, a], [, b]) => b[0] - a[0] || b[1] - a[1])
    .map(([s]) => s);
}

/**
 * The metric a sweep's charts open on: the one the sweep optimizes, from its
 * trials' spec (JobSpec.early_stop.metric, `trainctl sweep --early-stop
 * KEY:MODE`), reported yet or not; for a sweep that names none, "loss" where
 * a trial reported it, else the first of `reported` (sorted keys the trials
 * reported); "" when there is none of these (the comparison shows run time).
 */
export function sweepMetric(trials: Job[], reported: string[]): string {
  const named = trials.find((t) => t.spec?.early_stop?.metric)?.spec?.early_stop?.metric;
  if (named) return named;
  return reported.includes("loss") ? "loss" : (reported[0] ?? "");
}

/**
 * Colour of series i: hues a golden angle apart, so any number of series
 * (a sweep of 200 trials) gets distinct neighbours. Returns "hsl(h, s%, l%)".
 */
export function seriesColor(i: number): string {
  return `hsl(${Math.round((215 + i * 137.508) % 360)}, 65%, 45%)`;
}
