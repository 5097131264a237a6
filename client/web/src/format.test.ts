// Unit tests of the dashboard's view logic (npm test; the web_e2e ctest entry
// runs them before the browser test).
import { describe, expect, it } from "vitest";
import {
  NdjsonSplitter,
  base64ToBytes,
  checkDrainForm,
  checkDownForm,
  filterJobs,
  formatAge,
  formatBytes,
  formatDuration,
  formatMetric,
  jobStateLabel,
  jobUtilization,
  logTickLabel,
  nodeActions,
  nodeAdminLine,
  nodeShownState,
  paramAxis,
  parseDeadline,
  resourceText,
  runTimeMs,
  sweepIds,
  sweepPoints,
  utilColor,
} from "./format";
import type { Job, NodeAdmin, NodeView } from "./types";

const job = (id: string, state: string, spec: Job["spec"] = {}, extra: Partial<Job> = {}): Job => ({
  id,
  state,
  kind: "JOB_KIND_EXPERIMENT",
  attempt: 0,
  spec,
  ...extra,
});

describe("utilColor", () => {
  it("idle is blue, busy is red, half is green-yellow", () => {
    expect(utilColor(0)).toBe("hsl(210, 70%, 88%)");
    expect(utilColor(100)).toBe("hsl(0, 70%, 62%)");
    expect(utilColor(50)).toBe("hsl(105, 70%, 62%)");
  });
  it("clamps out-of-range and non-numbers", () => {
    expect(utilColor(140)).toBe(utilColor(100));
    expect(utilColor(-5)).toBe(utilColor(0));
    expect(utilColor(NaN)).toBe(utilColor(0));
  });
});

describe("formatBytes", () => {
  it("uses binary units", () => {
    expect(formatBytes(0)).toBe("0 B");
    expect(formatBytes(512)).toBe("512 B");
    expect(formatBytes(1536)).toBe("1.5 KiB");
    expect(formatBytes("85899345920")).toBe("80 GiB"); // int64 comes as a string
    expect(formatBytes(141 * 2 ** 30)).toBe("141 GiB");
    expect(formatBytes(-1)).toBe("?");
  });
});

describe("formatDuration", () => {
  it("picks the unit by size", () => {
    expect(formatDuration(850)).toBe("850 ms");
    expect(formatDuration(42_000)).toBe("42 s");
    expect(formatDuration(185_000)).toBe("3 m 05 s");
    expect(formatDuration((2 * 60 + 7) * 60_000)).toBe("2 h 07 m");
    expect(formatDuration(76 * 3_600_000)).toBe("3 d 4 h");
  });
});

describe("resourceText", () => {
  it("says what was asked for like the CLI", () => {
    expect(resourceText({ gpu_fraction: 0.25 })).toBe("1/4 GPU");
    expect(resourceText({ gpu_fraction: 0.5 })).toBe("1/2 GPU");
    expect(resourceText({ gpus: 8 })).toBe("8 GPUs");
    expect(resourceText({ nodes: 2, gpus_per_node: 4 })).toBe("2 x 4 GPUs");
    expect(resourceText({ gpu_memory_bytes: String(10 * 2 ** 30) })).toBe("10 GiB GPU memory");
    expect(resourceText({})).toBe("1 GPU");
  });
});

describe("filterJobs", () => {
  const jobs = [
    job("1", "JOB_STATE_RUNNING", { name: "resnet-lr", sweep_id: "s1" }),
    job("2", "JOB_STATE_SUCCEEDED", { name: "ResNet-bs", sweep_id: "s1" }),
    job("3", "JOB_STATE_PENDING", { name: "bert" }),
    job("4", "JOB_STATE_CANCELLED", { name: "bert-2", sweep_id: "s2" }),
  ];
  const ids = (f: Parameters<typeof filterJobs>[1]) => filterJobs(jobs, f).map((j) => j.id);
  it("filters by state, name (case-insensitive) and sweep", () => {
    expect(ids({ state: "", name: "", sweep: "" })).toEqual(["1", "2", "3", "4"]);
    expect(ids({ state: "JOB_STATE_RUNNING", name: "", sweep: "" })).toEqual(["1"]);
    expect(ids({ state: "ACTIVE", name: "", sweep: "" })).toEqual(["1", "3"]);
    expect(ids({ state: "", name: "resnet", sweep: "" })).toEqual(["1", "2"]);
    expect(ids({ state: "", name: "", sweep: "s1" })).toEqual(["1", "2"]);
    expect(ids({ state: "ACTIVE", name: "bert", sweep: "" })).toEqual(["3"]);
  });
  it("lists sweep ids once, sorted", () => {
    expect(sweepIds(jobs)).toEqual(["s1", "s2"]);
  });
});

