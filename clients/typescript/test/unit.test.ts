/** The client's decisions with a scripted `fetch` and a fake clock (no server, no sleeping):
 * retries and their limits, Retry-After as a floor, full jitter capped at 30 s, long polls
 * that fall back to polling, idempotency keys kept across retries, bulk calls of 1,000, the
 * error classes, and the SSE reader's line handling. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { Backoff, fullJitterS, retryAfterS } from "../dist/backoff.js";
import {
  APIConnectionError,
  APIError,
  ConflictError,
  InternalServerError,
  type Job,
  JobGate,
  NotFoundError,
  RateLimitError,
  ServiceUnavailableError,
  WaitTimeoutError,
} from "../dist/index.js";
import { readEvents } from "../dist/sse.js";

interface Sent {
  method: string;
  url: URL;
  headers: Record<string, string>;
  body: unknown;
  atMs: number;
}

type Answer = Response | Error | ((sent: Sent) => Response | Error);

/** A client whose fetch answers from `answers` in order, on a fake clock. */
function scripted(answers: Answer[], options: { random?: () => number; longPollS?: number } = {}) {
  let nowMs = 1_000_000;
  const sent: Sent[] = [];
  const slept: number[] = [];
  const client = new JobGate({
    baseUrl: "http://jobgate.test/",
    apiKey: "jg_test",
    random: options.random ?? (() => 1),
    longPollS: options.longPollS ?? 30,
    now: () => nowMs,
    sleep: async (ms) => {
      slept.push(ms / 1000);
      nowMs += ms;
    },
    fetch: async (input, init) => {
      const entry: Sent = {
        method: init?.method ?? "GET",
        url: new URL(String(input)),
        headers: Object.fromEntries(Object.entries(init?.headers ?? {})) as Record<string, string>,
        body: init?.body === undefined ? undefined : JSON.parse(String(init.body)),
        atMs: nowMs,
      };
      sent.push(entry);
      const next = answers.shift();
      if (next === undefined) throw new Error("no answer scripted");
      const answer = typeof next === "function" ? next(entry) : next;
      if (answer instanceof Error) throw answer;
      return answer;
    },
  });
  return { client, sent, slept, advance: (ms: number) => (nowMs += ms) };
}

function job(status: string, extra: Record<string, unknown> = {}): Response {
  return Response.json({ id: "job_1", object: "job", status, ...extra });
}

function problem(status: number, code: string, headers: Record<string, string> = {}): Response {
  const body = {
    type: `/problems/${code}`,
    title: "Refused",
    status,
    detail: `refused: ${code}`,
    code,
    error: { message: `refused: ${code}`, type: "x_error", code, param: "body.model" },
  };
  return new Response(JSON.stringify(body), {
    status,
    headers: { "Content-Type": "application/problem+json", ...headers },
  });
}

const dropped = (): Error => new TypeError("fetch failed");

test("full jitter doubles from 1 s and is capped at 30 s", () => {
  assert.equal(fullJitterS(1, () => 1), 1);
  assert.equal(fullJitterS(3, () => 1), 4);
  assert.equal(fullJitterS(6, () => 1), 30);
  assert.equal(fullJitterS(80, () => 0.5), 15);
  assert.equal(fullJitterS(4, () => 0), 0);
  const backoff = new Backoff(() => 0);
  assert.equal(backoff.nextDelayS(7), 7); // Retry-After is a floor
  assert.equal(backoff.attempt, 1);
});

test("Retry-After is read as seconds or as a date against the answer's Date", () => {
  assert.equal(retryAfterS(new Headers({ "retry-after": "12" })), 12);
  const headers = new Headers({
    "retry-after": "Wed, 21 Oct 2026 07:28:30 GMT",
    date: "Wed, 21 Oct 2026 07:28:00 GMT",
  });
  assert.equal(retryAfterS(headers), 30);
  assert.equal(retryAfterS(new Headers()), null);
  assert.equal(retryAfterS(new Headers({ "retry-after": "soon" })), null);
});

