// End-to-end test of the job page's terminal (src/terminal.ts) in real
// headless Chromium (Debian's /usr/bin/chromium driven by playwright-core),
// through trainctl-gateway's /v1/terminal WebSocket to a coordinator run with
// a tokens file and a fake-GPU agent that tests/e2e/web_e2e.sh starts.
//   node e2e/terminal.e2e.mjs URL SCREENSHOT_DIR JOB OWNER_TOKEN OTHER_TOKEN
// JOB is a running 2-rank gang of OWNER_TOKEN's user. Checks what a user
// sees in xterm.js's screen: the login shell on rank 1 with that rank's RANK
// and WORLD_SIZE and a pts as its terminal, `stty size` following the page's
// size, Ctrl-C stopping a `sleep` while the shell stays, `exit 3` shown as the
// exit code; a one-off command on rank 0; the other user's terminal refused
// with PERMISSION_DENIED; a user's Down on the cluster view refused by the
// coordinator (only an admin may). Writes dashboard-terminal.png to SCREENSHOT_DIR.
// Every wait is on a condition with a deadline. Prints "N passed, 0 failed"
// or exits 1.
import { join } from "node:path";
import { launchChromium } from "./browser.mjs";

const [url, shots, job, owner, other] = process.argv.slice(2);
if (!url || !shots || !job || !owner || !other) {
  console.error("usage: terminal.e2e.mjs URL SCREENSHOT_DIR JOB OWNER_TOKEN OTHER_TOKEN");
  process.exit(2);
}
const TIMEOUT = 30_000;
let passed = 0;
const ok = (msg) => {
  passed++;
  console.log(`ok: ${msg}`);
};

const { page, close } = await launchChromium({ width: 1280, height: 900, timeoutMs: TIMEOUT });
const pageErrors = [];
page.on("pageerror", (e) => pageErrors.push(String(e)));

// The terminal's screen as text, one line per row (xterm.js's DOM renderer).
const screen = () => page.getByTestId("terminal").locator(".xterm-rows").innerText();
// Waits until the screen matches `re`; returns the match.
async function seen(re) {
  const end = Date.now() + TIMEOUT;
  for (;;) {
    const m = (await screen()).match(re);
    if (m) return m;
    if (Date.now() > end) throw new Error(`terminal: no ${re} after ${TIMEOUT} ms; screen:\n${await screen()}`);
    await page.waitForTimeout(50);
  }
}
const state = page.getByTestId("terminal-state");
// Types `line` into the terminal and presses Enter.
async function typeLine(line) {
  await page.getByTestId("terminal").locator(".xterm-helper-textarea").focus();
  await page.keyboard.type(line);
  await page.keyboard.press("Enter");
}
async function useToken(token) {
  await page.locator("#token").fill(token);
  await page.locator("#token").dispatchEvent("change");
}
async function openTerminal(rank, command) {
  await page.getByTestId("terminal-rank").selectOption(String(rank));
  await page.getByTestId("terminal-command").fill(command);
  await page.getByTestId("terminal-open").click();
}

