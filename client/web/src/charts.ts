// The dashboard's charts, drawn with uPlot (github.com/leeoniya/uPlot).
//
// Why uPlot rather than Chart.js (which the first version used):
//  - size: about 50 KB minified, against Chart.js's 200 KB with its
//    controllers registered (the dashboard's JavaScript went from 229 KB to
//    79 KB);
//  - time axes built in: x values in Unix seconds get local-time ticks and
//    legend values, with no date adapter library to add (Chart.js needs one);
//  - many series: it draws hundreds of series and 100k points without
//    slowing down, so a sweep overlays every trial; its legend is HTML, with
//    each series' value at the cursor, and a click on a name hides that
//    series and rescales the y axis (keys of unlike magnitudes share a chart).
// The cost: every series of a chart shares one x array, which series.ts
// builds (align).

import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { formatBytes, formatMetric, logTickLabel, type AxisKind } from "./format";
import { seriesColor } from "./series";

type Options = Omit<uPlot.Options, "width" | "height">;

/**
 * One chart in a container element: follows the container's width, keeps
 * its height. draw() rebuilds the uPlot only when the chart's shape (its
 * series and axes) changed, else swaps the data in. Single-threaded (the
 * page's event loop), like everything in the dashboard.
 */
export class Plot {
  private u: uPlot | null = null;
  private shape = "";
  private readonly ro: ResizeObserver;

  constructor(
    private readonly box: HTMLElement,
    private readonly height = 240,
  ) {
    this.ro = new ResizeObserver(() => {
      if (this.u && this.u.width !== this.width()) this.u.setSize({ width: this.width(), height: this.height });
    });
    this.ro.observe(box);
  }

  /** The container's width inside its padding, px. */
  private width(): number {
    const cs = getComputedStyle(this.box);
    return Math.max(240, Math.floor(this.box.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight)));
  }

  /**
   * Draws `data`. `shape` names the series and axes `opts` builds (e.g. their
   * labels joined): when it is the last draw's, only the data changes.
   */
  draw(shape: string, opts: () => Options, data: uPlot.AlignedData): void {
    if (this.u && shape === this.shape) {
      this.u.setData(data);
      return;
    }
    this.u?.destroy();
    this.shape = shape;
    this.u = new uPlot({ ...opts(), width: this.width(), height: this.height }, data, this.box);
  }

  /** Removes the chart (the container stays). */
  clear(): void {
    this.u?.destroy();
    this.u = null;
    this.shape = "";
  }

  destroy(): void {
    this.ro.disconnect();
    this.clear();
  }
}

const metricValue = (_u: uPlot, v: number | null) => (v === null || v === undefined ? "--" : formatMetric(v));

/** Axis tick steps for bytes: powers of two from 1 KiB, so ticks read "16 GiB", "24 GiB". */
const BYTE_INCRS = Array.from({ length: 41 }, (_, i) => 2 ** (10 + i));
/** Tick steps of a step axis: whole steps, 1-2-5 times powers of ten. */
const STEP_INCRS = Array.from({ length: 13 }, (_, i) => [1, 2, 5].map((m) => m * 10 ** i)).flat();
/** Tick steps of a time axis, s: whole seconds up (samples come every few seconds). */
const TIME_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];
/**
 * Time tick labels in 24-hour local time (uPlot's table: smallest tick step,
 * label, then the line added under the first tick of a new year, month, day,
 * hour, minute, second; 1 = only there).
 */
const TIME_VALUES: uPlot.Axis.Values = [
  [86400, "{MM}-{DD}", "\n{YYYY}", null, null, null, null, null, 1],
  [3600, "{HH}:00", "\n{YYYY}-{MM}-{DD}", null, "\n{MM}-{DD}", null, null, null, 1],
  [60, "{HH}:{mm}", "\n{YYYY}-{MM}-{DD}", null, "\n{MM}-{DD}", null, null, null, 1],
  [1, "{HH}:{mm}:{ss}", "\n{YYYY}-{MM}-{DD}", null, "\n{MM}-{DD}", null, null, null, 1],
];

