// REST client of trainctl-gateway (/v1/, same origin). Every request carries
// the bearer token from the token box (localStorage "trainctl.token"), which
// the gateway forwards to the coordinator as gRPC metadata `authorization`.

import type { GetUsageResponse, Job, JobSpec, JobUsage, LogChunk, MetricSeries, NodeView, UpdateNodesRequest, WhyJob } from "./types";
import { NdjsonSplitter } from "./format";

/** An error answer of the gateway: HTTP status, gRPC code and message. */
export class ApiError extends Error {
  constructor(
    readonly httpStatus: number,
    readonly grpcCode: number,
    message: string,
  ) {
    super(message);
  }
}

const TOKEN_KEY = "trainctl.token";
export function getToken(): string {
  return localStorage.getItem(TOKEN_KEY) ?? "";
}
export function setToken(t: string): void {
  if (t) localStorage.setItem(TOKEN_KEY, t);
  else localStorage.removeItem(TOKEN_KEY);
}

function headers(json: boolean): HeadersInit {
  const h: Record<string, string> = {};
  const t = getToken();
  if (t) h["Authorization"] = `Bearer ${t}`;
  if (json) h["Content-Type"] = "application/json";
  return h;
}

async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const resp = await fetch(path, {
    method,
    headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await resp.text();
  let json: any = {};
  try {
    json = text ? JSON.parse(text) : {};
  } catch {
    throw new ApiError(resp.status, 2, `HTTP ${resp.status}: ${text.slice(0, 200)}`);
  }
  if (!resp.ok) throw new ApiError(resp.status, json.code ?? 2, json.message ?? json.error ?? `HTTP ${resp.status}`);
  return json as T;
}

export async function listJobs(opts: { states?: string[]; sweep?: string; limit?: number } = {}): Promise<Job[]> {
  const q = new URLSearchParams();
  for (const s of opts.states ?? []) q.append("states", s);
  if (opts.limit) q.set("limit", String(opts.limit));
  const path = opts.sweep ? `/v1/sweeps/${encodeURIComponent(opts.sweep)}/jobs` : "/v1/jobs";
  const r = await call<{ jobs?: Job[] }>("GET", `${path}?${q}`);
  return r.jobs ?? [];
}

export async function getJob(id: string): Promise<Job> {
  return (await call<{ job: Job }>("GET", `/v1/jobs/${id}`)).job;
}

export async function submitJob(spec: JobSpec): Promise<string> {
  return (await call<{ job_id: string }>("POST", "/v1/jobs", { spec })).job_id;
}

export async function cancelJob(id: string): Promise<Job> {
  return (await call<{ job: Job }>("POST", `/v1/jobs/${id}:cancel`, {})).job;
}

export async function listNodes(): Promise<NodeView[]> {
  return (await call<{ nodes?: NodeView[] }>("GET", "/v1/nodes")).nodes ?? [];
}

/**
 * Drains, resumes or downs nodes (UpdateNodes; admins only: PERMISSION_DENIED,
 * HTTP 403, otherwise). Resolves to the nodes' new views.
 */
export async function updateNodes(req: UpdateNodesRequest): Promise<NodeView[]> {
  return (await call<{ nodes?: NodeView[] }>("POST", "/v1/nodes:update", req)).nodes ?? [];
}

/** gRPC PERMISSION_DENIED (the gateway's HTTP 403). */
export function isPermissionDenied(e: unknown): boolean {
  return e instanceof ApiError && (e.grpcCode === 7 || e.httpStatus === 403);
}

/**
 * Streams a rank's log (GET /v1/jobs/{id}/logs:stream, newline-delimited
 * JSON) and calls onChunk for each chunk. Resolves when the stream ends (with
 * follow: when the job is final and its log fully read); rejects with an
 * ApiError on an error answer or an {"error"} line. Abort with `signal`.
 */
export async function streamLogs(
  id: string,
  rank: number,
  follow: boolean,
  onChunk: (c: LogChunk) => void,
  signal: AbortSignal,
): Promise<void> {
  const q = new URLSearchParams({ rank: String(rank), follow: String(follow) });
  const resp = await fetch(`/v1/jobs/${id}/logs:stream?${q}`, { headers: headers(false), signal });
  if (!resp.body) throw new ApiError(resp.status, 2, "no response body");
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  const split = new NdjsonSplitter();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    for (const line of split.feed(value) as any[]) {
      if (line.error) throw new ApiError(line.error.http_code ?? resp.status, line.error.grpc_code ?? 2, line.error.message ?? "log stream failed");
      if (line.result) onChunk(line.result as LogChunk);
    }
  }
}

// Endpoints of RPCs other work items add (GetJobUsage, GetMetrics): each
// resolves to null where this gateway or coordinator lacks it (HTTP 404 for
// the path, 501 for an unimplemented RPC), and after such an answer is not
// asked again until the page reloads. Other errors resolve to null too (the
// views fall back to what they can show without them).
const missing = new Set<string>();
async function optional<T>(name: string, path: string): Promise<T | null> {
  if (missing.has(name)) return null;
  try {
    return await call<T>("GET", path);
  } catch (e) {
    if (e instanceof ApiError && (e.httpStatus === 404 || e.httpStatus === 501)) missing.add(name);
    return null;
  }
}

/** A job's utilization history and findings (GetJobUsage), or null. */
export async function getJobUsage(id: string): Promise<JobUsage | null> {
  const r = await optional<{ jobs?: JobUsage[] }>("usage", `/v1/usage?job_ids=${id}`);
  return r?.jobs?.find((j) => j.job_id === id) ?? null;
}

/** Last/min/max of each metric a job reported (GetMetrics, summary only), or null. */
export async function getMetricSummary(id: string): Promise<MetricSeries[] | null> {
  const r = await optional<{ series?: MetricSeries[] }>("metrics", `/v1/jobs/${id}/metrics?summary_only=true`);
  return r ? (r.series ?? []) : null;
}

/**
 * Every point of a job's metrics (GetMetrics), of one key or ("") all, each
 * series with its points in report order; or null.
 */
export async function getMetrics(id: string, key = ""): Promise<MetricSeries[] | null> {
  const q = key ? `?key=${encodeURIComponent(key)}` : "";
  const r = await optional<{ series?: MetricSeries[] }>("metrics", `/v1/jobs/${id}/metrics${q}`);
  return r ? (r.series ?? []) : null;
}

/** Why a job waits (WhyJob: queue place, quota, what each node lacks), or null. */
export async function whyJob(id: string): Promise<WhyJob | null> {
  return optional<WhyJob>("why", `/v1/jobs/${id}:why`);
}

/** GPU-hours allocated and used per `by` group over [sinceMs, untilMs) (GetUsage). */
export async function getUsage(by: string, sinceMs: number, untilMs: number): Promise<GetUsageResponse> {
  const q = new URLSearchParams({ by, since_ms: String(sinceMs), until_ms: String(untilMs) });
  return call<GetUsageResponse>("GET", `/v1/accounting/usage?${q}`);
}
