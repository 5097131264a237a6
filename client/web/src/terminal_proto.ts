// The wire side of the job page's terminal (terminal.ts), without the DOM:
// the WebSocket URL and subprotocols of the gateway's /v1/terminal
// (deploy/gateway/terminal.go) and what its text frames say.

/** The WebSocket subprotocol of /v1/terminal. */
export const TERMINAL_PROTOCOL = "trainctl.terminal.v1";
/** A bearer token offered as a subprotocol: this + base64url(token). */
export const BEARER_PROTOCOL_PREFIX = "bearer.trainctl.v1.";

/**
 * The subprotocols to offer: the terminal's, and the token's when there is
 * one (base64url without padding, UTF-8).
 */
export function terminalProtocols(token: string): string[] {
  if (!token) return [TERMINAL_PROTOCOL];
  const bytes = new TextEncoder().encode(token);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  const b64url = btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  return [TERMINAL_PROTOCOL, BEARER_PROTOCOL_PREFIX + b64url];
}

/**
 * The WebSocket URL of a terminal on `rank` of job `jobId` at the page's own
 * origin (ws: for http:, wss: for https:), rows x cols characters. A
 * non-empty `command` runs under `sh -c` (a line as typed at a shell); an
 * empty one opens the login shell of the task's account.
 */
export function terminalUrl(origin: string, jobId: string, rank: number, command: string, rows: number, cols: number): string {
  const u = new URL("/v1/terminal", origin);
  u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
  const q = new URLSearchParams({ job_id: jobId, rank: String(rank), rows: String(rows), cols: String(cols) });
  if (command.trim()) for (const w of ["sh", "-c", command]) q.append("command", w);
  u.search = q.toString();
  return u.toString();
}

/** What a text frame from the gateway says, for the status line. */
export interface ServerEvent {
  kind: "started" | "exit" | "notice" | "error" | "unknown";
  /** A sentence for the user. */
  text: string;
  /** The session is over (exit or error). */
  final: boolean;
}

/** gRPC code names, for error frames (google.rpc.Code numbers). */
const CODE_NAMES = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"];

/** Reads one text frame (a SessionServerMessage in proto JSON). */
export function parseServerFrame(text: string): ServerEvent {
  let m: any;
  try {
    m = JSON.parse(text);
  } catch {
    return { kind: "unknown", text: `unreadable frame: ${text.slice(0, 80)}`, final: false };
  }
  if (m.started) return { kind: "started", text: `connected: node ${m.started.node}, pid ${m.started.pid ?? 0}`, final: false };
  if (m.exit) {
    const e = m.exit;
    const how = e.signal ? `killed by signal ${e.signal}` : `exited with code ${e.exit_code ?? 0}`;
    return { kind: "exit", text: e.reason ? `${how}: ${e.reason}` : how, final: true };
  }
  if (m.notice !== undefined) return { kind: "notice", text: m.notice, final: false };
  if (m.error) {
    const code = CODE_NAMES[m.error.code ?? 2] ?? `code ${m.error.code}`;
    return { kind: "error", text: `${code}: ${m.error.message ?? ""}`, final: true };
  }
  return { kind: "unknown", text: `unknown frame: ${text.slice(0, 80)}`, final: false };
}
