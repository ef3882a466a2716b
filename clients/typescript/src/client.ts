/** `JobGate`: the native API over `fetch` (Node ≥ 18, browsers, Deno, edge runtimes). */

import { Backoff, retryAfterS } from "./backoff.js";
import {
  APIConnectionError,
  APIError,
  apiError,
  APITimeoutError,
  type Problem,
  WaitTimeoutError,
} from "./errors.js";
import { readEvents } from "./sse.js";
import {
  isTerminal,
  type Job,
  type JobFilter,
  type JobPage,
  type JobToken,
  type JobTokenScope,
  type OutputDelta,
  type SubmitItem,
  type SubmitOptions,
} from "./types.js";

export const DEFAULT_TIMEOUT_MS = 30_000;
export const DEFAULT_MAX_RETRIES = 2;
export const DEFAULT_LONG_POLL_S = 30;
export const MAX_LONG_POLL_S = 60; // the server's limit for ?wait= and Prefer: wait
export const MAX_RETRY_AFTER_S = 60; // a request's own retries; wait() honours any in budget
export const STREAM_IDLE_MS = 60_000; // the server sends a keep-alive comment every 15 s
export const BULK_MAX_PER_CALL = 1000; // the server's bound for POST /v1/jobs/bulk
const NETWORK_SLACK_MS = 10_000; // beyond the time the server was asked to hold a request
const RETRY_STATUSES = new Set([429, 503]); // the server did nothing: always safe to repeat
const RETRY_IF_IDEMPOTENT = new Set([500, 502, 504]);
const SUBMIT_FIELDS = [
  "provider",
  "metadata",
  "webhook",
  "priority",
  "max_attempts",
  "start_timeout_s",
  "execution_timeout_s",
  "stream",
  "on_retry",
  "run_at",
  "delay_s",
  "concurrency_key",
] as const;

export interface JobGateOptions {
  /** The server, e.g. `https://jobs.example.com` (no trailing `/v1`). */
  baseUrl: string;
  /** The tenant's API key (`jg_…`): on your backend only. */
  apiKey?: string;
  /** A job token (`jgt_…`): what a browser or a phone holds, for one job. */
  token?: string;
  /** Per request (default 30 s); a long poll adds the time it asked the server to hold. */
  timeoutMs?: number;
  /** Retries of a request the server did not act on (429, 503, a lost connection…). */
  maxRetries?: number;
  /** How long `wait()` asks the server to hold each request (≤ 60 s, default 30). */
  longPollS?: number;
  /** Another `fetch` (a wrapper, a mock); default: the global one. */
  fetch?: typeof fetch;
  /** The jitter's randomness in [0, 1) (default Math.random); for tests. */
  random?: () => number;
  /** Sleeping and the clock (ms) (default: setTimeout, Date.now); for tests. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  now?: () => number;
}

export interface WaitOptions {
  /** Give up (WaitTimeoutError, carrying the last job seen) after this long. */
  timeoutMs?: number;
  /** Called with the job at once and at each new status seen. */
  onChange?: (job: Job) => void;
  signal?: AbortSignal;
}

export interface StreamOptions {
  /** Send the deltas after this sequence number (the last `seq` you received). */
  startingAfter?: number;
  /** Give up after this many failed reconnects in a row (default 8). */
  maxReconnects?: number;
  signal?: AbortSignal;
}

export interface CreateJobTokenOptions {
  /** Seconds the token lives (default 3600; at most 86400). */
  ttlS?: number;
  /** Default `["read", "stream"]`; add `"cancel"` to let the holder cancel the job. */
  scopes?: JobTokenScope[];
}

export interface ListOptions extends JobFilter {
  /** The previous page's `last_id`. */
  after?: string;
  /** Jobs per page (1 to 100, default 20). */
  limit?: number;
  signal?: AbortSignal;
}

export interface IterJobsOptions extends JobFilter {
  /** Jobs per request (1 to 100, default 100). */
  pageSize?: number;
  signal?: AbortSignal;
}

/** One item's answer in `submitMany()`: its job, or the error that refused it alone. */
export type BulkResult = Job | APIError;

interface RequestOptions {
  query?: Record<string, string | number> | Array<[string, string]>;
  json?: unknown;
  headers?: Record<string, string>;
  idempotent?: boolean;
  timeoutMs?: number;
  signal?: AbortSignal | undefined;
}

