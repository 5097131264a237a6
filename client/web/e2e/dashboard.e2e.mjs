// End-to-end test of the dashboard in real headless Chromium (Debian's
// /usr/bin/chromium driven by playwright-core), against a live gateway,
// coordinator and fake-GPU agents that tests/e2e/web_e2e.sh starts.
//   node e2e/dashboard.e2e.mjs URL SCREENSHOT_DIR
//   TRAINCTL_CLI=build/bin/trainctl (the tasks report metrics with it)
//   TRAINCTL_COORDINATOR=HOST:PORT (the coordinator, for `trainctl nodes`)
// Checks what a user sees: GPU tiles, submitting through the form and the
// job running to SUCCEEDED with its log, cancelling another from the job
// list (with its user and reason columns), a bad submit's error, a training
// job's metric curves and GPU usage over time, the sweep charts (comparison
// and the trials' curves overlaid) and the Sweeps page opening on the newest
// sweep and on its --early-stop metric. Charts are read as a user reads them:
// uPlot's HTML legend (series names, and the values at the cursor after
// hovering). The node admin levers: draining a node from the cluster view
// (the form refuses a missing reason and a bad deadline), its state and reason
// on the page and in `trainctl nodes`, resuming it, and a non-admin's refusal
// hiding the buttons. Writes dashboard.png
// (cluster), dashboard-job.png (a training job's detail),
// dashboard-sweep.png and dashboard-drain.png (a draining node) to
// SCREENSHOT_DIR. Every wait is on a condition with a
// deadline. Prints "N passed, 0 failed" or exits 1.
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { launchChromium } from "./browser.mjs";

const [url, shots] = process.argv.slice(2);
const CLI = process.env.TRAINCTL_CLI;
if (!url || !shots || !CLI || !process.env.TRAINCTL_COORDINATOR) {
  console.error("usage: TRAINCTL_CLI=path/to/trainctl TRAINCTL_COORDINATOR=HOST:PORT dashboard.e2e.mjs URL SCREENSHOT_DIR");
  process.exit(2);
}
const TIMEOUT = 30_000;
let passed = 0;
const ok = (msg) => {
  passed++;
  console.log(`ok: ${msg}`);
};

