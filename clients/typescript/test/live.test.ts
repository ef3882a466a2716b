/** The client against a real `jobgate serve` (SQLite, the simulated provider) started here:
 * submit, submitMany, get, wait, cancel, job tokens and the refusals of a token, typed errors,
 * and an output stream that resumes by itself after its connection is cut mid-stream. */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  AuthenticationError,
  BadRequestError,
  type Job,
  JobGate,
  NotFoundError,
  type OutputDelta,
  WaitTimeoutError,
} from "../dist/index.js";
import { CuttingProxy, eventually, type Served, serve } from "./support.js";

const CHAT = "/v1/chat/completions";

function chat(content: string, sim: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: "sim-echo", messages: [{ role: "user", content }], sim };
}

describe("against jobgate serve", () => {
  let server: Served;
  let client: JobGate;

  before(async () => {
    server = await serve();
    client = new JobGate({ baseUrl: server.url, apiKey: server.apiKey });
  });
  after(async () => {
    await server?.stop();
  });

  test("submit, then wait for the job to succeed", async () => {
    const job = await client.submit(CHAT, chat("hello from ts", { latency_s: 1 }), {
      metadata: { ticket: "42" },
    });
    assert.equal(job.status, "queued");
    assert.deepEqual(job.metadata, { ticket: "42" });
    const seen: string[] = [];
    const done = await client.wait(job.id, { onChange: (j) => seen.push(j.status) });
    assert.equal(done.status, "succeeded");
    assert.equal(seen.at(-1), "succeeded");
    assert.match(JSON.stringify(done.result), /hello from ts/);
    assert.equal((await client.get(job.id)).status, "succeeded");
  });

  test("list and iterJobs search by metadata, model, provider and creation time", async () => {
    const tag = { search: `ts-${Date.now()}-${Math.random()}` };
    const made: string[] = [];
    for (let n = 0; n < 3; n++) made.push((await client.submit(CHAT, chat(`n${n}`), { metadata: tag })).id);
    const found: string[] = [];
    for await (const job of client.iterJobs({ metadata: tag, model: "sim-echo", pageSize: 2 })) found.push(job.id);
    assert.deepEqual(found, [...made].reverse());
    const created = (await client.get(made[0] as string)).created_at;
    const since = await client.list({ metadata: tag, provider: "sim", createdAfter: new Date(created * 1000) });
    assert.deepEqual(new Set(since.data.map((j) => j.id)), new Set(made));
    assert.deepEqual((await client.list({ metadata: tag, createdBefore: created })).data, []);
    await assert.rejects(client.list({ metadata: { ["k".repeat(65)]: "v" } }), BadRequestError);
  });

  test("a submit repeated with its idempotency key answers the same job", async () => {
    const first = await client.submit(CHAT, chat("once"), { idempotencyKey: "ts-key-1" });
    const again = await client.submit(CHAT, chat("once"), { idempotencyKey: "ts-key-1" });
    assert.equal(again.id, first.id);
  });

  test("submit with waitS answers the finished job", async () => {
    const job = await client.submit(CHAT, chat("quick"), { waitS: 20 });
    assert.equal(job.status, "succeeded");
  });

  test("submitMany answers a job or an error per item, in order", async () => {
    const results = await client.submitMany([
      { endpoint: CHAT, body: chat("one") },
      { endpoint: CHAT, body: { model: "gpt-nothing", messages: [] } },
      { endpoint: CHAT, body: chat("three") },
    ]);
    assert.equal(results.length, 3);
    assert.equal((results[0] as Job).object, "job");
    assert.ok(results[1] instanceof BadRequestError);
    assert.equal(results[1].code, "model_not_found");
    assert.equal((results[2] as Job).object, "job");
  });

  test("cancel is idempotent and waits see it", async () => {
    const job = await client.submit(CHAT, chat("hold", { fail_with: "hang" }));
    const cancelled = await client.cancel(job.id);
    assert.ok(cancelled.cancel_requested_at !== null);
    assert.equal((await client.wait(job.id, { timeoutMs: 30_000 })).status, "cancelled");
    assert.equal((await client.cancel(job.id)).status, "cancelled");
  });

  test("wait gives up at its timeout with the last job seen", async () => {
    const job = await client.submit(CHAT, chat("slow", { fail_with: "hang" }));
    await assert.rejects(client.wait(job.id, { timeoutMs: 1500 }), (error: unknown) => {
      assert.ok(error instanceof WaitTimeoutError);
      assert.equal(error.jobId, job.id);
      assert.ok(["queued", "running"].includes(error.job?.status ?? ""));
      return true;
    });
    await client.cancel(job.id);
  });

  test("problems are typed errors carrying the problem's members", async () => {
    await assert.rejects(client.get("job_missing"), (error: unknown) => {
      assert.ok(error instanceof NotFoundError);
      assert.equal(error.status, 404);
      assert.equal(error.code, "not_found");
      assert.equal(error.type, "/problems/not_found");
      assert.equal(error.body.error?.type, "not_found_error");
      return true;
    });
    const stranger = new JobGate({ baseUrl: server.url, apiKey: "jg_unknown" });
    await assert.rejects(stranger.get("job_missing"), AuthenticationError);
    await assert.rejects(client.submit(CHAT, { model: "gpt-nothing", messages: [] }), (error) => {
      assert.ok(error instanceof BadRequestError);
      assert.equal(error.code, "model_not_found");
      assert.equal(error.param, "body.model");
      return true;
    });
  });

  test("a job token follows its job and nothing else", async () => {
    const job = await client.submit(CHAT, chat("for the browser", { latency_s: 1, chunks: 4 }), {
      stream: true,
    });
    const other = await client.submit(CHAT, chat("not yours"));
    const token = await client.createJobToken(job.id, { ttlS: 120 });
    assert.equal(token.object, "job_token");
    assert.match(token.token, /^jgt_/);
    assert.deepEqual(token.scopes, ["read", "stream"]);
    const browser = new JobGate({ baseUrl: server.url, token: token.token });
    let text = "";
    for await (const delta of browser.stream(job.id)) text += delta.text;
    assert.match(text, /for the browser/);
    assert.equal((await browser.wait(job.id)).status, "succeeded");
    await assert.rejects(browser.get(other.id), AuthenticationError);
    await assert.rejects(browser.cancel(job.id), AuthenticationError);
    await assert.rejects(browser.submit(CHAT, chat("no")), AuthenticationError);
    await assert.rejects(browser.createJobToken(job.id), AuthenticationError);

    const hanging = await client.submit(CHAT, chat("stop me", { fail_with: "hang" }));
    const canceller = await client.createJobToken(hanging.id, { scopes: ["cancel", "read"] });
    const phone = new JobGate({ baseUrl: server.url, token: canceller.token });
    assert.ok((await phone.cancel(hanging.id)).cancel_requested_at !== null);
    assert.equal((await phone.wait(hanging.id, { timeoutMs: 30_000 })).status, "cancelled");
  });

  test("a stream cut mid-way resumes where it broke, nothing lost or repeated", async () => {
    const proxy = new CuttingProxy(server.url);
    try {
      const job = await client.submit(CHAT, chat("resume me after the cut", { latency_s: 3, chunks: 12 }), {
        stream: true,
      });
      const through = new JobGate({
        baseUrl: await proxy.url,
        apiKey: server.apiKey,
        random: () => 0.05, // reconnect quickly
      });
      const deltas: OutputDelta[] = [];
      for await (const delta of through.stream(job.id)) {
        deltas.push(delta);
        if (deltas.length === 3) proxy.cut(); // mid-stream, from the network
      }
      assert.equal(proxy.cuts, 1);
      const seqs = deltas.map((d) => d.seq);
      assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b));
      assert.equal(new Set(seqs).size, seqs.length);
      assert.ok(deltas.length > 3, "deltas after the cut");
      const finished = await client.get(job.id);
      assert.equal(finished.status, "succeeded");
      const choices = finished.result?.["choices"] as Array<{ message: { content: string } }>;
      assert.equal(deltas.map((d) => d.text).join(""), choices[0]!.message.content);

      // Resuming by hand from a known seq gives exactly the rest.
      const rest: OutputDelta[] = [];
      for await (const delta of client.stream(job.id, { startingAfter: 5 })) rest.push(delta);
      assert.deepEqual(
        rest.map((d) => d.seq),
        seqs.filter((s) => s > 5),
      );
    } finally {
      await proxy.close();
    }
  });

  test("a stream of a job that never streamed gives its text once it finishes", async () => {
    const job = await client.submit(CHAT, chat("all at once"));
    const deltas: OutputDelta[] = [];
    for await (const delta of client.stream(job.id)) deltas.push(delta);
    assert.equal(deltas.length, 1);
    assert.match(deltas[0]!.text, /all at once/);
    await eventually(async () => (await client.get(job.id)).status === "succeeded", "succeeded");
  });

  test("a retry that continues says how much it repeats; kept or replaced, the text is whole", async () => {
    const cut = { fail_with: "stream_server_error", fail_times: 1, cut_at: 0.6, latency_s: 1 };
    const job = await client.submit(CHAT, chat("carry on after the cut", cut), {
      stream: true,
      on_retry: "continue",
    });
    let kept = "";
    let replaced = "";
    const resets: number[] = [];
    for await (const delta of client.stream(job.id)) {
      if (delta.reset) {
        resets.push(delta.continuedChars);
        const n = delta.continuedChars;
        kept = kept.slice(0, n) + delta.text.slice(n);
        replaced = delta.text;
      } else {
        kept += delta.text;
        replaced += delta.text;
      }
    }
    assert.equal(resets.length, 1);
    assert.ok(resets[0]! > 0);
    assert.equal(kept, "echo: carry on after the cut");
    assert.equal(replaced, kept);
  });
});
