/** Server-sent events read from a fetch body (the `text/event-stream` format), with an idle
 * limit: the server sends a comment at least every 15 s, so a longer silence is a dead link. */

import { APIConnectionError, APITimeoutError } from "./errors.js";

export interface ServerSentEvent {
  event: string;
  data: string;
  id: string | null;
}

/** The events of `body` in order, until it ends. Throws APITimeoutError when nothing at all
 * (not even a comment) arrives for `idleMs`. */
export async function* readEvents(
  body: ReadableStream<Uint8Array>,
  idleMs: number,
): AsyncGenerator<ServerSentEvent, void, undefined> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const lines = new LineSplitter();
  let event = "";
  let data: string[] = [];
  let id: string | null = null;
  try {
    for (;;) {
      const chunk = await readWithin(reader, idleMs);
      const text = chunk.done ? decoder.decode() : decoder.decode(chunk.value, { stream: true });
      for (const line of lines.feed(text, chunk.done)) {
        if (line === "") {
          if (data.length > 0 || event !== "") {
            yield { event: event || "message", data: data.join("\n"), id };
          }
          event = "";
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue; // a comment (the server's keep-alive)
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") event = value;
        else if (field === "data") data.push(value);
        else if (field === "id" && !value.includes("\0")) id = value;
      }
      if (chunk.done) return;
    }
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => undefined);
  }
}

async function readWithin(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  idleMs: number,
): Promise<ReadableStreamReadResult<Uint8Array>> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const idle = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(new APITimeoutError(`no data on the stream for ${idleMs / 1000} s`));
    }, idleMs);
  });
  const read = reader.read().catch((error: unknown) => {
    // The connection broke mid-stream (undici's "terminated", a browser's network error).
    throw new APIConnectionError("the stream's connection broke", error);
  });
  try {
    return await Promise.race([read, idle]);
  } finally {
    clearTimeout(timer);
  }
}

/** Splits text into lines at CRLF, LF or CR, across chunk boundaries. */
class LineSplitter {
  private rest = "";
  private pendingCr = false;

  *feed(text: string, end: boolean): Generator<string> {
    let buffer = this.rest + text;
    if (this.pendingCr && buffer.startsWith("\n")) buffer = buffer.slice(1);
    this.pendingCr = false;
    let start = 0;
    for (let i = 0; i < buffer.length; i++) {
      const c = buffer[i];
      if (c === "\n" || c === "\r") {
        yield buffer.slice(start, i);
        if (c === "\r") {
          if (i + 1 < buffer.length) {
            if (buffer[i + 1] === "\n") i++;
          } else {
            this.pendingCr = true;
          }
        }
        start = i + 1;
      }
    }
    this.rest = buffer.slice(start);
    if (end && this.rest !== "") {
      yield this.rest;
      this.rest = "";
    }
  }
}