test("a submit is retried on 503 and a dropped connection with the same idempotency key", async () => {
  const { client, sent, slept } = scripted([
    problem(503, "storage_unavailable", { "Retry-After": "3" }),
    dropped(),
    job("queued"),
  ]);
  const answered = await client.submit("/v1/chat/completions", { model: "sim-echo" }, { priority: 2 });
  assert.equal(answered.status, "queued");
  assert.equal(sent.length, 3);
  const keys = sent.map((s) => s.headers["Idempotency-Key"]);
  assert.match(keys[0]!, /^op_[0-9a-f]{32}$/);
  assert.deepEqual(new Set(keys).size, 1);
  assert.deepEqual(sent[0]!.body, {
    endpoint: "/v1/chat/completions",
    body: { model: "sim-echo" },
    priority: 2,
  });
  assert.equal(sent[0]!.headers["Authorization"], "Bearer jg_test");
  assert.equal(sent[0]!.url.href, "http://jobgate.test/v1/jobs");
  assert.deepEqual(slept, [3, 2]); // never sooner than Retry-After; then 2^(2-1) x 1
});

test("retries stop at maxRetries and the typed error carries the problem", async () => {
  const { client, sent } = scripted([
    problem(429, "queue_full", { "Retry-After": "1" }),
    problem(429, "queue_full", { "Retry-After": "1" }),
    problem(429, "queue_full", { "Retry-After": "1" }),
  ]);
  await assert.rejects(client.get("job_1"), (error: unknown) => {
    assert.ok(error instanceof RateLimitError);
    assert.equal(error.status, 429);
    assert.equal(error.code, "queue_full");
    assert.equal(error.detail, "refused: queue_full");
    assert.equal(error.param, "body.model");
    assert.equal(error.retryAfterS, 1);
    return true;
  });
  assert.equal(sent.length, 3);
});

test("a Retry-After beyond a minute is not waited for by a single request", async () => {
  const { client, sent } = scripted([problem(503, "storage_unavailable", { "Retry-After": "90" })]);
  await assert.rejects(client.get("job_1"), ServiceUnavailableError);
  assert.equal(sent.length, 1);
});

test("refusals that are not transient are thrown at once, by class", async () => {
  for (const [status, code, cls] of [
    [404, "not_found", NotFoundError],
    [409, "job_purged", ConflictError],
    [500, "internal", InternalServerError],
    [418, "teapot", APIError],
  ] as const) {
    const { client, sent } = scripted([problem(status, code), job("queued")]);
    if (status === 500) {
      // An idempotent read is retried on 500; a second answer settles it.
      assert.equal((await client.get("job_1")).status, "queued");
      continue;
    }
    await assert.rejects(client.get("job_1"), cls);
    assert.equal(sent.length, 1);
  }
});

test("a body that is not a problem still gives a typed error", async () => {
  const { client } = scripted([new Response("<html>bad gateway</html>", { status: 404 })]);
  await assert.rejects(client.get("job_1"), (error: unknown) => {
    assert.ok(error instanceof NotFoundError);
    assert.equal(error.code, "http_404");
    assert.match(error.detail, /bad gateway/);
    return true;
  });
});

test("wait reads once, then long-polls and returns on the terminal answer", async () => {
  const { client, sent, slept } = scripted([
    job("queued"),
    job("running"),
    job("succeeded"),
  ]);
  const seen: string[] = [];
  const done = await client.wait("job_1", { onChange: (j: Job) => seen.push(j.status) });
  assert.equal(done.status, "succeeded");
  assert.deepEqual(seen, ["queued", "running", "succeeded"]);
  assert.equal(sent[0]!.url.searchParams.get("wait"), null);
  assert.equal(sent[1]!.url.searchParams.get("wait"), "30");
  assert.deepEqual(slept, []);
});

test("a long poll answered early with no change falls back to backoff polling", async () => {
  const { client, slept } = scripted(
    [job("queued"), job("queued"), job("queued"), job("queued"), job("succeeded")],
    { random: () => 1 },
  );
  await client.wait("job_1");
  assert.deepEqual(slept, [1, 2, 4]); // full jitter at its top: 1, 2, 4 s
});