/**
 * A client for jobgate's native API.
 *
 * Every request that is safe to repeat is retried on a lost connection, 429 and 503 (at most
 * `maxRetries` times, full-jitter backoff, never sooner than Retry-After). A submit is
 * always safe to repeat: it carries an Idempotency-Key (yours, or a fresh one).
 */
export class JobGate {
  readonly baseUrl: string;
  private readonly authorization: string;
  private readonly timeoutMs: number;
  private readonly maxRetries: number;
  private readonly longPollS: number;
  private readonly fetcher: typeof fetch;
  private readonly random: () => number;
  private readonly sleepFor: (ms: number, signal?: AbortSignal) => Promise<void>;
  private readonly now: () => number;

  constructor(options: JobGateOptions) {
    if (!options.baseUrl) throw new TypeError("baseUrl is required");
    const credential = options.apiKey ?? options.token;
    if (!credential || (options.apiKey !== undefined && options.token !== undefined)) {
      throw new TypeError("pass apiKey (a tenant's key) or token (a job token), exactly one");
    }
    const longPollS = options.longPollS ?? DEFAULT_LONG_POLL_S;
    if (!(longPollS >= 0 && longPollS <= MAX_LONG_POLL_S)) {
      throw new RangeError(`longPollS must be between 0 and ${MAX_LONG_POLL_S}`);
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.authorization = `Bearer ${credential}`;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.maxRetries = options.maxRetries ?? DEFAULT_MAX_RETRIES;
    this.longPollS = longPollS;
    this.fetcher = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.random = options.random ?? Math.random;
    this.sleepFor = options.sleep ?? sleep;
    this.now = options.now ?? Date.now;
  }

  // -- jobs -----------------------------------------------------------------------------

  /** Submit a job; answers at once with it `queued` (with `waitS` ≤ 60: finished, if it
   * finished in time). With `stream: true` its output is served live (`stream()`). */
  async submit(endpoint: string, body: Record<string, unknown>, options: SubmitOptions = {}): Promise<Job> {
    const payload: Record<string, unknown> = { endpoint, body };
    for (const name of SUBMIT_FIELDS) {
      const value = options[name];
      if (value !== undefined && value !== false) payload[name] = value;
    }
    const headers: Record<string, string> = {
      "Idempotency-Key": options.idempotencyKey ?? newIdempotencyKey(),
    };
    let timeoutMs = this.timeoutMs;
    if (options.waitS) {
      const waitS = Math.min(Math.floor(options.waitS), MAX_LONG_POLL_S);
      headers["Prefer"] = `wait=${waitS}`;
      timeoutMs = Math.max(timeoutMs, waitS * 1000 + NETWORK_SLACK_MS);
    }
    return (await this.request("POST", "/v1/jobs", {
      json: payload,
      headers,
      timeoutMs,
      signal: options.signal,
    })) as Job;
  }

  /** Submit many jobs through `POST /v1/jobs/bulk`, 1,000 per call. Each item is a submit
   * body; one without an `idempotency_key` gets a fresh one, so a lost answer is retried
   * safely. Answers one entry per item, in order: its Job, or the APIError that refused it. */
  async submitMany(items: Iterable<SubmitItem>, options: { signal?: AbortSignal } = {}): Promise<BulkResult[]> {
    const results: BulkResult[] = [];
    let chunk: SubmitItem[] = [];
    const send = async (): Promise<void> => {
      const answer = (await this.request("POST", "/v1/jobs/bulk", {
        json: { jobs: chunk },
        signal: options.signal,
      })) as { data: Array<Record<string, unknown>> };
      for (const entry of answer.data) results.push(bulkResult(entry));
      chunk = [];
    };
    for (const item of items) {
      if (!item.endpoint || !item.body) throw new TypeError("each item needs endpoint and body");
      const entry: SubmitItem = { ...item };
      for (const [name, value] of Object.entries(entry)) if (value === undefined) delete entry[name];
      entry.idempotency_key ??= newIdempotencyKey();
      chunk.push(entry);
      if (chunk.length === BULK_MAX_PER_CALL) await send();
    }
    if (chunk.length > 0) await send();
    return results;
  }

  /** The job as it stands now. */
  async get(jobId: string, options: { signal?: AbortSignal } = {}): Promise<Job> {
    return (await this.request("GET", jobPath(jobId), { signal: options.signal })) as Job;
  }

  /** Cancel (idempotent): a queued job is cancelled at once, a running one once its worker
   * has stopped the call; a finished job is answered unchanged. */
  async cancel(jobId: string, options: { signal?: AbortSignal } = {}): Promise<Job> {
    return (await this.request("POST", jobPath(jobId, "/cancel"), { signal: options.signal })) as Job;
  }

  /** One page of the tenant's jobs, newest first, of those matching every filter given. */
  async list(options: ListOptions = {}): Promise<JobPage> {
    const query = listQuery(options);
    if (options.after !== undefined) query.push(["after", options.after]);
    if (options.limit !== undefined) query.push(["limit", String(options.limit)]);
    return (await this.request("GET", "/v1/jobs", { query, signal: options.signal })) as JobPage;
  }

  /** Every matching job, newest first, fetching pages (`pageSize` jobs at most each) as it
   * goes, through a search's partial pages too (fewer jobs, even none, and more after). */
  async *iterJobs(options: IterJobsOptions = {}): AsyncGenerator<Job, void, undefined> {
    const { pageSize = 100, ...filter } = options;
    let after: string | undefined;
    for (;;) {
      const page = await this.list({ ...filter, limit: pageSize, ...(after === undefined ? {} : { after }) });
      yield* page.data;
      if (!page.has_more || page.last_id === null) return;
      after = page.last_id;
    }
  }

  /** A job token for one job, to hand to a browser or a phone instead of an API key (needs
   * the tenant's API key). The server refuses it anywhere else, and once it expires or the
   * job is purged. */
  async createJobToken(jobId: string, options: CreateJobTokenOptions = {}): Promise<JobToken> {
    const json = { ttl_s: options.ttlS ?? 3600, scopes: options.scopes ?? ["read", "stream"] };
    return (await this.request("POST", jobPath(jobId, "/tokens"), { json })) as JobToken;
  }

  // -- waiting --------------------------------------------------------------------------

  /**
   * Until the job is terminal, then the job. One plain read first (so `onChange` learns the
   * current status at once), then long polls (`GET /v1/jobs/{id}?wait=30`) that the server
   * answers as soon as the status changes. An early answer with nothing changed means
   * something in between does not hold requests: then it polls with full-jitter backoff
   * (1 s doubling to 30 s); a long poll cut short halves the next one. 429, 502, 503 and 504
   * are ridden out, no sooner than Retry-After; other refusals are thrown. Until the first
   * answer the ordinary retry limit applies, so a wrong URL or key fails fast.
   */
  async wait(jobId: string, options: WaitOptions = {}): Promise<Job> {
    const backoff = new Backoff(this.random);
    const deadline = options.timeoutMs === undefined ? null : this.now() + options.timeoutMs;
    let longPollS = this.longPollS;
    let last: Job | undefined;
    for (;;) {
      let windowS = 0;
      if (last !== undefined) {
        windowS = longPollS;
        if (deadline !== null) windowS = Math.min(windowS, (deadline - this.now()) / 1000);
        windowS = Math.max(0, Math.floor(windowS * 10) / 10);
      }
      const started = this.now();
      let delayS: number | null;
      try {
        const response = await this.send("GET", jobPath(jobId), {
          ...(windowS ? { query: { wait: windowS } } : {}),
          timeoutMs: Math.max(this.timeoutMs, windowS * 1000 + NETWORK_SLACK_MS),
          signal: options.signal,
        });
        if (response.ok) {
          const job = (await response.json()) as Job;
          const changed = last === undefined || last.status !== job.status;
          last = job;
          if (changed) options.onChange?.(job);
          if (isTerminal(job)) return job;
          const elapsedS = (this.now() - started) / 1000;
          if (changed || (windowS >= 1 && elapsedS >= windowS / 2)) {
            backoff.reset(); // long polling works: ask again at once
            delayS = 0;
          } else {
            delayS = backoff.nextDelayS();
          }
        } else {
          const error = await problemOf(response);
          const transient = RETRY_STATUSES.has(error.status) || [502, 504].includes(error.status);
          if (!transient || (last === undefined && backoff.attempt >= this.maxRetries)) throw error;
          delayS = backoff.nextDelayS(error.retryAfterS);
        }
      } catch (error) {
        if (!(error instanceof APIConnectionError)) throw error;
        if (last === undefined && backoff.attempt >= this.maxRetries) throw error;
        if (windowS >= 1) longPollS = longPollS >= 2 ? longPollS / 2 : 0; // something cut it
        delayS = backoff.nextDelayS();
      }
      if (deadline !== null && this.now() + delayS * 1000 >= deadline) {
        throw new WaitTimeoutError(jobId, options.timeoutMs ?? 0, last);
      }
      if (delayS > 0) await this.sleepFor(delayS * 1000, options.signal);
    }
  }

  // -- streaming ------------------------------------------------------------------------

  /**
   * The job's output as its worker produces it, until the job is terminal: an async
   * iterator of deltas (`for await (const delta of client.stream(id))`). A dropped
   * connection is resumed where it broke (`starting_after` the last `seq` received), so no
   * text is lost or repeated. A delta with `reset` true starts a new attempt's text: discard
   * what came before (or, with `continuedChars` n, keep its first n characters and skip the
   * delta's first n, which repeat them). A job submitted without `stream: true` gives its
   * whole text as one delta when it finishes. Gives up after `maxReconnects` failures in a row.
   */
  async *stream(jobId: string, options: StreamOptions = {}): AsyncGenerator<OutputDelta, void, undefined> {
    const backoff = new Backoff(this.random);
    const maxReconnects = options.maxReconnects ?? 8;
    let last = options.startingAfter ?? 0;
    let reset = false;
    let continuedChars = 0; // of the reset: the new attempt repeats that much text first
    let done = false;
    for (;;) {
      let delayS: number | null = null;
      try {
        const response = await this.send("GET", jobPath(jobId, "/stream"), {
          ...(last > 0 ? { query: { starting_after: last } } : {}),
          headers: { Accept: "text/event-stream" },
          signal: options.signal,
          timeoutMs: this.timeoutMs, // until the answer starts; then the idle limit
        });
        if (!response.ok || response.body === null) {
          const error = await problemOf(response);
          delayS = this.retryDelayS(backoff, error, true);
          if (delayS === null) throw error;
        } else {
          for await (const sse of readEvents(response.body, STREAM_IDLE_MS)) {
            if (sse.event === "output.reset") {
              reset = true;
              const data = JSON.parse(sse.data) as { continued_chars?: unknown };
              continuedChars = typeof data.continued_chars === "number" ? data.continued_chars : 0;
            } else if (sse.event === "output.delta") {
              const data = JSON.parse(sse.data) as { seq: number; text: string };
              if (data.seq > last) {
                last = data.seq;
                backoff.reset();
                const delta: OutputDelta = {
                  text: data.text,
                  seq: data.seq,
                  reset,
                  continuedChars: reset ? continuedChars : 0,
                };
                reset = false;
                continuedChars = 0;
                yield delta;
              }
            } else if (sse.event.startsWith("job.")) {
              done = true;
            }
          }
        }
      } catch (error) {
        options.signal?.throwIfAborted(); // the caller's abort ends the stream, as it is
        if (!(error instanceof APIConnectionError)) throw error;
        if (backoff.attempt >= maxReconnects) throw error;
        delayS = backoff.nextDelayS();
      }
      if (delayS === null) {
        if (done) return; // the server ends the stream after the job's terminal event
        delayS = backoff.nextDelayS(); // closed early (a restart, a proxy): resume
      }
      await this.sleepFor(delayS * 1000, options.signal);
    }
  }

  // -- plumbing -------------------------------------------------------------------------

  /** One request with the client's retries; the parsed JSON of a 2xx, else the typed error. */
  private async request(method: string, path: string, options: RequestOptions = {}): Promise<unknown> {
    const idempotent = options.idempotent ?? true;
    const backoff = new Backoff(this.random);
    for (;;) {
      let delayS: number | null;
      try {
        const response = await this.send(method, path, options);
        if (response.ok) return await response.json();
        const error = await problemOf(response);
        delayS = this.retryDelayS(backoff, error, idempotent);
        if (delayS === null) throw error;
      } catch (error) {
        if (!(error instanceof APIConnectionError)) throw error;
        if (!idempotent || backoff.attempt >= this.maxRetries) throw error;
        delayS = backoff.nextDelayS();
      }
      await this.sleepFor(delayS * 1000, options.signal);
    }
  }

  /** Delay before repeating a refused request, or null to throw `error`. */
  private retryDelayS(backoff: Backoff, error: APIError, idempotent: boolean): number | null {
    if (backoff.attempt >= this.maxRetries) return null;
    const retryAfter = error.retryAfterS;
    if (retryAfter !== null && retryAfter > MAX_RETRY_AFTER_S) return null;
    const retryable =
      RETRY_STATUSES.has(error.status) ||
      error.code === "idempotency_key_in_progress" ||
      (idempotent && RETRY_IF_IDEMPOTENT.has(error.status));
    return retryable ? backoff.nextDelayS(retryAfter) : null;
  }

  /** One fetch: the answer (any status), or APIConnectionError / APITimeoutError. A caller's
   * abort is rethrown as it is. The timeout covers the answer's start, not its body. */
  private async send(method: string, path: string, options: RequestOptions): Promise<Response> {
    const url = new URL(this.baseUrl + path);
    const query = options.query ?? {};
    for (const [name, value] of Array.isArray(query) ? query : Object.entries(query)) {
      url.searchParams.append(name, String(value));
    }
    const headers: Record<string, string> = {
      Authorization: this.authorization,
      Accept: "application/json",
      ...options.headers,
    };
    let body: string | undefined;
    if (options.json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(options.json);
    }
    const controller = new AbortController();
    const outer = options.signal;
    const onAbort = (): void => controller.abort(outer?.reason);
    outer?.addEventListener("abort", onAbort, { once: true });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, options.timeoutMs ?? this.timeoutMs);
    try {
      outer?.throwIfAborted();
      return await this.fetcher(url, {
        method,
        headers,
        ...(body === undefined ? {} : { body }),
        signal: controller.signal,
        redirect: "error",
      });
    } catch (error) {
      if (outer?.aborted) throw outer.reason;
      if (timedOut) throw new APITimeoutError(`no answer from ${this.baseUrl} in time`, error);
      throw new APIConnectionError(`cannot reach ${this.baseUrl}: ${describe(error)}`, error);
    } finally {
      clearTimeout(timer);
      outer?.removeEventListener("abort", onAbort);
    }
  }
}

