/** The API's objects as it writes them (snake_case members, times in Unix seconds). */

export type JobStatus = "queued" | "running" | "succeeded" | "failed" | "cancelled" | "expired";

export const TERMINAL_STATUSES: ReadonlySet<string> = new Set([
  "succeeded",
  "failed",
  "cancelled",
  "expired",
]);

export interface JobError {
  code: string;
  message: string;
  type?: string;
  [member: string]: unknown;
}

/** Why a job that is not running waits (`null`: nothing holds it). */
export interface JobWaiting {
  reason: string;
  detail: string;
  until: number | null;
}

export interface Job {
  id: string;
  object: "job";
  status: JobStatus;
  provider: string;
  endpoint: string;
  model: string | null;
  created_at: number;
  started_at: number | null;
  completed_at: number | null;
  cancel_requested_at: number | null;
  expires_at: number | null;
  attempt: number;
  max_attempts: number;
  phase: string | null;
  provider_job_id: string | null;
  progress?: number | null;
  result: Record<string, unknown> | null;
  error: JobError | null;
  usage: Record<string, unknown> | null;
  metadata: Record<string, unknown>;
  dead_lettered: boolean;
  purged?: boolean;
  waiting?: JobWaiting | null;
  queue_position?: number | null;
  /** false: `queue_position` is a floor (at least that place: the server walks 100 jobs ahead). */
  queue_position_exact?: boolean | null;
  [member: string]: unknown;
}

/** Whether a job is finished for good. */
export function isTerminal(job: Pick<Job, "status">): boolean {
  return TERMINAL_STATUSES.has(job.status);
}

/** What `submit()` sends besides the endpoint and the provider body: the job's fields of the
 * same names, and the request's own `idempotencyKey` (generated when left out, so a retried
 * submit never creates a second job) and `waitS` (≤ 60: answer once finished, if in time). */
export interface SubmitOptions {
  provider?: string;
  metadata?: Record<string, unknown>;
  webhook?: { url: string; event_types?: string[] };
  priority?: number;
  max_attempts?: number;
  start_timeout_s?: number;
  execution_timeout_s?: number;
  stream?: boolean;
  /** Streaming chat, Responses and Messages jobs: `"continue"` makes a retry go on from the
   * partial output where the provider takes an assistant prefix; `"restart"` (default). */
  on_retry?: "continue" | "restart";
  run_at?: number;
  delay_s?: number;
  concurrency_key?: string;
  idempotencyKey?: string;
  waitS?: number;
  signal?: AbortSignal;
}

/** One item of `submitMany()`: a submit body (`endpoint`, `body`, the job's fields). */
export interface SubmitItem {
  endpoint: string;
  body: Record<string, unknown>;
  idempotency_key?: string;
  [member: string]: unknown;
}

export type JobTokenScope = "read" | "stream" | "cancel";

/** A job token: hand `token` to a browser or a phone, which may then act on job `job_id`
 * within `scopes` until `expires_at` (Unix seconds), and on nothing else. */
export interface JobToken {
  object: "job_token";
  token: string;
  job_id: string;
  scopes: JobTokenScope[];
  expires_at: number;
}

/** One piece of a job's output text. `reset`: a new attempt starts over, so discard the
 * text received so far before this one. `continuedChars` (a reset delta only; else 0): the new
 * attempt continues the text so far (`on_retry: "continue"`) and this delta begins with its
 * first `continuedChars` characters again; replacing the text as for any reset gives the right
 * text, and a display that keeps its text does
 * `text = text.slice(0, n) + delta.text.slice(n)` instead. */
export interface OutputDelta {
  text: string;
  seq: number;
  reset: boolean;
  continuedChars: number;
}

/** Which jobs `list()` and `iterJobs()` answer: every filter given must hold. */
export interface JobFilter {
  /** Any of these statuses. */
  status?: JobStatus | JobStatus[];
  deadLettered?: boolean;
  /** The model and the provider the job runs on, exactly. */
  model?: string;
  provider?: string;
  /** Created at or after this time (a Date, or Unix seconds). */
  createdAfter?: Date | number;
  /** Created before this time (exclusive). */
  createdBefore?: Date | number;
  /** Pairs the job's metadata must all hold (top-level members, string values, exactly). */
  metadata?: Record<string, string>;
}

/** One page of `GET /v1/jobs`, newest first. */
export interface JobPage {
  object: "list";
  data: Job[];
  /** More jobs may follow: page on with `last_id`. */
  has_more: boolean;
  /** Pass it as `after` for the next page: the last job this page read. A search's page may
   * be partial (fewer jobs than its limit, even none, with `has_more` true), and its
   * `last_id` then names a job not in `data`. */
  last_id: string | null;
}