test("wait honours Retry-After and rides out a dropped long poll, halving it", async () => {
  const { client, sent, slept } = scripted([
    job("queued"),
    problem(503, "storage_unavailable", { "Retry-After": "7" }),
    dropped(),
    job("succeeded"),
  ], { random: () => 0 });
  await client.wait("job_1");
  assert.deepEqual(slept, [7]); // jitter drew 0: Retry-After's 7 s, then 0 s after the drop
  assert.equal(sent[2]!.url.searchParams.get("wait"), "30");
  assert.equal(sent[3]!.url.searchParams.get("wait"), "15");
});

test("wait's backoff is capped at 30 s", async () => {
  const answers: Answer[] = [job("queued")];
  for (let i = 0; i < 9; i++) answers.push(job("queued"));
  answers.push(job("failed"));
  const { client, slept } = scripted(answers, { random: () => 1 });
  assert.equal((await client.wait("job_1")).status, "failed");
  assert.deepEqual(slept, [1, 2, 4, 8, 16, 30, 30, 30, 30]);
});

test("wait times out with the last job seen, before sleeping past its deadline", async () => {
  const { client } = scripted([job("queued"), job("queued"), job("queued")], { random: () => 1 });
  await assert.rejects(client.wait("job_1", { timeoutMs: 2500 }), (error: unknown) => {
    assert.ok(error instanceof WaitTimeoutError);
    assert.equal(error.job?.status, "queued");
    return true;
  });
});

test("wait fails fast on a server it never reached", async () => {
  const { client, sent } = scripted([dropped(), dropped(), dropped()]);
  await assert.rejects(client.wait("job_1"), APIConnectionError);
  assert.equal(sent.length, 3);
});

test("submitMany sends 1,000 items per call and answers each in order", async () => {
  const answer = (sent: Sent): Response => {
    const jobs = (sent.body as { jobs: Array<{ idempotency_key: string }> }).jobs;
    return Response.json({
      data: jobs.map((item, i) =>
        i === 1
          ? { object: "error", status: 400, code: "model_not_found", error: { message: "no", param: "body.model" } }
          : { id: item.idempotency_key, object: "job", status: "queued" },
      ),
    });
  };
  const { client, sent } = scripted([answer, answer]);
  const items = Array.from({ length: 1001 }, (_, i) => ({
    endpoint: "/v1/chat/completions",
    body: { model: "sim-echo" },
    ...(i === 0 ? { idempotency_key: "mine" } : {}),
  }));
  const results = await client.submitMany(items);
  assert.equal(sent.length, 2);
  assert.equal((sent[0]!.body as { jobs: unknown[] }).jobs.length, 1000);
  assert.equal((sent[1]!.body as { jobs: unknown[] }).jobs.length, 1);
  assert.equal(results.length, 1001);
  assert.equal((results[0] as Job).id, "mine");
  assert.ok(results[1] instanceof APIError && results[1].code === "model_not_found");
  assert.equal(results[1].param, "body.model");
});

test("a client takes an API key or a job token, exactly one", () => {
  assert.throws(() => new JobGate({ baseUrl: "http://x" }), TypeError);
  assert.throws(() => new JobGate({ baseUrl: "http://x", apiKey: "a", token: "b" }), TypeError);
  assert.throws(() => new JobGate({ baseUrl: "http://x", apiKey: "a", longPollS: 61 }), RangeError);
});

test("a job token is sent as the Bearer credential", async () => {
  const { sent } = scripted([]);
  const withToken = new JobGate({
    baseUrl: "http://jobgate.test",
    token: "jgt_abc.def",
    fetch: async (input, init) => {
      sent.push({
        method: "GET",
        url: new URL(String(input)),
        headers: init?.headers as Record<string, string>,
        body: undefined,
        atMs: 0,
      });
      return job("running");
    },
  });
  await withToken.get("job 1/x");
  assert.equal(sent[0]!.headers["Authorization"], "Bearer jgt_abc.def");
  assert.equal(sent[0]!.url.pathname, "/v1/jobs/job%201%2Fx");
});

