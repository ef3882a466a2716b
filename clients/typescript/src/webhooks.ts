/** Verifying a jobgate webhook on the receiving side (Standard Webhooks), with WebCrypto, so
 * the same code runs in Node ≥ 18, browsers, Deno and edge runtimes. */

import { WebhookVerificationError } from "./errors.js";

export interface VerifyOptions {
  /** How far `webhook-timestamp` may lie from now, either way (default 300 s). */
  toleranceS?: number;
  /** Now in Unix seconds (default: this host's clock); for tests. */
  now?: number;
}

export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

/**
 * Check a webhook's signature and timestamp, then answer its parsed JSON payload.
 *
 * `body` must be the raw request body exactly as received (bytes or its text: re-serialising
 * parsed JSON changes it). `headers` is a `Headers` or a plain object (names matched
 * case-insensitively, as Node's `req.headers`). `secret` is the endpoint's `whsec_…` secret.
 * Every `v1,` entry of `webhook-signature` is checked (one match is enough: during a secret
 * rotation jobgate signs with both secrets). Throws WebhookVerificationError.
 *
 * Deduplicate on the `webhook-id` header (also the payload's `id`): delivery is
 * at-least-once, so the same event may arrive more than once.
 */
export async function verifyWebhook(
  body: string | Uint8Array | ArrayBuffer,
  headers: WebhookHeaders,
  secret: string,
  options: VerifyOptions = {},
): Promise<unknown> {
  const raw = typeof body === "string" ? new TextEncoder().encode(body) : new Uint8Array(body);
  const msgId = header(headers, "webhook-id");
  const timestamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!msgId || !timestamp || !signatures) {
    throw new WebhookVerificationError(
      "missing webhook-id, webhook-timestamp or webhook-signature header",
    );
  }
  if (!/^\s*[+-]?\d+\s*$/.test(timestamp)) {
    throw new WebhookVerificationError("webhook-timestamp is not an integer");
  }
  const sentAt = Number.parseInt(timestamp, 10);
  const toleranceS = options.toleranceS ?? 300;
  const now = Math.floor(options.now ?? Date.now() / 1000);
  if (sentAt < now - toleranceS) throw new WebhookVerificationError("webhook timestamp is too old");
  if (sentAt > now + toleranceS) {
    throw new WebhookVerificationError("webhook timestamp is too far in the future");
  }
  const keyBytes = base64Decode(secret.startsWith("whsec_") ? secret.slice(6) : secret);
  if (keyBytes === null) {
    throw new WebhookVerificationError("the secret is not 'whsec_' followed by base64");
  }
  const subtle = await webCrypto();
  const key = await subtle.importKey("raw", keyBytes, { name: "HMAC", hash: "SHA-256" }, false, [
    "verify",
  ]);
  const signed = concat(new TextEncoder().encode(`${msgId}.${timestamp}.`), raw);
  let matched = false;
  for (const entry of signatures.split(/\s+/)) {
    const comma = entry.indexOf(",");
    if (comma < 0 || entry.slice(0, comma) !== "v1") continue;
    const signature = base64Decode(entry.slice(comma + 1));
    // subtle.verify compares in constant time; every entry is checked, so the time taken
    // does not say which one matched.
    if (signature !== null && (await subtle.verify("HMAC", key, signature, signed))) {
      matched = true;
    }
  }
  if (!matched) throw new WebhookVerificationError("no signature matches");
  try {
    return JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(raw));
  } catch {
    throw new WebhookVerificationError("the body is not JSON");
  }
}

function header(headers: WebhookHeaders, name: string): string | undefined {
  if (typeof Headers !== "undefined" && headers instanceof Headers) {
    return headers.get(name) ?? undefined;
  }
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() === name) return Array.isArray(value) ? value.join(" ") : value;
  }
  return undefined;
}

/** Standard base64 in its canonical form (padded, no stray bits); null for anything else. */
function base64Decode(text: string): Uint8Array<ArrayBuffer> | null {
  if (!/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(text)) return null;
  const binary = atob(text);
  if (btoa(binary) !== text) return null;
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function concat(head: Uint8Array, tail: Uint8Array): Uint8Array<ArrayBuffer> {
  const joined = new Uint8Array(head.length + tail.length);
  joined.set(head);
  joined.set(tail, head.length);
  return joined;
}

/** WebCrypto's SubtleCrypto: the global one (browsers, Node ≥ 19), else Node 18's module. */
async function webCrypto(): Promise<SubtleCrypto> {
  const global = globalThis.crypto;
  if (global?.subtle) return global.subtle;
  const specifier = "node:crypto"; // not a literal: a bundler for browsers leaves it alone
  const module = (await import(specifier)) as { webcrypto: { subtle: SubtleCrypto } };
  return module.webcrypto.subtle;
}
