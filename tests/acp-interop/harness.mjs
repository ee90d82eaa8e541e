// Test harness: a real ACP client (the official TypeScript SDK) driving a `crow acp` process
// whose model is crow-testkit's mock, scripted per test over the mock's HTTP control endpoint.
//
// Environment: CROW_BIN (the crow binary), MOCK_URL (the mock's base URL, http://127.0.0.1:PORT).

import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, existsSync, rmSync, realpathSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

export const CROW_BIN = process.env.CROW_BIN;
export const MOCK_URL = process.env.MOCK_URL;
if (!CROW_BIN || !MOCK_URL) {
  throw new Error("set CROW_BIN and MOCK_URL (the Rust test acp_interop does)");
}

/** Replaces the mock's script (and forgets its recorded requests). */
export async function script(scenario) {
  const res = await fetch(`${MOCK_URL}/_mock/scenario`, {
    method: "POST",
    body: JSON.stringify({ chunk_size: 8, ...scenario }),
  });
  if (res.status !== 204) throw new Error(`mock refused the scenario: ${await res.text()}`);
}

/** What the model was sent, request by request. */
export async function mockRequests() {
  const res = await fetch(`${MOCK_URL}/_mock/requests`);
  return res.json();
}

/** A fresh project directory whose .crow/config.toml points crow at the mock. */
export function project() {
  const dir = mkdtempSync(join(tmpdir(), "crow-acp-"));
  mkdirSync(join(dir, ".crow"));
  mkdirSync(join(dir, ".git"));
  writeFileSync(
    join(dir, ".crow", "config.toml"),
    [
      'provider = "mock"',
      "[providers.mock]",
      'type = "openai"',
      `base_url = "${MOCK_URL}/v1"`,
      'model = "mock-model"',
      "max_retries = 0",
      "[providers.mock.models.mock-model]",
      "context_window = 32000",
      "",
    ].join("\n"),
  );
  // The project's config sets an endpoint, so the user (the test's HOME) trusts it.
  const userConfig = join(dir, ".home", ".config", "crow");
  mkdirSync(userConfig, { recursive: true });
  writeFileSync(
    join(userConfig, "config.toml"),
    `[projects.${JSON.stringify(realpathSync(dir))}]\ntrusted = true\n`,
  );
  return dir;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A deadline that fails only a hung test: no test asserts how fast something happened. */
export const HUNG_MS = 60000;

/** Polls `cond` until it holds; throws naming `what` after `ms`. */
export async function until(cond, what, ms = HUNG_MS) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`never: ${what}`);
    await sleep(10);
  }
}

/** `promise`, or an error naming `what` if it has not settled after `ms`. */
export async function within(promise, what, ms = HUNG_MS) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`never: ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Runs commands for `terminal/*`, like an editor's terminal panel. */
class Terminals {
  constructor() {
    this.next = 1;
    this.all = new Map();
    this.calls = [];
  }
  create(params) {
    this.calls.push(["create", params]);
    const id = `term-${this.next++}`;
    const env = { ...process.env };
    for (const { name, value } of params.env ?? []) env[name] = value;
    const child = spawn(params.command, params.args ?? [], {
      cwd: params.cwd ?? undefined,
      env,
      detached: true,
    });
    const t = { child, output: "", exit: null, limit: params.outputByteLimit ?? null };
    const append = (chunk) => {
      t.output += chunk.toString();
      if (t.limit && Buffer.byteLength(t.output) > t.limit) {
        t.output = t.output.slice(t.output.length - t.limit);
        t.truncated = true;
      }
    };
    child.stdout.on("data", append);
    child.stderr.on("data", append);
    t.exited = new Promise((resolve) =>
      child.on("exit", (code, signal) => {
        t.exit = { exitCode: code, signal };
        resolve(t.exit);
      }),
    );
    this.all.set(id, t);
    return { terminalId: id };
  }
  get(id) {
    const t = this.all.get(id);
    if (!t) throw acp.RequestError.invalidParams(undefined, `no terminal ${id}`);
    return t;
  }
  output({ terminalId }) {
    this.calls.push(["output", terminalId]);
    const t = this.get(terminalId);
    return { output: t.output, truncated: !!t.truncated, exitStatus: t.exit };
  }
  async waitForExit({ terminalId }) {
    this.calls.push(["wait", terminalId]);
    return await this.get(terminalId).exited;
  }
  kill({ terminalId }) {
    this.calls.push(["kill", terminalId]);
    const t = this.get(terminalId);
    if (!t.exit) {
      try {
        process.kill(-t.child.pid, "SIGKILL");
      } catch {}
    }
    return {};
  }
  release({ terminalId }) {
    this.calls.push(["release", terminalId]);
    const t = this.get(terminalId);
    if (!t.exit) {
      try {
        process.kill(-t.child.pid, "SIGKILL");
      } catch {}
    }
    this.all.delete(terminalId);
    return {};
  }
}

/** The environment crow runs with in project `dir`: its own HOME, so its own store. */
function crowEnv(dir) {
  const home = join(dir, ".home");
  return {
    PATH: process.env.PATH,
    HOME: home,
    XDG_CONFIG_HOME: join(home, ".config"),
    XDG_DATA_HOME: join(home, ".local/share"),
    CROW_LOG: process.env.CROW_LOG ?? "warn",
    NO_COLOR: "1",
    // Set by the Rust runner where the kernel offers no sandbox.
    ...(process.env.CROW_SANDBOX_MODE ? { CROW_SANDBOX_MODE: process.env.CROW_SANDBOX_MODE } : {}),
  };
}