describe("runTimeMs", () => {
  it("is end - start, or now - start while running, 0 before start", () => {
    expect(runTimeMs(job("1", "", {}, { start_time_ms: "1000", end_time_ms: "4500" }), 9999)).toBe(3500);
    expect(runTimeMs(job("1", "", {}, { start_time_ms: "1000", end_time_ms: "0" }), 3000)).toBe(2000);
    expect(runTimeMs(job("1", "", {}, { start_time_ms: "0" }), 3000)).toBe(0);
  });
});

describe("NdjsonSplitter", () => {
  it("returns complete lines only, keeps a partial line for the next chunk", () => {
    const s = new NdjsonSplitter();
    expect(s.feed('{"result":{"a":1}}\n{"res')).toEqual([{ result: { a: 1 } }]);
    expect(s.feed('ult":{"a":2}}\n\n')).toEqual([{ result: { a: 2 } }]);
    expect(s.feed("")).toEqual([]);
  });
});

describe("base64ToBytes", () => {
  it("decodes protobuf JSON bytes, UTF-8 intact", () => {
    const b = base64ToBytes("aGVsbG8g4pyTCg==");
    expect(new TextDecoder().decode(b)).toBe("hello ✓\n");
  });
});

describe("jobUtilization", () => {
  const nodes: NodeView[] = [
    {
      node: {
        name: "a",
        address: "",
        state: "NODE_STATE_READY",
        last_heartbeat_ms: "0",
        gpus: [
          { index: 0, uuid: "G0", name: "", memory_total_bytes: "1", memory_used_bytes: "0", utilization_pct: 90, temperature_c: 0, power_w: 0 },
          { index: 1, uuid: "G1", name: "", memory_total_bytes: "1", memory_used_bytes: "0", utilization_pct: 30, temperature_c: 0, power_w: 0 },
          { index: 2, uuid: "G2", name: "", memory_total_bytes: "1", memory_used_bytes: "0", utilization_pct: 0, temperature_c: 0, power_w: 0 },
        ],
      },
    },
  ];
  const task = (uuids: string[]) => ({ rank: 0, local_rank: 0, node_rank: 0, node: "a", gpu_uuids: uuids, state: "", pid: 0, exit_code: 0, signal: 0 });
  it("averages over the job's GPUs only", () => {
    expect(jobUtilization(job("1", "", {}, { tasks: [task(["G0", "G1"])] }), nodes)).toBe(60);
  });
  it("is null for a job not placed", () => {
    expect(jobUtilization(job("1", ""), nodes)).toBeNull();
  });
});

describe("sweep chart", () => {
  it("uses a log axis for values spanning 100x, linear otherwise, categories for words", () => {
    expect(paramAxis(["1e-4", "3e-4", "1e-2"])).toBe("logarithmic");
    expect(paramAxis(["64", "128", "256"])).toBe("linear");
    expect(paramAxis(["adam", "sgd"])).toBe("category");
    expect(paramAxis([])).toBe("category");
  });
  it("plots (param, metric) for trials with both", () => {
    const trials = [
      job("1", "JOB_STATE_SUCCEEDED", { params: { lr: "0.001" } }),
      job("2", "JOB_STATE_SUCCEEDED", { params: { lr: "0.1" } }),
      job("3", "JOB_STATE_PENDING", { params: { lr: "0.01" } }), // no metric yet
      job("4", "JOB_STATE_SUCCEEDED", { params: { bs: "64" } }), // no lr
    ];
    const metric = (j: Job) => (j.state === "JOB_STATE_SUCCEEDED" ? Number(j.id) * 10 : null);
    const { axis, points } = sweepPoints(trials, "lr", metric);
    expect(axis).toBe("logarithmic");
    expect(points).toEqual([
      { x: 0.001, y: 10, id: "1", state: "JOB_STATE_SUCCEEDED" },
      { x: 0.1, y: 20, id: "2", state: "JOB_STATE_SUCCEEDED" },
    ]);
  });
});

