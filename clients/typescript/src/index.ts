/**
 * jobgate's TypeScript client: submit long-running AI calls as durable jobs, wait for them,
 * cancel them, stream their output (resuming by itself after a dropped connection), hand a
 * browser a job token instead of an API key, and verify jobgate's webhooks. ESM, typed, no
 * dependency beyond `fetch`; Node ≥ 18 and browsers.
 *
 *     import { JobGate } from "jobgate";
 *
 *     const jobgate = new JobGate({ baseUrl: "http://127.0.0.1:8000", apiKey: "jg_…" });
 *     const job = await jobgate.submit("/v1/chat/completions", {
 *       model: "sim-echo",
 *       messages: [{ role: "user", content: "hello" }],
 *     });
 *     console.log((await jobgate.wait(job.id)).result);
 */

export {
  JobGate,
  newIdempotencyKey,
  type BulkResult,
  type CreateJobTokenOptions,
  type IterJobsOptions,
  type JobGateOptions,
  type ListOptions,
  type StreamOptions,
  type WaitOptions,
} from "./client.js";
export {
  APIConnectionError,
  APIError,
  APITimeoutError,
  AuthenticationError,
  BadRequestError,
  ConflictError,
  InternalServerError,
  JobGateError,
  NotFoundError,
  PayloadTooLargeError,
  PermissionDeniedError,
  RateLimitError,
  ServiceUnavailableError,
  UnprocessableEntityError,
  WaitTimeoutError,
  WebhookVerificationError,
  type Problem,
} from "./errors.js";
export {
  isTerminal,
  TERMINAL_STATUSES,
  type Job,
  type JobError,
  type JobFilter,
  type JobPage,
  type JobStatus,
  type JobToken,
  type JobTokenScope,
  type JobWaiting,
  type OutputDelta,
  type SubmitItem,
  type SubmitOptions,
} from "./types.js";
export { verifyWebhook, type VerifyOptions, type WebhookHeaders } from "./webhooks.js";
