/** verifyWebhook against the vectors the Python client's tests share
 * (tests/client/webhook_vectors.json): both clients accept and refuse the same webhooks, with
 * the same messages; and the forms a receiver hands it (a Headers, Node's header object,
 * bytes or text). */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { verifyWebhook, WebhookVerificationError } from "../dist/index.js";

interface Vector {
  name: string;
  secret: string;
  headers: Record<string, string>;
  body: string;
  payload?: unknown;
  error?: string;
}

// build/ -> the repository's tests/client/
const VECTORS = JSON.parse(
  readFileSync(new URL("../../../tests/client/webhook_vectors.json", import.meta.url), "utf8"),
) as { now: number; vectors: Vector[] };

for (const vector of VECTORS.vectors) {
  test(`vector: ${vector.name}`, async () => {
    const verify = (): Promise<unknown> =>
      verifyWebhook(vector.body, vector.headers, vector.secret, { now: VECTORS.now });
    if (vector.error === undefined) {
      assert.deepEqual(await verify(), vector.payload);
    } else {
      await assert.rejects(verify, (error: unknown) => {
        assert.ok(error instanceof WebhookVerificationError);
        assert.equal(error.message, vector.error);
        return true;
      });
    }
  });
}

test("bytes, a Headers object and Node's array-valued headers verify alike", async () => {
  const vector = VECTORS.vectors.find((v) => v.name === "one signature")!;
  const bytes = new TextEncoder().encode(vector.body);
  const options = { now: VECTORS.now };
  assert.deepEqual(await verifyWebhook(bytes, new Headers(vector.headers), vector.secret, options), vector.payload);
  assert.deepEqual(await verifyWebhook(bytes.buffer, vector.headers, vector.secret, options), vector.payload);
  const nodeStyle = { ...vector.headers, "webhook-signature": [vector.headers["webhook-signature"]!] };
  assert.deepEqual(await verifyWebhook(vector.body, nodeStyle, vector.secret, options), vector.payload);
});

test("the tolerance is the caller's, and the host clock is the default", async () => {
  const vector = VECTORS.vectors.find((v) => v.name === "301 s old")!;
  const wide = { now: VECTORS.now, toleranceS: 301 };
  assert.deepEqual(await verifyWebhook(vector.body, vector.headers, vector.secret, wide), vector.payload ?? JSON.parse(vector.body));
  // The vectors are signed in 2030: on this host's clock they are from the future.
  await assert.rejects(verifyWebhook(vector.body, vector.headers, vector.secret), /too far in the future/);
});

test("a signature spelt with stray base64 bits is not the signature", async () => {
  const vector = VECTORS.vectors.find((v) => v.name === "one signature")!;
  const signature = vector.headers["webhook-signature"]!; // v1,<43 chars>=: the last one holds 2 stray bits
  const last = signature.at(-2)!;
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const sibling = alphabet[alphabet.indexOf(last) ^ 1]!; // same 4 data bits, another stray bit
  const headers = { ...vector.headers, "webhook-signature": signature.slice(0, -2) + sibling + "=" };
  await assert.rejects(
    verifyWebhook(vector.body, headers, vector.secret, { now: VECTORS.now }),
    /no signature matches/,
  );
});