/** Runs a crow CLI command (`sessions show ID`, ...) on the store of project `dir`. */
export function crowCli(dir, args) {
  const run = spawnSync(CROW_BIN, args, { cwd: dir, env: crowEnv(dir), encoding: "utf8" });
  if (run.status !== 0) throw new Error(`crow ${args.join(" ")} failed: ${run.stderr}`);
  return run.stdout;
}

/**
 * Starts `crow acp` in `dir` and connects a client to it.
 * options: { fs: bool, terminal: bool, buffers: Map(path → text), permission: fn(params) → optionKind
 *   or optionId, env: extra environment }
 */
export function startCrow(dir, options = {}) {
  const child = spawn(CROW_BIN, ["acp"], {
    cwd: dir,
    env: { ...crowEnv(dir), ...(options.env ?? {}) },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stderr = "";
  // Everything crow wrote, as raw text, for what the SDK does not hand on ($/ methods,
  // replies without an id).
  let stdout = "";
  child.stdout.on("data", (d) => {
    stdout += d.toString();
  });
  child.stderr.on("data", (d) => {
    stderr += d.toString();
    if (process.env.CROW_ACP_TEST_VERBOSE) process.stderr.write(d);
  });
  const exited = new Promise((resolve) =>
    child.on("exit", (code, signal) => resolve({ code, signal })),
  );

  const crow = {
    child,
    exited,
    stderr: () => stderr,
    stdout: () => stdout,
    updates: [],
    log: [], // every update and response, in arrival order
    permissionRequests: [],
    reads: [],
    writes: [],
    terminals: new Terminals(),
    buffers: options.buffers ?? new Map(),
    permission: options.permission ?? (() => "allow_once"),
  };

  const app = acp
    .client({ name: "crow-interop-test" })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      crow.updates.push(params);
      crow.log.push({ kind: "update", params, at: performance.now() });
    })
    .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
      crow.permissionRequests.push(params);
      crow.log.push({ kind: "permission", params, at: performance.now() });
      const kind = await crow.permission(params);
      if (kind === "cancelled") return { outcome: { outcome: "cancelled" } };
      // An option kind, or an option id (two options may share a kind).
      const option = params.options.find((o) => o.kind === kind) ?? params.options.find((o) => o.optionId === kind);
      return { outcome: { outcome: "selected", optionId: option.optionId } };
    });
  if (options.fs) {
    app
      .onRequest(acp.methods.client.fs.readTextFile, ({ params }) => {
        crow.reads.push(params);
        if (crow.buffers.has(params.path)) return { content: crow.buffers.get(params.path) };
        if (!existsSync(params.path)) {
          // An unusual shape for "missing", on purpose: crow must not depend on it.
          throw acp.RequestError.internalError({ reason: "entity not found" });
        }
        return { content: readFileSync(params.path, "utf8") };
      })
      .onRequest(acp.methods.client.fs.writeTextFile, ({ params }) => {
        crow.writes.push(params);
        writeFileSync(params.path, params.content);
        crow.buffers.set(params.path, params.content);
        return {};
      });
  }
  if (options.terminal) {
    const t = crow.terminals;
    app
      .onRequest(acp.methods.client.terminal.create, ({ params }) => t.create(params))
      .onRequest(acp.methods.client.terminal.output, ({ params }) => t.output(params))
      .onRequest(acp.methods.client.terminal.waitForExit, ({ params }) => t.waitForExit(params))
      .onRequest(acp.methods.client.terminal.kill, ({ params }) => t.kill(params))
      .onRequest(acp.methods.client.terminal.release, ({ params }) => t.release(params));
  }
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const connection = app.connect(stream);
  crow.connection = connection;
  crow.agent = connection.agent;

  crow.initialize = () =>
    crow.agent.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: {
        fs: { readTextFile: !!options.fs, writeTextFile: !!options.fs },
        terminal: !!options.terminal,
        ...(options.terminalOutput ? { _meta: { terminal_output: true } } : {}),
        ...(options.notices ? { session: { notices: {} } } : {}),
      },
      clientInfo: { name: "crow-interop-test", version: "0.0.0" },
    });
  crow.newSession = (cwd = dir, mcpServers = []) =>
    crow.agent.request(acp.methods.agent.session.new, { cwd, mcpServers });
  crow.prompt = async (sessionId, prompt) => {
    const blocks = typeof prompt === "string" ? [{ type: "text", text: prompt }] : prompt;
    const response = await crow.agent.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: blocks,
    });
    crow.log.push({ kind: "response", response, at: performance.now() });
    return response;
  };
  crow.cancel = (sessionId) => crow.agent.notify(acp.methods.agent.session.cancel, { sessionId });
  /** Waits until an update matching `pred` arrived (by a deadline that fails a hung test). */
  crow.waitFor = async (pred, ms = HUNG_MS) => {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = crow.updates.find(pred);
      if (found) return found;
      if (Date.now() > deadline) {
        throw new Error(`no such update; got ${JSON.stringify(crow.updates.map((u) => u.update.sessionUpdate))}\n${stderr}`);
      }
      await sleep(5);
    }
  };
  crow.kinds = (sessionId) =>
    crow.updates.filter((u) => u.sessionId === sessionId).map((u) => u.update.sessionUpdate);
  crow.stop = async () => {
    child.stdin.end();
    const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
    await exited;
    clearTimeout(timer);
  };
  return crow;
}

export function cleanup(dir) {
  rmSync(dir, { recursive: true, force: true });
}

/** The text of every chunk of a kind, joined. */
export function joined(crow, sessionId, kind) {
  return crow.updates
    .filter((u) => u.sessionId === sessionId && u.update.sessionUpdate === kind)
    .map((u) => u.update.content.text)
    .join("");
}
