// Unit tests of the charts' data shaping (series.ts; npm test).
import { describe, expect, it } from "vitest";
import { align, metricCurves, newestAttempt, seriesColor, sweepMetric, sweepsNewestFirst, trialCurves, trialLabel, usageSeries } from "./series";
import type { Job, MetricPoint, MetricSeries } from "./types";

const pt = (key: string, step: number, value: number, attempt = 0, rank = 0): MetricPoint => ({
  key,
  step: String(step),
  value,
  attempt,
  rank,
});
const series = (key: string, points: MetricPoint[]): MetricSeries => ({
  key,
  count: String(points.length),
  last: points.at(-1)?.value ?? 0,
  last_step: points.at(-1)?.step ?? "0",
  min: 0,
  max: 0,
  points,
});
const job = (id: string, spec: Job["spec"] = {}, submit = "0"): Job => ({
  id,
  state: "JOB_STATE_SUCCEEDED",
  kind: "JOB_KIND_EXPERIMENT",
  attempt: 0,
  spec,
  submit_time_ms: submit,
});

describe("align", () => {
  it("puts every curve on the sorted union of x, null where a curve has no point", () => {
    // loss at steps 3, 1, 2 (out of order); val at 2 and 4 only.
    const { labels, data } = align([
      { label: "loss", points: [[3, 0.5], [1, 2], [2, 1]] },
      { label: "val", points: [[4, 0.4], [2, 0.9]] },
    ]);
    expect(labels).toEqual(["loss", "val"]);
    expect(data).toEqual([
      [1, 2, 3, 4],
      [2, 1, 0.5, null],
      [null, 0.9, null, 0.4],
    ]);
  });
  it("keeps the last value given for a repeated x", () => {
    expect(align([{ label: "a", points: [[1, 5], [1, 7]] }]).data).toEqual([[1], [7]]);
  });
  it("has no x for no curves", () => {
    expect(align([]).data).toEqual([[]]);
  });
});

describe("metricCurves", () => {
  it("draws every key of the newest attempt, one curve per rank where several report", () => {
    const s = [
      // Attempt 0 reached step 9 before it failed; attempt 1 starts again.
      series("loss", [pt("loss", 9, 0.1, 0), pt("loss", 1, 2.0, 1), pt("loss", 2, 1.0, 1), pt("loss", 2, 1.2, 1, 1)]),
      series("acc", [pt("acc", 2, 0.3, 1)]),
      series("old", [pt("old", 5, 1, 0)]), // only in attempt 0: no curve
    ];
    expect(newestAttempt(s)).toBe(1);
    const { attempt, curves } = metricCurves(s);
    expect(attempt).toBe(1);
    expect(curves).toEqual([
      { label: "acc", points: [[2, 0.3]] },
      { label: "loss (rank 0)", points: [[1, 2.0], [2, 1.0]] },
      { label: "loss (rank 1)", points: [[2, 1.2]] },
    ]);
  });
  it("has no curves without points", () => {
    expect(metricCurves([])).toEqual({ attempt: -1, curves: [] });
  });
});

describe("trialCurves", () => {
  it("draws one curve per trial that reported the key, labelled with its params", () => {
    const trials = [job("7", { params: { lr: "0.01", bs: "64" } }), job("8", { params: { lr: "0.1" } }), job("9")];
    const hist: Record<string, MetricSeries> = {
      // Trial 7: ranks 0 and 1 report; rank 0's curve is drawn.
      "7": series("loss", [pt("loss", 1, 1.5, 0, 1), pt("loss", 1, 1.4, 0, 0), pt("loss", 2, 0.9, 0, 0)]),
      "8": series("loss", [pt("loss", 1, 3.0, 0, 2)]), // only rank 2 reported
    };
    expect(trialLabel(trials[0])).toBe("#7 bs=64 lr=0.01");
    expect(trialCurves(trials, (id) => hist[id])).toEqual([
      { label: "#7 bs=64 lr=0.01", points: [[1, 1.4], [2, 0.9]] },
      { label: "#8 lr=0.1", points: [[1, 3.0]] },
    ]);
  });
});

describe("usageSeries", () => {
  it("puts samples on Unix seconds with utilization and memory", () => {
    const data = usageSeries([
      { time_ms: "1700000000000", gpu_util_pct: 12, gpu_memory_used_bytes: "1073741824" },
      { time_ms: "1700000002000", gpu_util_pct: 95.5 },
    ]);
    expect(data).toEqual([
      [1700000000, 1700000002],
      [12, 95.5],
      [1073741824, null],
    ]);
  });
});

describe("sweepsNewestFirst", () => {
  it("orders sweeps by their newest trial, not by name", () => {
    const jobs = [
      job("1", { sweep_id: "b-old" }, "1000"),
      job("2", { sweep_id: "a-new" }, "3000"),
      job("3", { sweep_id: "b-old" }, "2000"),
      job("4", { sweep_id: "c-tie" }, "3000"), // same time as a-new, newer id
      job("5", {}, "9000"), // not a sweep trial
    ];
    expect(sweepsNewestFirst(jobs)).toEqual(["c-tie", "a-new", "b-old"]);
    expect(sweepsNewestFirst([])).toEqual([]);
  });
});

describe("sweepMetric", () => {
  const asha = { metric: "val_acc", mode: "max", grace_steps: "100" };
  it("is the metric the sweep optimizes (its --early-stop), reported yet or not", () => {
    const trials = [job("1", { sweep_id: "s", early_stop: asha }), job("2", { sweep_id: "s", early_stop: asha })];
    expect(sweepMetric(trials, ["acc", "loss", "val_acc"])).toBe("val_acc");
    expect(sweepMetric(trials, ["loss"])).toBe("val_acc");
    expect(sweepMetric(trials, [])).toBe("val_acc");
  });
  it("without one: loss where reported, else the first reported key, else none (run time)", () => {
    const trials = [job("1", { sweep_id: "s" })];
    expect(sweepMetric(trials, ["acc", "loss"])).toBe("loss");
    expect(sweepMetric(trials, ["acc", "f1"])).toBe("acc");
    expect(sweepMetric(trials, [])).toBe("");
  });
});

describe("seriesColor", () => {
  it("gives neighbouring series distinct hues", () => {
    expect(seriesColor(0)).toBe("hsl(215, 65%, 45%)");
    expect(new Set(Array.from({ length: 12 }, (_, i) => seriesColor(i))).size).toBe(12);
  });
});