// REST helper for setup the UI is not under test for (bearer token included:
// the gateway forwards it as gRPC metadata).
async function rest(method, path, body) {
  const r = await fetch(url + path, {
    method,
    headers: { "Content-Type": "application/json", Authorization: "Bearer web-e2e" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const j = await r.json();
  if (!r.ok) throw new Error(`${method} ${path}: HTTP ${r.status} ${JSON.stringify(j)}`);
  return j;
}
const submit = (spec) => rest("POST", "/v1/jobs", { spec }).then((j) => j.job_id);
async function waitState(id, state) {
  const end = Date.now() + TIMEOUT;
  while (Date.now() < end) {
    const j = await rest("GET", `/v1/jobs/${id}:wait?timeout_ms=1000`);
    if (j.job.state === state) return;
    if (j.done) throw new Error(`job ${id} ended ${j.job.state}, wanted ${state}`);
  }
  throw new Error(`job ${id} not ${state} after ${TIMEOUT} ms`);
}
// Polls `fn` (async) until it returns a truthy value, which it returns;
// throws naming `what` after TIMEOUT.
async function until(what, fn) {
  const end = Date.now() + TIMEOUT;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`${what}: not after ${TIMEOUT} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
// A task that runs shell `before`, reports metrics (`steps`: [[step,
// "k=v k=v"], ...]), then runs `after`. TRAINCTL_CLI's directory goes first
// on the task's PATH.
const reporter = (steps, { before = "", after = "" } = {}) => ({
  command: ["sh", "-c", [before, ...steps.map(([step, kv]) => `echo "step ${step}: ${kv}" && trainctl report ${kv} --step ${step}`), after].filter((c) => c).join(" && ")],
  env: { PATH: `${dirname(CLI)}:/usr/local/bin:/usr/bin:/bin` },
});
// Waits until job `id` stored `n` points of metric `key` (GET /v1/jobs/ID/metrics);
// returns every key it reported, in order.
async function waitMetrics(id, key, n) {
  return until(`job ${id}: ${n} points of ${key}`, async () => {
    const { series = [] } = await rest("GET", `/v1/jobs/${id}/metrics?summary_only=true`);
    if (series.find((s) => s.key === key && Number(s.count) >= n)) return series.map((s) => s.key);
    const { job } = await rest("GET", `/v1/jobs/${id}`);
    if (["JOB_STATE_FAILED", "JOB_STATE_CANCELLED"].includes(job.state)) throw new Error(`job ${id} ended ${job.state}: ${job.reason}`);
    return null;
  });
}

const { page, close } = await launchChromium({ width: 1280, height: 600, timeoutMs: TIMEOUT });
const consoleErrors = [];
let refusalExpected = false; // while section 7 plays a non-admin's 403
// Failed requests show as console errors without their address: those are
// checked by address instead. Expected: the bad submit's 400, and 404/501
// from the optional endpoints (GetJobUsage, GetMetrics, WhyJob) where the
// coordinator does not have them.
page.on("console", (m) => m.type() === "error" && !m.text().startsWith("Failed to load resource") && consoleErrors.push(m.text()));
page.on("response", (r) => {
  const optional = /\/v1\/usage\?|\/v1\/accounting\/usage\?|\/v1\/jobs\/\d+\/metrics(\?|$)|\/v1\/jobs\/\d+:why$/.test(r.url()) && [404, 501].includes(r.status());
  const refused = refusalExpected && r.status() === 403 && r.url().endsWith("/v1/nodes:update");
  const expected = (r.status() === 400 && r.url().endsWith("/v1/jobs")) || optional || refused;
  if (r.status() >= 400 && !expected) consoleErrors.push(`HTTP ${r.status()} for ${r.request().method()} ${r.url()}`);
});
page.on("pageerror", (e) => consoleErrors.push(String(e)));

// uPlot's HTML legend of the chart in data-testid `id`: [{label, value}], the
// x series first; value is what the legend shows at the cursor ("--" if none).
const legend = (id) =>
  page.getByTestId(id).locator(".u-legend .u-series").evaluateAll((rows) =>
    rows.map((r) => ({ label: r.querySelector(".u-label")?.textContent ?? "", value: r.querySelector(".u-value")?.textContent ?? "" })),
  );
const labels = async (id) => (await legend(id)).map((r) => r.label);
// Hovers the right edge of the chart's plot area, where uPlot's cursor snaps
// to the newest x; returns the legend once it shows values there.
async function hoverNewest(id) {
  const over = page.getByTestId(id).locator(".u-over");
  const box = await over.boundingBox();
  await over.hover({ position: { x: box.width - 2, y: box.height / 2 } });
  return until(`${id} legend values at the cursor`, async () => {
    const l = await legend(id);
    return l.length > 0 && l[0].value !== "--" && l[0].value !== "" ? l : null;
  });
}
// Local time as uPlot's legend shows it (charts.ts: {YYYY}-{MM}-{DD} {HH}:{mm}:{ss}).
const localTime = (ms) => {
  const d = new Date(ms);
  const p = (x) => String(x).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
};

try {
  // 1. Cluster view: one tile per fake GPU (2 agents x 2 GPUs).
  await page.goto(`${url}/#/cluster`);
  await page.getByTestId("gpu-tile").nth(3).waitFor();
  const tiles = await page.getByTestId("gpu-tile").count();
  if (tiles !== 4) throw new Error(`${tiles} GPU tiles, want 4`);
  await page.getByText("H200-fake").first().waitFor();
  ok(`cluster view: ${tiles} GPU tiles on ${await page.getByTestId("node").count()} nodes`);

  // 2. Submit through the form; the page follows the job to SUCCEEDED and
  //    streams its log.
  await page.goto(`${url}/#/submit`);
  await page.getByTestId("submit-name").fill("web-hello");
  await page.getByTestId("submit-command").fill(
    'for i in 1 2 3; do echo "step $i"; sleep 0.2; done; echo "in $(pwd) with $GREETING"; echo "hello from rank $RANK"',
  );
  await page.getByTestId("submit-workdir").fill("/tmp");
  await page.getByTestId("submit-env").fill("GREETING=hi there");
  await page.getByTestId("submit-shape").selectOption("fraction");
  await page.getByTestId("submit-amount").fill("0.25");
  await page.getByTestId("submit-button").click();
  await page.waitForURL(/#\/jobs\/\d+$/);
  const helloId = page.url().match(/#\/jobs\/(\d+)$/)[1];
  await page.getByTestId("job-state").filter({ hasText: "SUCCEEDED" }).waitFor();
  await page.getByTestId("log").filter({ hasText: "hello from rank 0" }).waitFor();
  await page.getByTestId("log-state").filter({ hasText: "end of log" }).waitFor();
  const log = await page.getByTestId("log").textContent();
  if (!/step 1\nstep 2\nstep 3\nin \/tmp with hi there\nhello from rank 0/.test(log)) throw new Error(`log: ${JSON.stringify(log)}`);
  await page.getByTestId("rank-row").first().filter({ hasText: "EXITED" }).waitFor();
  ok(`submit form -> job ${helloId} SUCCEEDED, followed log: ${JSON.stringify(log.trim().split("\n").at(-1))}`);

  // 3. A bad submit shows the coordinator's INVALID_ARGUMENT naming the field.
  await page.goto(`${url}/#/submit`);
  await page.getByTestId("submit-command").fill("true");
  await page.getByTestId("submit-amount").fill("1.5");
  await page.getByTestId("submit-button").click();
  const err = page.getByTestId("submit-error").filter({ hasText: "gpu_fraction" });
  await err.waitFor();
  ok(`bad submit: "${await err.textContent()}"`);

  // 4. Running jobs appear on their GPU tiles; one is cancelled from the list.
  // web-sleep claims a user (without --tokens-file the coordinator takes the
  // client's spec.user as is): the job list's user column must show it.
  const sleeper = await submit({ name: "web-sleep", command: ["sleep", "1000"], gpu_fraction: 0.5, user: "web-alice" });
  const packed = await submit({ name: "web-packed", command: ["sleep", "1000"], gpu_fraction: 0.25 });
  const gang = await submit({ name: "web-gang", command: ["sleep", "1000"], nodes: 2, gpus_per_node: 1 });
  // web-train reports loss, acc and (at steps 2 and 4 only) val/loss, then
  // keeps running so that the coordinator records its GPU usage (section 6).
  const train = await submit({
    name: "web-train", gpu_fraction: 0.25, ...reporter([
      [1, "loss=2 acc=0.1"], [2, "loss=1 acc=0.3 val/loss=1.5"], [3, "loss=0.5 acc=0.6"], [4, "loss=0.25 acc=0.8 val/loss=0.9"],
    ], { after: "sleep 1000" }),
  });
  for (const id of [sleeper, packed, gang, train]) await waitState(id, "JOB_STATE_RUNNING");
  await page.goto(`${url}/#/cluster`);
  await page.getByTestId("gpu-job").filter({ hasText: "web-sleep r0" }).waitFor();
  await page.getByTestId("gpu-job").filter({ hasText: "web-gang r1" }).waitFor();
  ok("running jobs shown on their GPU tiles (web-sleep r0, web-gang r0/r1)");
  // Screenshot for docs/: two packed experiments and a 2-node gang running.
  await page.getByTestId("gpu-job").filter({ hasText: "web-packed r0" }).waitFor();
  await page.screenshot({ path: join(shots, "dashboard.png"), fullPage: true });

  // 5. Sweep trials (params in JobSpec.params) for the comparison chart;
  //    each reports loss at steps 1-3 for the overlaid curves.
  const trials = [];
  for (const lr of ["0.0001", "0.001", "0.01"]) {
    const loss = (step) => ((1 + Number(lr) * 100) / step).toFixed(4);
    trials.push(await submit({
      name: `web-sweep-lr${lr}`, gpu_fraction: 0.125, sweep_id: "web-sweep", params: { lr },
      ...reporter([1, 2, 3].map((s) => [s, `loss=${loss(s)}`]), { before: `sleep ${Number(lr) * 30}` }),
    }));
  }
  for (const id of trials) await waitState(id, "JOB_STATE_SUCCEEDED");
  await page.goto(`${url}/#/sweeps?sweep=web-sweep`);
  await page.getByTestId("sweep-table").locator("tbody tr").nth(2).waitFor();
  const param = await page.getByTestId("sweep-param").inputValue();
  if (param !== "lr") throw new Error(`sweep x axis ${param}, want lr`);
  // The comparison of loss (last) vs lr: one point per trial.
  await until("sweep-metric offers loss", async () => (await page.getByTestId("sweep-metric").locator("option").allTextContents()).includes("loss (last)"));
  await page.getByTestId("sweep-metric").selectOption("m:loss");
  await until("sweep chart of 3 trials", async () => (await labels("sweep-chart"))[1] === "web-sweep: 3 trials with a value");
  // The curves: one per trial, named by its id and lr, for the chosen key.
  const want = (await rest("GET", "/v1/sweeps/web-sweep/jobs")).jobs.map((j) => `#${j.id} lr=${j.spec.params.lr}`).sort();
  const curves = await until("3 trial curves", async () => {
    const l = await labels("sweep-curves");
    return l.length === 4 ? l : null;
  });
  if (curves[0] !== "step" || JSON.stringify(curves.slice(1).sort()) !== JSON.stringify(want))
    throw new Error(`sweep curves ${JSON.stringify(curves)}, want step + ${JSON.stringify(want)}`);
  if ((await page.getByTestId("sweep-curve-metric").inputValue()) !== "loss") throw new Error("curve metric is not loss");
  if ((await page.getByTestId("sweep-curves").locator("canvas").count()) !== 1) throw new Error("no curve canvas");
  const atEnd = await hoverNewest("sweep-curves");
  if (atEnd[0].value !== "3") throw new Error(`sweep curves end at step ${atEnd[0].value}, want 3`);
  await page.screenshot({ path: join(shots, "dashboard-sweep.png"), fullPage: true });
  ok(`sweep view: loss (last) vs ${param} for 3 trials; loss curves of ${curves.slice(1).join(", ")} to step ${atEnd[0].value}`);

  // The Sweeps page opens on the newest sweep: one submitted after web-sweep
  // and named to sort before it.
  await submit({ name: "web-newest", command: ["true"], gpu_fraction: 0.125, sweep_id: "a-newest-sweep", params: { seed: "1" } });
  await page.goto(`${url}/#/sweeps`);
  await until("sweeps page on a-newest-sweep", async () => (await page.getByTestId("sweep-select").inputValue()) === "a-newest-sweep");
  const sweepList = await page.getByTestId("sweep-select").locator("option").allTextContents();
  if (JSON.stringify(sweepList) !== JSON.stringify(["a-newest-sweep", "web-sweep"])) throw new Error(`sweep list ${JSON.stringify(sweepList)}`);
  ok(`sweeps page opens on the newest sweep (list: ${sweepList.join(", ")})`);

  // A sweep that optimizes acc (JobSpec.early_stop, `trainctl sweep
  // --early-stop acc:max`) opens both charts on acc, not on run time, though
  // its trial also reports loss (no rung is reached: grace_steps 1000).
  const ashaTrial = await submit({
    name: "web-asha-t0", gpu_fraction: 0.125, sweep_id: "web-asha", params: { lr: "0.1" },
    early_stop: { metric: "acc", mode: "max", grace_steps: "1000" },
    ...reporter([1, 2].map((s) => [s, `loss=${1 / s} acc=${0.4 * s}`])),
  });
  await waitState(ashaTrial, "JOB_STATE_SUCCEEDED");
  await page.goto(`${url}/#/sweeps?sweep=web-asha`);
  await until("web-asha's trial curve", async () => (await labels("sweep-curves")).length === 2);
  const yMetric = await page.getByTestId("sweep-metric").inputValue();
  const curveMetric = await page.getByTestId("sweep-curve-metric").inputValue();
  if (yMetric !== "m:acc" || curveMetric !== "acc")
    throw new Error(`sweep web-asha opens on y=${yMetric}, curves of ${curveMetric}; want its metric acc (m:acc, acc)`);
  const [, ashaLabel] = await labels("sweep-chart");
  if (ashaLabel !== "web-asha: 1 trials with a value") throw new Error(`web-asha chart: ${ashaLabel}`);
  ok("a sweep's charts open on its metric (early_stop acc), not on run time or loss");

  await page.goto(`${url}/#/jobs?name=web-sleep`);
  const row = page.locator(`[data-testid=job-row][data-job="${sleeper}"]`);
  await row.waitFor();
  if ((await page.getByTestId("job-row").count()) !== 1) throw new Error("name filter shows more than web-sleep");
  await page.getByTestId(`cancel-${sleeper}`).click();
  await row.getByTestId("job-state").filter({ hasText: "CANCELLED" }).waitFor();
  await waitState(sleeper, "JOB_STATE_CANCELLED");
  // The user and reason columns, found by their headings: the submitter, and
  // the coordinator's reason for the cancel (GET /v1/jobs/ID says which).
  const heads = (await page.getByTestId("jobs-table").locator("thead th").allTextContents()).map((t) => t.trim());
  const cell = (name) => {
    if (!heads.includes(name)) throw new Error(`job list has no ${name} column: ${JSON.stringify(heads)}`);
    return row.locator("td").nth(heads.indexOf(name));
  };
  const reason = (await rest("GET", `/v1/jobs/${sleeper}`)).job.reason;
  if (!reason) throw new Error(`cancelled job ${sleeper} has no reason to show`);
  await cell("reason").filter({ hasText: reason }).waitFor();
  const user = (await cell("user").textContent()).trim();
  if (user !== "web-alice") throw new Error(`user column shows ${JSON.stringify(user)}, want web-alice`);
  await page.getByTestId("filter-state").selectOption("JOB_STATE_CANCELLED");
  await page.getByTestId("job-row").first().waitFor();
  ok(`job list: name filter, cancel job ${sleeper} -> CANCELLED with reason "${reason}", user column "${user}", state filter`);

  // 6. The training job's page: a curve per reported key vs step, and its GPU
  //    utilization and memory over time from the coordinator's samples.
  const keys = await waitMetrics(train, "loss", 4);
  await page.goto(`${url}/#/jobs/${train}`);
  const mLabels = await until("metric chart legend", async () => {
    const l = await labels("metric-chart");
    return l.length === keys.length + 1 ? l : null;
  });
  if (JSON.stringify(mLabels) !== JSON.stringify(["step", ...keys])) throw new Error(`metric legend ${JSON.stringify(mLabels)}, want step + ${JSON.stringify(keys)}`);
  if ((await page.getByTestId("metric-chart").locator("canvas").count()) !== 1) throw new Error("no metric canvas");
  const m = Object.fromEntries((await hoverNewest("metric-chart")).map((r) => [r.label, r.value]));
  if (m.step !== "4" || m.loss !== "0.25" || m.acc !== "0.8" || m["val/loss"] !== "0.9") throw new Error(`legend at the last step: ${JSON.stringify(m)}`);
  ok(`job ${train} metric chart: ${keys.join(", ")} vs step; the legend at step ${m.step}: loss ${m.loss}, acc ${m.acc}, val/loss ${m["val/loss"]}`);

  const nSamples = await until("2 usage samples on the page", async () => {
    const n = Number(((await page.getByTestId("chart-note").textContent()).match(/(\d+) samples/) ?? [])[1] ?? 0);
    return n >= 2 ? n : null;
  });
  const uLabels = await labels("usage-chart");
  if (JSON.stringify(uLabels) !== JSON.stringify(["time", "GPU utilization (%)", "GPU memory used"])) throw new Error(`usage legend ${JSON.stringify(uLabels)}`);
  const [t, util, mem] = (await hoverNewest("usage-chart")).map((r) => r.value);
  // The time axis: the hovered point is one of the recorded samples, in local time.
  const samples = (await rest("GET", `/v1/usage?job_ids=${train}`)).jobs[0].samples;
  if (!samples.some((x) => localTime(Number(x.time_ms)) === t)) throw new Error(`usage legend time ${t} is no sample's (${samples.map((x) => localTime(Number(x.time_ms))).join(", ")})`);
  if (!/^\d+%$/.test(util) || !/ ?B$/.test(mem)) throw new Error(`usage legend values: ${util}, ${mem}`);
  ok(`job ${train} usage chart: ${nSamples} samples on a time axis; at ${t}: ${util} GPU, ${mem} memory`);
  // Screenshot for docs/: the running training job with its charts and log.
  await page.getByTestId("log").filter({ hasText: "step 4:" }).waitFor();
  await page.screenshot({ path: join(shots, "dashboard-job.png"), fullPage: true });
  ok(`screenshots in ${shots}`);

  // 7. Node admin levers on the cluster view. web-node-b runs web-gang's
  //    rank 1, so a drain leaves it DRAINING (the job keeps running) until
  //    web-gang is cancelled.
  await page.goto(`${url}/#/cluster`);
  const nodeB = page.locator('[data-testid=node][data-node="web-node-b"]');
  const stateB = nodeB.getByTestId("node-state");
  await stateB.filter({ hasText: /^ready$/ }).waitFor();
  if (await nodeB.getByTestId("node-reason").isVisible()) throw new Error("a node in service shows an admin reason");
  await nodeB.getByTestId("node-drain").click();
  // The form checks its input before asking the coordinator.
  await nodeB.getByTestId("drain-submit").click();
  await nodeB.getByTestId("node-action-error").filter({ hasText: "a reason is required" }).waitFor();
  await nodeB.getByTestId("drain-reason").fill("web-e2e swap PSU");
  await nodeB.getByTestId("drain-deadline").fill("soon");
  await nodeB.getByTestId("drain-submit").click();
  await nodeB.getByTestId("node-action-error").filter({ hasText: 'deadline "soon" is not a duration' }).waitFor();
  if ((await stateB.textContent()) !== "ready") throw new Error("a refused form changed the node");
  ok("drain form: a missing reason and a bad deadline are refused with a message, the node untouched");
  await nodeB.getByTestId("drain-deadline").fill("2h");
  await nodeB.getByTestId("drain-submit").click();
  await stateB.filter({ hasText: /^draining$/ }).waitFor();
  const why = nodeB.getByTestId("node-reason");
  await why.filter({ hasText: /^DRAIN (by \S+ )?\d+s ago: web-e2e swap PSU, deadline in (2h|1h59m)$/ }).waitFor();
  if (await nodeB.getByTestId("drain-form").isVisible()) throw new Error("the drain form stays open after the drain");
  if (await page.locator('[data-testid=node][data-node="web-node-a"]').getByTestId("node-state").textContent() !== "ready") throw new Error("web-node-a is not ready");
  await page.screenshot({ path: join(shots, "dashboard-drain.png"), fullPage: true });
  // The coordinator has it: `trainctl nodes` says the same.
  const cliNodes = () => execFileSync(CLI, ["nodes"], { encoding: "utf8", env: process.env });
  let table = cliNodes();
  if (!/^web-node-b\*?\s+draining\s/m.test(table) || !/^web-node-b: DRAIN .*ago: web-e2e swap PSU, deadline in 1h59m/m.test(table))
    throw new Error(`trainctl nodes after the drain:\n${table}`);
  ok(`drained web-node-b from the page: "draining", "${await why.textContent()}"; trainctl nodes agrees`);
  // Once what ran there is gone, the page says drained, the reason kept.
  await rest("POST", `/v1/jobs/${gang}:cancel`, {});
  await stateB.filter({ hasText: /^drained$/ }).waitFor();
  await why.filter({ hasText: "web-e2e swap PSU" }).waitFor();
  table = cliNodes();
  if (!/^web-node-b\*?\s+drained\s/m.test(table)) throw new Error(`trainctl nodes once web-gang is cancelled:\n${table}`);
  ok("web-gang cancelled: web-node-b drained on the page and in trainctl nodes, the reason kept");
  const resume = nodeB.getByTestId("node-resume");
  await resume.click();
  await stateB.filter({ hasText: /^ready$/ }).waitFor();
  await nodeB.getByTestId("node-drain").waitFor();
  if (await why.isVisible()) throw new Error("the reason stays after the resume");
  table = cliNodes();
  if (!/^web-node-b\*?\s+ready\s/m.test(table) || /^web-node-b: /m.test(table)) throw new Error(`trainctl nodes after the resume:\n${table}`);
  ok("resumed web-node-b from the page: ready again, no reason; trainctl nodes agrees");
  // Down (Slurm's state=DOWN): the same form without a deadline.
  await nodeB.getByTestId("node-down").click();
  if (await nodeB.getByTestId("drain-deadline").isVisible()) throw new Error("the down form offers a deadline");
  await nodeB.getByTestId("drain-submit").filter({ hasText: "Down now" }).click();
  await nodeB.getByTestId("node-action-error").filter({ hasText: "a reason is required" }).waitFor();
  await nodeB.getByTestId("drain-reason").fill("web-e2e PSU smoke");
  await nodeB.getByTestId("drain-submit").click();
  await stateB.filter({ hasText: /^down$/ }).waitFor();
  await why.filter({ hasText: /^DOWN (by \S+ )?\d+s ago: web-e2e PSU smoke$/ }).waitFor();
  if ((await nodeB.getByTestId("node-down").count()) !== 0) throw new Error("a down node offers Down again");
  table = cliNodes();
  if (!/^web-node-b\*?\s+down\s/m.test(table) || !/^web-node-b: DOWN .*ago: web-e2e PSU smoke/m.test(table)) throw new Error(`trainctl nodes after the down:\n${table}`);
  await nodeB.getByTestId("node-resume").click();
  await stateB.filter({ hasText: /^ready$/ }).waitFor();
  ok(`downed web-node-b from the page: "down", "DOWN ... web-e2e PSU smoke" in trainctl nodes; resumed again`);

  // A non-admin's token: the gateway's answer as the coordinator words it
  // (this cluster runs without --tokens-file, so every caller is an admin
  // here: the 403 is played by the browser's network layer). The message
  // shows by the button, every node's buttons go for the session, and come
  // back with another token.
  await page.locator("#token").fill("web-e2e-user");
  await page.locator("#token").dispatchEvent("change");
  let sentAuth = "";
  await page.route("**/v1/nodes:update", (route) => {
    sentAuth = route.request().headers()["authorization"] ?? "";
    const message = "user web-e2e-user may not drain, resume or down nodes: only an admin (role ROLE_ADMIN) may";
    return route.fulfill({ status: 403, contentType: "application/json", body: JSON.stringify({ error: message, message, code: 7 }) });
  });
  refusalExpected = true;
  const nodeA = page.locator('[data-testid=node][data-node="web-node-a"]');
  await nodeA.getByTestId("node-drain").click();
  await nodeA.getByTestId("drain-reason").fill("not mine to drain");
  await nodeA.getByTestId("drain-submit").click();
  const refusal = nodeA.getByTestId("node-action-error").filter({ hasText: "only an admin" });
  await refusal.waitFor();
  const refusalText = await refusal.textContent();
  await page.getByTestId("node-actions-note").filter({ hasText: "node actions need an admin token" }).waitFor();
  await until("no node action buttons", async () => (await page.getByTestId("node-drain").count()) + (await page.getByTestId("node-down").count()) + (await page.getByTestId("node-resume").count()) === 0);
  if (sentAuth !== "Bearer web-e2e-user") throw new Error(`the drain carried authorization ${JSON.stringify(sentAuth)}`);
  await page.reload();
  await page.getByTestId("node").nth(1).waitFor();
  await page.getByTestId("node-actions-note").waitFor();
  if ((await page.getByTestId("node-drain").count()) !== 0) throw new Error("the buttons came back after a reload with the refused token");
  await page.unroute("**/v1/nodes:update");
  refusalExpected = false;
  await page.locator("#token").fill("");
  await page.locator("#token").dispatchEvent("change");
  await page.getByTestId("node-drain").nth(1).waitFor();
  if (await page.getByTestId("node-actions-note").isVisible()) throw new Error("the admin note stays with another token");
  ok(`a 403 (PERMISSION_DENIED) shows "${refusalText}" by the button and hides the buttons for the session; another token brings them back`);

  // 8. The Usage page: GPU-hours per day by user (uPlot), and the window's
  //    table of the attempts that ended so far (the submitted and the
  //    cancelled jobs above), with a total row.
  await page.goto(`${url}/#/usage`);
  await page.getByTestId("usage-row").first().waitFor();
  await page.getByTestId("usage-chart").locator("canvas").first().waitFor();
  const usageText = await page.getByTestId("usage-table").textContent();
  if (!/web-alice/.test(usageText ?? "")) throw new Error(`usage table without web-alice's row: ${usageText}`);
  await page.getByTestId("usage-by").selectOption("project");
  await page.waitForFunction(() => location.hash === "#/usage?by=project");
  await page.getByTestId("usage-row").first().waitFor();
  await page.screenshot({ path: join(shots, "dashboard-usage.png"), fullPage: true });
  ok("usage page: GPU-hours chart by user and the table (web-alice's row), then by project");

  if (consoleErrors.length) throw new Error(`browser console errors: ${consoleErrors.slice(0, 3).join(" | ")}`);
  ok("no errors in the browser console");
  for (const id of [packed, train]) await rest("POST", `/v1/jobs/${id}:cancel`, {});
  console.log(`${passed} passed, 0 failed`);
} catch (e) {
  console.error(`FAIL: ${e instanceof Error ? e.stack : e}`);
  await page.screenshot({ path: join(shots, "failure.png"), fullPage: true }).catch(() => {});
  console.error(`page at failure: ${page.url()} (screenshot ${join(shots, "failure.png")})`);
  process.exitCode = 1;
} finally {
  await close();
}