/** The query of `GET /v1/jobs` for a filter: a Date as RFC 3339 (UTC), a number as Unix
 * seconds, each metadata pair as `metadata[KEY]=VALUE`. */
function listQuery(filter: JobFilter): Array<[string, string]> {
  const query: Array<[string, string]> = [];
  const statuses = filter.status === undefined ? [] : [filter.status].flat();
  for (const status of statuses) query.push(["status", status]);
  if (filter.deadLettered !== undefined) query.push(["dead_lettered", String(filter.deadLettered)]);
  if (filter.model !== undefined) query.push(["model", filter.model]);
  if (filter.provider !== undefined) query.push(["provider", filter.provider]);
  for (const [name, moment] of [
    ["created_after", filter.createdAfter],
    ["created_before", filter.createdBefore],
  ] as const) {
    if (moment !== undefined) query.push([name, moment instanceof Date ? moment.toISOString() : String(moment)]);
  }
  for (const [key, value] of Object.entries(filter.metadata ?? {})) query.push([`metadata[${key}]`, value]);
  return query;
}

function jobPath(jobId: string, suffix = ""): string {
  return `/v1/jobs/${encodeURIComponent(jobId)}${suffix}`;
}

/** The typed error of a non-2xx answer (RFC 9457 problem+json, or anything else). */
async function problemOf(response: Response): Promise<APIError> {
  const text = await response.text().catch(() => "");
  let body: Problem;
  try {
    const parsed: unknown = JSON.parse(text);
    body = parsed !== null && typeof parsed === "object" ? (parsed as Problem) : { detail: text };
  } catch {
    body = { detail: text.slice(0, 200) || response.statusText };
  }
  return apiError(response.status, body, retryAfterS(response.headers));
}

function bulkResult(entry: Record<string, unknown>): BulkResult {
  if (entry["object"] !== "error") return entry as Job;
  const error = (entry["error"] ?? {}) as Problem["error"] & object;
  const status = Number(entry["status"] ?? 400);
  const code = String(entry["code"] ?? error.code ?? `http_${status}`);
  return apiError(status, {
    type: `/problems/${code}`,
    title: code,
    status,
    detail: String(error.message ?? code),
    code,
    error,
  });
}

/** A fresh Idempotency-Key (`op_` + 32 hex digits, as the Python client's operation ids). */
export function newIdempotencyKey(): string {
  const bytes = new Uint8Array(16);
  if (globalThis.crypto?.getRandomValues) {
    globalThis.crypto.getRandomValues(bytes);
  } else {
    for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(Math.random() * 256);
  }
  return "op_" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
}
