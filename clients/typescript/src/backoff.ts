/** The client's retry schedule: exponential backoff with full jitter (1 s doubling to 30 s),
 * never sooner than the server's Retry-After (the Python client's `backoff.py`). */

export const BASE_S = 1;
export const CAP_S = 30;

/** A uniform delay in [0, min(cap, base * 2^(attempt-1))] seconds for the 1-based attempt. */
export function fullJitterS(attempt: number, random: () => number, baseS = BASE_S, capS = CAP_S): number {
  if (attempt < 1) throw new RangeError("attempt is 1-based");
  return random() * Math.min(capS, baseS * 2 ** Math.min(attempt - 1, 62));
}

/** Successive delays for one operation (a wait, a request's retries, a stream's reconnects).
 * Full jitter spreads clients that failed together; a Retry-After is a floor. */
export class Backoff {
  attempt = 0;

  constructor(private readonly random: () => number) {}

  nextDelayS(retryAfterS: number | null = null): number {
    this.attempt += 1;
    const delay = fullJitterS(this.attempt, this.random);
    return retryAfterS === null ? delay : Math.max(delay, retryAfterS);
  }

  reset(): void {
    this.attempt = 0;
  }
}

/** Retry-After in seconds: delta-seconds, or an HTTP date measured against the answer's own
 * Date header (so a skewed local clock does not matter); null when absent or unreadable. */
export function retryAfterS(headers: Headers): number | null {
  const value = headers.get("retry-after")?.trim();
  if (!value) return null;
  if (/^\d+$/.test(value)) return Number(value);
  const at = Date.parse(value);
  if (Number.isNaN(at)) return null;
  const date = Date.parse(headers.get("date") ?? "");
  const now = Number.isNaN(date) ? Date.now() : date;
  return Math.max(0, (at - now) / 1000);
}