try {
  await page.goto(`${url}/#/jobs/${job}`);
  await useToken(owner);
  await page.reload();
  // Enabled once the page has seen the job running; two ranks to choose from.
  await page.locator("[data-testid=terminal-open]:not([disabled])").waitFor();
  await page.locator("[data-testid=terminal-rank] option[value='1']").waitFor({ state: "attached" });

  // 1. The login shell on rank 1: its environment and a real terminal.
  await openTerminal(1, "");
  await state.filter({ hasText: /connected: node \S+, pid [1-9]/ }).waitFor();
  await typeLine('echo "R=$RANK/$WORLD_SIZE T=$(tty)"');
  const [, tty] = await seen(/R=1\/2 T=(\/dev\/pts\/\d+)/);
  ok(`rank 1's login shell in the page: RANK=1 WORLD_SIZE=2 on ${tty}`);

  // 2. The terminal follows the page: a narrower window, fewer columns.
  // Each probe prints a marker computed by the shell (S101=, S102=...), so
  // the typed line itself never matches.
  let probes = 100;
  const size = async () => {
    probes++;
    await typeLine(`echo S$((${probes - 1}+1))=$(stty size | tr ' ' x)`);
    return (await seen(new RegExp(`S${probes}=(\\d+)x(\\d+)`))).slice(1).map(Number);
  };
  const [rows0, cols0] = await size();
  await page.setViewportSize({ width: 900, height: 900 });
  let [rows1, cols1] = await size();
  for (const end = Date.now() + TIMEOUT; cols1 === cols0; [rows1, cols1] = await size()) {
    if (Date.now() > end) throw new Error(`stty size stays ${rows0}x${cols0} after the page narrowed`);
  }
  if (cols1 > cols0) throw new Error(`columns ${cols0} -> ${cols1}: want fewer`);
  ok(`stty size follows the page: ${rows0}x${cols0} -> ${rows1}x${cols1}`);

  // 3. Ctrl-C reaches the foreground process group, not the session: a
  // command that traps SIGINT says so, and the shell still answers.
  await typeLine(`clear; sh -c 'trap "echo got-$((40+2)); exit 9" INT; echo ready-$((1+1)); while :; do sleep 0.1; done'; echo rc=$?`);
  await seen(/ready-2/);
  await page.keyboard.press("Control+C");
  await seen(/got-42/);
  await seen(/rc=9/);
  await typeLine("echo alive-$((6*7))");
  await seen(/alive-42/);
  ok("Ctrl-C reaches the running command (its trap ran, exit 9); the shell stays and answers");

  // 4. The shell's exit code is shown, and the terminal can be opened again.
  await typeLine("exit 3");
  await state.filter({ hasText: "exited with code 3" }).waitFor();
  await page.locator("[data-testid=terminal-open]:not([disabled])").waitFor();
  await page.screenshot({ path: join(shots, "dashboard-terminal.png"), fullPage: true });
  ok('"exit 3" ends the session with "exited with code 3"');

  // 5. A one-off command on rank 0 (sh -c).
  await openTerminal(0, "echo hello-from-rank-$RANK; exit 5");
  await seen(/hello-from-rank-0/);
  await state.filter({ hasText: "exited with code 5" }).waitFor();
  ok("a command on rank 0 prints its output and exit code 5");

  // 6. Another user's terminal into the job is refused by the coordinator.
  await useToken(other);
  await openTerminal(0, "");
  await state.filter({ hasText: /^PERMISSION_DENIED: / }).waitFor();
  ok(`another user's terminal is refused: "${await state.textContent()}"`);

  // 7. Node levers need an admin: this coordinator has a tokens file and bob
  // is a user, so his Down is refused by the coordinator itself (not a
  // faked answer as in dashboard.e2e.mjs), the node stays in service, and the buttons go.
  await page.goto(`${url}/#/cluster`);
  const node = page.getByTestId("node").first();
  await node.getByTestId("node-down").click();
  await node.getByTestId("drain-reason").fill("bob tries");
  await node.getByTestId("drain-submit").click();
  const refused = node.getByTestId("node-action-error").filter({ hasText: "may not drain, resume or down nodes: only an admin" });
  await refused.waitFor();
  await page.getByTestId("node-actions-note").waitFor();
  if ((await node.getByTestId("node-state").textContent()) !== "ready") throw new Error("bob's refused down changed the node");
  ok(`a user's Down is refused by the coordinator: "${await refused.textContent()}"; the node stays ready`);

  if (pageErrors.length) throw new Error(`page errors: ${pageErrors.slice(0, 3).join(" | ")}`);
  ok("no errors on the page");
  console.log(`${passed} passed, 0 failed`);
} catch (e) {
  console.error(`FAIL: ${e instanceof Error ? e.stack : e}`);
  await page.screenshot({ path: join(shots, "terminal-failure.png"), fullPage: true }).catch(() => {});
  process.exitCode = 1;
} finally {
  await close();
}
