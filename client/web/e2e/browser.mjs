// Headless Chromium for the dashboard's browser tests (dashboard.e2e.mjs,
// terminal.e2e.mjs): Debian's /usr/bin/chromium (or $CHROMIUM) driven by
// playwright-core, in a fresh profile directory.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * Starts Chromium with a viewport of `width` x `height` pixels; returns its
 * context, first page (default timeout `timeoutMs`) and close(), which ends
 * the browser and removes the profile.
 */
export async function launchChromium({ width = 1280, height = 600, timeoutMs = 30_000 } = {}) {
  const profile = mkdtempSync(join(tmpdir(), "trainctl-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
    viewport: { width, height },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(timeoutMs);
  const close = async () => {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return { context, page, close };
}
