// End-to-end test of the dashboard in real headless Chromium (Debian's
// /usr/bin/chromium driven by playwright-core), against a live gateway,
// coordinator and fake-GPU agents that tests/e2e/web_e2e.sh starts.
//   node e2e/dashboard.e2e.mjs URL SCREENSHOT_DIR
// Checks what a user sees: GPU tiles, submitting through the form and the
// job running to SUCCEEDED with its log, cancelling another from the job
// list, a bad submit's error, the sweep chart. Writes dashboard.png (cluster),
// dashboard-job.png (job detail) and dashboard-sweep.png to SCREENSHOT_DIR. Every wait is on a
// condition with a deadline. Prints "N passed, 0 failed" or exits 1.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [url, shots] = process.argv.slice(2);
if (!url || !shots) {
  console.error("usage: dashboard.e2e.mjs URL SCREENSHOT_DIR");
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

const profile = mkdtempSync(join(tmpdir(), "trainctl-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
  viewport: { width: 1280, height: 600 },
});
const page = context.pages()[0] ?? (await context.newPage());
page.setDefaultTimeout(TIMEOUT);
const consoleErrors = [];
// Failed requests show as console errors without their address: those are
// checked by address instead. Expected: the bad submit's 400, and 404/501
// from the optional endpoints (GetJobUsage, GetMetrics, WhyJob) where the
// coordinator does not have them.
page.on("console", (m) => m.type() === "error" && !m.text().startsWith("Failed to load resource") && consoleErrors.push(m.text()));
page.on("response", (r) => {
  const optional = /\/v1\/usage\?|\/v1\/jobs\/\d+\/metrics\?|\/v1\/jobs\/\d+:why$/.test(r.url()) && [404, 501].includes(r.status());
  const expected = (r.status() === 400 && r.url().endsWith("/v1/jobs")) || optional;
  if (r.status() >= 400 && !expected) consoleErrors.push(`HTTP ${r.status()} for ${r.request().method()} ${r.url()}`);
});
page.on("pageerror", (e) => consoleErrors.push(String(e)));

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
    'for i in 1 2 3; do echo "step $i"; sleep 0.2; done; echo "hello from rank $RANK"',
  );
  await page.getByTestId("submit-shape").selectOption("fraction");
  await page.getByTestId("submit-amount").fill("0.25");
  await page.getByTestId("submit-button").click();
  await page.waitForURL(/#\/jobs\/\d+$/);
  const helloId = page.url().match(/#\/jobs\/(\d+)$/)[1];
  await page.getByTestId("job-state").filter({ hasText: "SUCCEEDED" }).waitFor();
  await page.getByTestId("log").filter({ hasText: "hello from rank 0" }).waitFor();
  await page.getByTestId("log-state").filter({ hasText: "end of log" }).waitFor();
  const log = await page.getByTestId("log").textContent();
  if (!/step 1\nstep 2\nstep 3\nhello from rank 0/.test(log)) throw new Error(`log: ${JSON.stringify(log)}`);
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
  for (const id of [sleeper, packed, gang]) await waitState(id, "JOB_STATE_RUNNING");
  await page.goto(`${url}/#/cluster`);
  await page.getByTestId("gpu-job").filter({ hasText: "web-sleep r0" }).waitFor();
  await page.getByTestId("gpu-job").filter({ hasText: "web-gang r1" }).waitFor();
  ok("running jobs shown on their GPU tiles (web-sleep r0, web-gang r0/r1)");
  // Screenshot for docs/: two packed experiments and a 2-node gang running.
  await page.getByTestId("gpu-job").filter({ hasText: "web-packed r0" }).waitFor();
  await page.screenshot({ path: join(shots, "dashboard.png"), fullPage: true });

  // 5. Sweep trials (params in JobSpec.params) for the comparison chart.
  const trials = [];
  for (const lr of ["0.0001", "0.001", "0.01"]) {
    trials.push(await submit({
      name: `web-sweep-lr${lr}`, command: ["sh", "-c", `sleep ${Number(lr) * 30}`], gpu_fraction: 0.125,
      sweep_id: "web-sweep", params: { lr },
    }));
  }
  for (const id of trials) await waitState(id, "JOB_STATE_SUCCEEDED");
  await page.goto(`${url}/#/sweeps?sweep=web-sweep`);
  await page.getByTestId("sweep-table").locator("tbody tr").nth(2).waitFor();
  const param = await page.getByTestId("sweep-param").inputValue();
  if (param !== "lr") throw new Error(`sweep x axis ${param}, want lr`);
  await page.screenshot({ path: join(shots, "dashboard-sweep.png"), fullPage: true });
  ok(`sweep view: 3 trials of web-sweep, chart of run time vs ${param}`);

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

  // 6. Screenshot for docs/: the finished job's detail page with its log.
  await page.goto(`${url}/#/jobs/${helloId}`);
  await page.getByTestId("log-state").filter({ hasText: "end of log" }).waitFor();
  await page.screenshot({ path: join(shots, "dashboard-job.png"), fullPage: true });
  ok(`screenshots in ${shots}`);

  if (consoleErrors.length) throw new Error(`browser console errors: ${consoleErrors.slice(0, 3).join(" | ")}`);
  ok("no errors in the browser console");
  for (const id of [packed, gang]) await rest("POST", `/v1/jobs/${id}:cancel`, {});
  console.log(`${passed} passed, 0 failed`);
} catch (e) {
  console.error(`FAIL: ${e instanceof Error ? e.stack : e}`);
  await page.screenshot({ path: join(shots, "failure.png"), fullPage: true }).catch(() => {});
  console.error(`page at failure: ${page.url()} (screenshot ${join(shots, "failure.png")})`);
  process.exitCode = 1;
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