describe("formatMetric", () => {
  it("keeps 5 significant digits, exponent form when tiny or huge", () => {
    expect(formatMetric(0.25)).toBe("0.25");
    expect(formatMetric(1.234567)).toBe("1.2346");
    expect(formatMetric(0)).toBe("0");
    expect(formatMetric(3e-5)).toBe("3.000e-5");
    expect(formatMetric(12000)).toBe("1.200e+4");
    expect(formatMetric(-2.5)).toBe("-2.5");
  });
});

describe("logTickLabel", () => {
  it("labels 1, 2 and 5 times powers of ten only", () => {
    expect(logTickLabel(0.0001)).toBe("0.0001");
    expect(logTickLabel(0.002)).toBe("0.002");
    expect(logTickLabel(0.005)).toBe("0.005");
    expect(logTickLabel(0.003)).toBe("");
    expect(logTickLabel(0.009)).toBe("");
    expect(logTickLabel(100)).toBe("100");
    expect(logTickLabel(0)).toBe("");
  });
});

describe("jobStateLabel", () => {
  it("tells a trial ASHA stopped early from a user's cancel", () => {
    expect(jobStateLabel(job("1", "JOB_STATE_CANCELLED", {}, { stopped_early_at_step: "300" }))).toBe(
      "STOPPED EARLY",
    );
    expect(jobStateLabel(job("2", "JOB_STATE_CANCELLED"))).toBe("CANCELLED");
    expect(jobStateLabel(job("3", "JOB_STATE_RUNNING"))).toBe("RUNNING");
  });
});

describe("node admin state", () => {
  const NOW = 1_800_000_000_000;
  const MIN = 60_000;
  const view = (state: string, service_state?: string, admin?: NodeAdmin | null): NodeView => ({
    node: { name: "gpu-07", address: "10.0.0.7", state, last_heartbeat_ms: String(NOW), admin },
    service_state,
  });
  const drain = (extra: Partial<NodeAdmin> = {}): NodeAdmin => ({
    state: "NODE_ADMIN_STATE_DRAIN",
    reason: "swap PSU",
    by: "alice",
    since_ms: String(NOW - 5 * MIN),
    deadline_ms: String(NOW + 25 * MIN),
    automatic: false,
    ...extra,
  });

  it("shows the state as `trainctl nodes` does", () => {
    expect(nodeShownState(view("NODE_STATE_READY", "NODE_SERVICE_STATE_IN_SERVICE"))).toBe("ready");
    expect(nodeShownState(view("NODE_STATE_LOST", "NODE_SERVICE_STATE_IN_SERVICE"))).toBe("lost");
    expect(nodeShownState(view("NODE_STATE_READY", "NODE_SERVICE_STATE_DRAINING", drain()))).toBe("draining");
    expect(nodeShownState(view("NODE_STATE_READY", "NODE_SERVICE_STATE_DRAINED", drain()))).toBe("drained");
    // Out of service wins over liveness: a down node whose agent is gone.
    expect(nodeShownState(view("NODE_STATE_LOST", "NODE_SERVICE_STATE_DOWN"))).toBe("down");
    // A gateway without service_state: liveness only.
    expect(nodeShownState(view("NODE_STATE_READY"))).toBe("ready");
  });

  it("says who drained a node, when, why and the deadline", () => {
    expect(nodeAdminLine(drain(), NOW)).toBe("DRAIN by alice 5m ago: swap PSU, deadline in 25m");
    expect(nodeAdminLine(drain({ deadline_ms: "0" }), NOW)).toBe("DRAIN by alice 5m ago: swap PSU");
    expect(nodeAdminLine(drain({ deadline_ms: String(NOW - MIN) }), NOW)).toBe("DRAIN by alice 5m ago: swap PSU, deadline passed");
    expect(
      nodeAdminLine({ state: "NODE_ADMIN_STATE_DOWN", reason: "GPU 3 fell off the bus", by: "bob", since_ms: String(NOW - 2 * 3600_000 - 4 * MIN), deadline_ms: "0", automatic: false }, NOW),
    ).toBe("DOWN by bob 2h4m ago: GPU 3 fell off the bus");
  });

  it("marks the coordinator's automatic drains and leaves out an unknown user", () => {
    expect(nodeAdminLine(drain({ by: "trainctl", automatic: true, reason: "GPU 1 missing at registration", deadline_ms: "0", since_ms: String(NOW - 42_000) }), NOW)).toBe(
      "DRAIN by trainctl 42s ago: GPU 1 missing at registration (automatic)",
    );
    expect(nodeAdminLine(drain({ by: "", deadline_ms: "0" }), NOW)).toBe("DRAIN 5m ago: swap PSU");
  });

  it("is empty for a node in service", () => {
    expect(nodeAdminLine(null, NOW)).toBe("");
    expect(nodeAdminLine(undefined, NOW)).toBe("");
    expect(nodeAdminLine(drain({ state: "NODE_ADMIN_STATE_UNSPECIFIED" }), NOW)).toBe("");
  });

  it("offers Drain and Down in service, Resume and Down while draining, Resume once down", () => {
    expect(nodeActions(view("NODE_STATE_READY", "NODE_SERVICE_STATE_IN_SERVICE"))).toEqual(["drain", "down"]);
    expect(nodeActions(view("NODE_STATE_LOST", "NODE_SERVICE_STATE_IN_SERVICE"))).toEqual(["drain", "down"]);
    for (const s of ["DRAINING", "DRAINED"]) expect(nodeActions(view("NODE_STATE_READY", `NODE_SERVICE_STATE_${s}`, drain()))).toEqual(["resume", "down"]);
    expect(nodeActions(view("NODE_STATE_READY", "NODE_SERVICE_STATE_DOWN", drain()))).toEqual(["resume"]);
  });
});

