/**
 * Everything the client throws, keyed on the problem's code first and its HTTP status second
 * (the Python client's tree):
 *
 * JobGateError
 * ├── APIConnectionError            no answer: refused, reset, timed out
 * │   └── APITimeoutError
 * ├── WaitTimeoutError              wait()'s timeout ran out (`job`: the last one seen)
 * ├── WebhookVerificationError      a webhook is not authentic, or too old or too new
 * └── APIError                      the server answered a problem (status, code, retryAfterS…)
 *     ├── BadRequestError           400
 *     ├── AuthenticationError       401 invalid_api_key (an unknown key, or a refused token)
 *     ├── PermissionDeniedError     403
 *     ├── NotFoundError             404 (missing, or another tenant's)
 *     ├── ConflictError             409
 *     ├── PayloadTooLargeError      413
 *     ├── UnprocessableEntityError  422
 *     ├── RateLimitError            429 (retryAfterS)
 *     └── InternalServerError       5xx
 *         └── ServiceUnavailableError   503 (retryAfterS)
 */

import type { Job } from "./types.js";

/** Base of every error the jobgate client throws. */
export class JobGateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** The request got no answer (a refused connection, a reset, a network error, a timeout). */
export class APIConnectionError extends JobGateError {
  override readonly cause: unknown;

  constructor(message: string, cause?: unknown) {
    super(message);
    this.cause = cause;
  }
}

/** The server did not answer in time. */
export class APITimeoutError extends APIConnectionError {}

/** `wait()` ran out of time before the job finished; `job` is the last state seen. */
export class WaitTimeoutError extends JobGateError {
  constructor(
    readonly jobId: string,
    readonly timeoutMs: number,
    readonly job: Job | undefined,
  ) {
    super(`job ${jobId} still ${job?.status ?? "unknown"} after ${timeoutMs / 1000}s`);
  }
}

/** A webhook is not authentic, or too old or too far in the future to trust. */
export class WebhookVerificationError extends JobGateError {}

/** The members of an RFC 9457 problem the server answers, as the API writes them. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  code?: string;
  error?: { message?: string; type?: string; code?: string | null; param?: string | null };
  [member: string]: unknown;
}

/** The server answered with a problem (RFC 9457). Branch on `code` (`not_found`,
 * `queue_full`, …); `retryAfterS` is set when the server said when to come back. */
export class APIError extends JobGateError {
  readonly status: number;
  readonly code: string;
  readonly type: string;
  readonly title: string;
  readonly detail: string;
  readonly param: string | null;
  readonly retryAfterS: number | null;
  readonly body: Problem;

  constructor(status: number, body: Problem, retryAfterS: number | null = null) {
    const problemType = String(body.type ?? "about:blank");
    const fromType = problemType.startsWith("/problems/") ? problemType.slice(10) : "";
    const code = String(body.code ?? body.error?.code ?? fromType);
    const detail = String(body.detail ?? body.error?.message ?? body.title ?? status);
    super(`${detail} (${status} ${code || `http_${status}`})`);
    this.status = status;
    this.code = code || `http_${status}`;
    this.type = problemType;
    this.title = String(body.title ?? "");
    this.detail = detail;
    this.param = body.error?.param ?? null;
    this.retryAfterS = retryAfterS;
    this.body = body;
  }
}

export class BadRequestError extends APIError {}
export class AuthenticationError extends APIError {}
export class PermissionDeniedError extends APIError {}
export class NotFoundError extends APIError {}
export class ConflictError extends APIError {}
export class PayloadTooLargeError extends APIError {}
export class UnprocessableEntityError extends APIError {}
export class RateLimitError extends APIError {}
export class InternalServerError extends APIError {}
export class ServiceUnavailableError extends InternalServerError {}

type APIErrorClass = new (status: number, body: Problem, retryAfterS?: number | null) => APIError;

const BY_CODE: Record<string, APIErrorClass> = {
  invalid_api_key: AuthenticationError,
  not_found: NotFoundError,
  payload_too_large: PayloadTooLargeError,
  queue_full: RateLimitError,
  storage_unavailable: ServiceUnavailableError,
};
const BY_STATUS: Record<number, APIErrorClass> = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  422: UnprocessableEntityError,
  429: RateLimitError,
  503: ServiceUnavailableError,
};

/** The most specific error for a problem: by code, else by status, else by status class. */
export function apiError(status: number, body: Problem, retryAfterS: number | null = null): APIError {
  const probe = new APIError(status, body, retryAfterS);
  const cls =
    BY_CODE[probe.code] ?? BY_STATUS[status] ?? (status >= 500 ? InternalServerError : APIError);
  return new cls(status, body, retryAfterS);
}
