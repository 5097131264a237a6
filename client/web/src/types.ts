// The JSON the REST gateway returns (proto field names, defaults printed,
// 64-bit integers as strings, enums as names; proto/trainctl/v1/*.proto).
// Only the fields the dashboard reads.

export interface JobSpec {
  name?: string;
  command?: string[];
  env?: Record<string, string>;
  // Absolute; empty: a private work dir per attempt on the node
  // (<log-dir>/cluster-<id>/work/job-N/attempt-M, 0700, the job user's).
  workdir?: string;
  priority?: number;
  gpus?: number;
  gpu_fraction?: number;
  gpu_memory_bytes?: string;
  nodes?: number;
  gpus_per_node?: number;
  tasks_per_node?: number;
  max_restarts?: number;
  sweep_id?: string;
  params?: Record<string, string>;
  user?: string;
  project?: string;
  // Early stopping of a sweep's trials (`trainctl sweep --early-stop
  // KEY:MODE`, metrics.proto EarlyStop): the metric the sweep optimizes.
  early_stop?: EarlyStop;
}

export interface EarlyStop {
  metric?: string;
  mode?: string; // "min" or "max"
  grace_steps?: string;
  reduction_factor?: number;
  max_steps?: string;
}

export interface Task {
  rank: number;
  local_rank: number;
  node_rank: number;
  node: string;
  gpu_uuids?: string[];
  gpu_indices?: number[];
  reserved_bytes_per_gpu?: string;
  state: string;
  pid: number;
  exit_code: number;
  signal: number;
  log_path?: string;
  message?: string;
  start_time_ms?: string;
  end_time_ms?: string;
}

export interface Job {
  id: string;
  spec?: JobSpec;
  kind: string;
  state: string;
  attempt: number;
  reason?: string;
  submit_time_ms?: string;
  start_time_ms?: string;
  end_time_ms?: string;
  tasks?: Task[];
  master_addr?: string;
  master_port?: number;
  world_size?: number;
  /** Set (a step, as a string: int64) when the sweep's early-stopping rule ended the trial. */
  stopped_early_at_step?: string;
}

export interface Gpu {
  index: number;
  uuid: string;
  name: string;
  memory_total_bytes: string;
  memory_used_bytes: string;
  utilization_pct: number;
  temperature_c: number;
  power_w: number;
}

export interface Node {
  name: string;
  address: string;
  state: string;
  last_heartbeat_ms: string;
  gpus?: Gpu[];
  fake_gpus?: boolean;
  /** Set when an admin (or the coordinator) drained it or set it down; null in service. */
  admin?: NodeAdmin | null;
}

/** Node.admin (types.proto NodeAdmin). */
export interface NodeAdmin {
  state: string; // NODE_ADMIN_STATE_DRAIN, NODE_ADMIN_STATE_DOWN (UNSPECIFIED: in service)
  reason: string;
  by: string; // "" with authentication off; "trainctl" for an automatic drain
  since_ms: string;
  deadline_ms: string; // "0": no deadline
  automatic: boolean;
}

export interface GpuTaskRef {
  job_id: string;
  rank: number;
  reserved_bytes: string;
  job_name: string;
}

export interface NodeView {
  node: Node;
  gpu_tasks?: { tasks?: GpuTaskRef[] }[];
  /** NODE_SERVICE_STATE_IN_SERVICE, _DRAINING, _DRAINED or _DOWN. */
  service_state?: string;
}

/** POST /v1/nodes:update (UpdateNodesRequest, service.proto). */
export interface UpdateNodesRequest {
  nodes: string[];
  action: "NODE_ACTION_DRAIN" | "NODE_ACTION_RESUME" | "NODE_ACTION_DOWN";
  reason?: string;
  deadline_s?: string; // int64: seconds; "0" or absent: none
  verify?: boolean;
}

export interface LogChunk {
  data: string | null; // base64; null when empty (grpc-gateway v1)
  offset: string;
  next_offset: string;
  attempt: number;
  eof: boolean;
}

// Optional endpoints that other work items add to the coordinator (the
// dashboard uses them where the gateway has them).

/** GET /v1/usage?job_ids=ID (GetJobUsage, telemetry.proto). */
export interface JobUsageSample {
  time_ms: string;
  gpu_util_pct: number;
  gpu_memory_used_bytes?: string;
  gpu_memory_total_bytes?: string;
  cpu_pct?: number;
}
export interface JobUsage {
  job_id: string;
  samples?: JobUsageSample[];
  findings?: { code: string; message: string }[];
  sample_period_ms?: string;
}

/** GET /v1/jobs/{id}/metrics (GetMetrics, metrics.proto). */
export interface MetricPoint {
  key: string;
  value: number;
  step: string;
  time_ms?: string;
  attempt?: number;
  rank?: number;
}
export interface MetricSeries {
  key: string;
  count: string;
  last: number;
  last_step: string;
  min: number;
  max: number;
  points?: MetricPoint[]; // none with summary_only
}

/** GET /v1/jobs/{id}:why (WhyJob, sched.proto): why a job waits. */
export interface WhyJob {
  summary: string;
  queue?: string;
  position?: number;
  quota?: string;
  nodes?: string[];
  reservation_job_id?: string;
  reservation?: string;
  reservation_eta_ms?: string;
}

/** GET /v1/accounting/usage (GetUsage, accounting.proto). int64 fields come as strings. */
export interface UsageRow {
  key: string;
  allocated_gpu_hours?: number;
  used_gpu_hours?: number;
  efficiency?: number;
  jobs?: string;
  attempts?: string;
  failed?: string;
  preempted?: string;
}
export interface GetUsageResponse {
  by?: string;
  since_ms?: string;
  until_ms?: string;
  rows?: UsageRow[];
  total?: UsageRow;
  only_user?: string;
}