/**
 * A job's GPU utilization (%, left axis, 0-100) and GPU memory in use
 * (bytes, right axis, from 0 to `totalBytes` when known) on a time axis
 * (data from series.ts usageSeries).
 */
export function usageOptions(totalBytes: number): Options {
  return {
    series: [
      { label: "time", value: "{YYYY}-{MM}-{DD} {HH}:{mm}:{ss}" },
      {
        label: "GPU utilization (%)",
        scale: "%",
        stroke: seriesColor(0),
        fill: "rgba(42,111,219,0.12)",
        width: 2,
        value: (_u, v) => (v === null || v === undefined ? "--" : `${v.toFixed(0)}%`),
      },
      {
        label: "GPU memory used",
        scale: "bytes",
        stroke: seriesColor(1),
        width: 2,
        value: (_u, v) => (v === null || v === undefined ? "--" : formatBytes(v)),
      },
    ],
    scales: {
      x: { time: true },
      "%": { range: [0, 100] },
      bytes: { range: (_u, _min, max) => [0, Math.max(totalBytes, max, 1 << 30)] },
    },
    axes: [
      { incrs: TIME_INCRS, values: TIME_VALUES, space: 80 },
      { scale: "%", label: "GPU utilization (%)" },
      {
        scale: "bytes",
        side: 1,
        label: "GPU memory",
        size: 70,
        incrs: BYTE_INCRS,
        values: (_u, splits) => splits.map((v) => formatBytes(v)),
        grid: { show: false },
      },
    ],
  };
}

/**
 * Curves against a step axis (a job's metrics, a sweep's trials of one
 * metric), one series per label, lines joined across steps a series lacks.
 */
export function curveOptions(xLabel: string, yLabel: string, labels: string[]): Options {
  return {
    series: [
      { label: xLabel },
      ...labels.map((label, i) => ({ label, stroke: seriesColor(i), width: 2, spanGaps: true, value: metricValue })),
    ],
    scales: { x: { time: false } },
    axes: [{ label: xLabel, incrs: STEP_INCRS }, { label: yLabel, size: 60 }],
  };
}

/**
 * The sweep comparison: one point per trial at (parameter value, metric).
 * For a "category" axis x is the index of the value in `categories`.
 */
export function scatterOptions(axis: AxisKind, xLabel: string, yLabel: string, seriesLabel: string, categories: string[]): Options {
  const x: uPlot.Axis = { label: xLabel };
  let scale: uPlot.Scale = { time: false };
  if (axis === "logarithmic") {
    scale = { time: false, distr: 3, log: 10 };
    x.values = (_u, splits) => splits.map((v) => logTickLabel(v));
  } else if (axis === "category") {
    scale = { time: false, range: () => [-0.5, categories.length - 0.5] };
    x.splits = () => categories.map((_, i) => i);
    x.values = (_u, splits) => splits.map((v) => categories[v] ?? "");
  }
  return {
    series: [
      { label: xLabel, value: (_u, v) => (v === null ? "--" : axis === "category" ? (categories[v] ?? "") : String(v)) },
      { label: seriesLabel, stroke: seriesColor(0), fill: seriesColor(0), paths: () => null, points: { show: true, size: 9, fill: seriesColor(0) }, value: metricValue },
    ],
    scales: { x: scale },
    axes: [x, { label: yLabel, size: 60 }],
  };
}

/**
 * GPU-hours per day (accounting): x is time (Unix seconds, one point per
 * day), one series per group label.
 */
export function gpuHoursOptions(labels: string[]): Options {
  return {
    series: [
      { label: "day" },
      ...labels.map((label, i) => ({
        label,
        stroke: seriesColor(i),
        width: 2,
        value: (_u: uPlot, v: number | null) => (v == null ? "-" : v.toFixed(2)),
      })),
    ],
    axes: [{}, { label: "GPU-hours", size: 60 }],
  };
}