function body(chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
  });
}

test("the SSE reader handles any line ending, split chunks, comments and multi-line data", async () => {
  const events = [];
  const stream = body([
    ": keep-alive\n\n",
    "id: 1\r\nevent: output.delta\r\ndata: {\"seq\":1,",
    "\"text\":\"a\"}\r",
    "\n\r\nevent: job.succeeded\rdata: line one\rdata: line two\r\r",
    "data: no blank line at the end",
  ]);
  for await (const event of readEvents(stream, 1000)) events.push(event);
  assert.deepEqual(events, [
    { event: "output.delta", data: '{"seq":1,"text":"a"}', id: "1" },
    { event: "job.succeeded", data: "line one\nline two", id: "1" },
  ]);
});

test("the SSE reader gives up on a silent stream", async () => {
  const silent = new ReadableStream<Uint8Array>({ start() {} });
  await assert.rejects(async () => {
    for await (const _ of readEvents(silent, 50)) assert.fail("no event");
  }, /no data on the stream/);
});

test("list sends the search, iterJobs follows last_id with the same filters", async () => {
  const page = (ids: string[], more: boolean): Response =>
    Response.json({ object: "list", data: ids.map((id) => ({ id })), has_more: more, last_id: ids.at(-1) ?? null });
  const { client, sent } = scripted([page(["job_3", "job_2"], true), page(["job_1"], false), page([], false)]);
  const filter = {
    status: ["queued", "running"] as Array<"queued" | "running">,
    model: "gpt-4.1-mini",
    provider: "openai",
    createdAfter: new Date(Date.UTC(2026, 11, 1, 14)),
    createdBefore: 1796140800,
    metadata: { user: "alice", "a&b": "c=d" },
  };
  const ids: string[] = [];
  for await (const found of client.iterJobs({ ...filter, pageSize: 2 })) ids.push(found.id);
  assert.deepEqual(ids, ["job_3", "job_2", "job_1"]);
  assert.equal(sent.length, 2);
  for (const { url } of sent) {
    assert.deepEqual(url.searchParams.getAll("status"), ["queued", "running"]);
    assert.equal(url.searchParams.get("model"), "gpt-4.1-mini");
    assert.equal(url.searchParams.get("provider"), "openai");
    assert.equal(url.searchParams.get("created_after"), "2026-12-01T14:00:00.000Z");
    assert.equal(url.searchParams.get("created_before"), "1796140800");
    assert.equal(url.searchParams.get("metadata[user]"), "alice");
    assert.equal(url.searchParams.get("metadata[a&b]"), "c=d");
    assert.equal(url.searchParams.get("limit"), "2");
  }
  assert.equal(sent[0]?.url.searchParams.get("after"), null);
  assert.equal(sent[1]?.url.searchParams.get("after"), "job_2");
  const one = await client.list({ deadLettered: true, after: "job_9", limit: 5 });
  assert.equal(one.has_more, false);
  assert.equal(sent[2]?.url.search, "?dead_lettered=true&after=job_9&limit=5");
});

test("iterJobs pages on through a search's partial pages, empty ones too", async () => {
  const page = (ids: string[], more: boolean, last: string | null): Response =>
    Response.json({ object: "list", data: ids.map((id) => ({ id })), has_more: more, last_id: last });
  const { client, sent } = scripted([
    page(["job_9"], true, "job_7"),
    page([], true, "job_4"),
    page(["job_2"], false, "job_2"),
  ]);
  const ids: string[] = [];
  for await (const found of client.iterJobs({ model: "m", pageSize: 2 })) ids.push(found.id);
  assert.deepEqual(ids, ["job_9", "job_2"]);
  assert.deepEqual(
    sent.map(({ url }) => url.searchParams.get("after")),
    [null, "job_7", "job_4"],
  );
});