describe("formatAge", () => {
  it("is coarse like the CLI's, without a zero second part", () => {
    expect(formatAge(0)).toBe("0s");
    expect(formatAge(45_000)).toBe("45s");
    expect(formatAge(5 * 60_000)).toBe("5m");
    expect(formatAge(12 * 60_000 + 5_000)).toBe("12m5s");
    expect(formatAge(2 * 3600_000)).toBe("2h");
    expect(formatAge(3 * 3600_000 + 4 * 60_000 + 59_000)).toBe("3h4m");
    expect(formatAge(2 * 86400_000 + 3 * 3600_000)).toBe("2d3h");
    expect(formatAge(-5_000)).toBe("0s"); // clocks a little apart
  });
});

describe("drain form", () => {
  it("reads deadlines as the CLI's --deadline does", () => {
    expect(parseDeadline("")).toBe(0);
    expect(parseDeadline("  ")).toBe(0);
    expect(parseDeadline("30m")).toBe(1800);
    expect(parseDeadline("2h")).toBe(7200);
    expect(parseDeadline("1h30m")).toBe(5400);
    expect(parseDeadline("1.5h")).toBe(5400);
    expect(parseDeadline("90")).toBe(90);
    expect(parseDeadline("45s")).toBe(45);
    expect(parseDeadline(" 2H ")).toBe(7200);
  });
  it("refuses what is not a duration, or under a second", () => {
    for (const bad of ["soon", "30 minutes", "-5m", "m", "1d", "0", "0s", "0.5s", "30m later"]) expect(parseDeadline(bad)).toBeNull();
  });
  it("needs a reason and a readable deadline, with a message saying what to fix", () => {
    expect(checkDrainForm("  swap PSU ", "30m")).toEqual({ reason: "swap PSU", deadline_s: 1800 });
    expect(checkDrainForm("swap PSU", "")).toEqual({ reason: "swap PSU", deadline_s: 0 });
    expect(checkDrainForm("   ", "30m")).toEqual({ error: "a reason is required (it is shown to users whose jobs wait)" });
    expect(checkDrainForm("swap PSU", "soon")).toEqual({ error: 'deadline "soon" is not a duration (e.g. 30m, 2h, 1h30m), or empty for none' });
    expect(checkDrainForm("x".repeat(1025), "")).toEqual({ error: "the reason is longer than 1024 bytes" });
    expect(checkDrainForm("é".repeat(512), "")).toEqual({ reason: "é".repeat(512), deadline_s: 0 }); // 1024 bytes
  });
  it("takes a down with the same reason rules and no deadline", () => {
    expect(checkDownForm("  PSU on fire ")).toEqual({ reason: "PSU on fire" });
    expect(checkDownForm("")).toEqual({ error: "a reason is required (it is shown to users whose jobs wait)" });
    expect(checkDownForm("x".repeat(1025))).toEqual({ error: "the reason is longer than 1024 bytes" });
  });
});
