/** What the live tests run against: a real `jobgate serve` (SQLite, the simulated provider) on
 * a free port, started here, and a TCP proxy in front of it that can cut every connection. */

import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket, connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

const START_TIMEOUT_MS = 60_000;

export interface Served {
  url: string;
  apiKey: string;
  stop(): Promise<void>;
}

/** `jobgate serve` in a temporary directory ($JOBGATE_COMMAND, default `jobgate`, on PATH). */
export async function serve(env: Record<string, string> = {}): Promise<Served> {
  const home = mkdtempSync(join(tmpdir(), "jobgate-ts-"));
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.startsWith("JOBGATE_")),
  );
  const command = (process.env["JOBGATE_COMMAND"] ?? "jobgate").split(" ");
  const child = spawn(command[0]!, [...command.slice(1), "serve", "--port", "0"], {
    cwd: home,
    env: {
      ...clean,
      XDG_CONFIG_HOME: join(home, "config"),
      JOBGATE_DATABASE_URL: `sqlite:///${join(home, "jobgate.db")}`,
      JOBGATE_LOG_LEVEL: "warning",
      ...env,
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const { url, apiKey } = await banner(child);
  return {
    url,
    apiKey,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        child.kill("SIGTERM");
        await exited;
      }
      rmSync(home, { recursive: true, force: true });
    },
  };
}

function banner(child: ChildProcess): Promise<{ url: string; apiKey: string }> {
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    let url = "";
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error("jobgate serve did not start in time"));
    }, START_TIMEOUT_MS);
    child.once("exit", (code) => reject(new Error(`jobgate serve exited early (${code})`)));
    lines.on("line", (line) => {
      const listening = /listening on (http:\/\/\S+)/.exec(line);
      if (listening) url = listening[1]!;
      const key = /^\s+(jg_\S+)\s*$/.exec(line);
      if (key && url) {
        clearTimeout(timer);
        lines.removeAllListeners("line");
        child.stdout!.resume(); // keep draining what it prints later
        resolve({ url, apiKey: key[1]! });
      }
    });
  });
}

/** A TCP proxy to `target` (http://host:port) whose connections `cut()` resets at once. */
export class CuttingProxy {
  readonly url: Promise<string>;
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  cuts = 0;

  constructor(target: string) {
    const { hostname, port } = new URL(target);
    this.server = createServer((client) => {
      const upstream = connect(Number(port), hostname);
      for (const socket of [client, upstream]) {
        this.sockets.add(socket);
        socket.on("close", () => this.sockets.delete(socket));
        socket.on("error", () => undefined);
      }
      client.pipe(upstream).pipe(client);
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
    this.url = new Promise((resolve) => {
      this.server.listen(0, "127.0.0.1", () => {
        const address = this.server.address();
        if (address === null || typeof address === "string") throw new Error("no port");
        resolve(`http://127.0.0.1:${address.port}`);
      });
    });
  }

  /** Reset every open connection (the client sees a dropped stream). */
  cut(): void {
    this.cuts += 1;
    for (const socket of this.sockets) socket.resetAndDestroy();
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

/** Poll `condition` until it holds, with a generous deadline (the machine may be loaded). */
export async function eventually(
  condition: () => Promise<boolean> | boolean,
  what: string,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
