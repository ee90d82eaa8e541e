// `crow acp` driven by the official ACP TypeScript SDK as a real client. Tests run one after
// another: they share the mock model, which each test scripts for itself.

import { test } from "node:test";
import assert from "node:assert/strict";
import { appendFileSync, existsSync, readFileSync, readdirSync, readlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import { script, mockRequests, project, startCrow, cleanup, sleep, until, within, joined, crowCli } from "./harness.mjs";

/** Opens crow in a fresh project: initialize + session/new. */
async function open(options) {
  const dir = project();
  const crow = startCrow(dir, options);
  const init = await crow.initialize();
  const session = await crow.newSession();
  return { dir, crow, init, session, id: session.sessionId };
}

async function close({ dir, crow }) {
  await crow.stop();
  cleanup(dir);
}

test("initialize: agent info, capabilities, unknown methods", async () => {
  const dir = project();
  const crow = startCrow(dir);
  try {
    const init = await crow.initialize();
    assert.equal(init.protocolVersion, 1);
    assert.equal(init.agentInfo.name, "crow");
    assert.match(init.agentInfo.version, /^\d+\.\d+\.\d+/);
    const caps = init.agentCapabilities;
    assert.equal(caps.promptCapabilities.embeddedContext, true);
    assert.equal(typeof caps.loadSession, "boolean");
    await assert.rejects(crow.agent.request("crow/no_such_method", {}), (e) => e.code === -32601);
  } finally {
    await crow.stop();
    cleanup(dir);
  }
});

test("session/new: modes, model option, slash commands", async () => {
  const s = await open();
  try {
    assert.match(s.id, /^[0-9a-f-]{36}$/);
    assert.equal(s.session.modes.currentModeId, "build");
    assert.ok(s.session.modes.availableModes.some((m) => m.id === "build-judge"));
    const model = s.session.configOptions.find((o) => o.category === "model");
    assert.equal(model.currentValue, "mock/mock-model");
    const commands = await s.crow.waitFor((u) => u.update.sessionUpdate === "available_commands_update");
    assert.ok(commands.update.availableCommands.some((c) => c.name === "model"));

    // A slash command is answered without the model.
    await script({ steps: [] });
    const res = await s.crow.prompt(s.id, "/model");
    assert.equal(res.stopReason, "end_turn");
    assert.match(joined(s.crow, s.id, "agent_message_chunk"), /mock\/mock-model.*\(current\)/);
    assert.equal((await mockRequests()).length, 0);
  } finally {
    await close(s);
  }
});

test("prompt: streaming, tool calls with diffs and output, plan, usage", async () => {
  await script({
    steps: [
      {
        reply: {
          thinking: "I should look first.",
          text: "Let me write the file.",
          tool_calls: [
            { name: "write_file", arguments: { path: "hello.txt", content: "hi\n" } },
            {
              name: "todo_write",
              arguments: { todos: [{ content: "write hello", status: "completed" }, { content: "check it", status: "in_progress" }] },
            },
          ],
        },
      },
      { reply: { tool_calls: [{ name: "bash", arguments: { command: "cat hello.txt" } }] } },
      { reply: { text: "Done: hello.txt says hi." } },
    ],
  });
  const s = await open();
  try {
    const res = await s.crow.prompt(s.id, [
      { type: "text", text: "Create hello.txt. See " },
      { type: "resource", resource: { uri: `file://${s.dir}/notes.md`, text: "be brief" } },
    ]);
    assert.equal(res.stopReason, "end_turn");
    assert.ok(res.usage.totalTokens > 0 && res.usage.inputTokens > 0, "the turn's usage");
    assert.equal(readFileSync(join(s.dir, "hello.txt"), "utf8"), "hi\n");

    assert.equal(joined(s.crow, s.id, "agent_thought_chunk"), "I should look first.");
    assert.match(joined(s.crow, s.id, "agent_message_chunk"), /^Let me write the file\.Done: hello\.txt says hi\.$/);

    const calls = s.crow.updates.filter((u) => u.update.sessionUpdate === "tool_call").map((u) => u.update);
    const write = calls.find((c) => c.title === "Write hello.txt");
    assert.equal(write.kind, "edit");
    assert.deepEqual(write.rawInput, { path: "hello.txt", content: "hi\n" });
    assert.equal(write.locations[0].path, join(s.dir, "hello.txt"));
    const done = s.crow.updates.find(
      (u) => u.update.sessionUpdate === "tool_call_update" && u.update.toolCallId === write.toolCallId && u.update.status === "completed",
    ).update;
    const diff = done.content.find((c) => c.type === "diff");
    assert.equal(diff.path, join(s.dir, "hello.txt"));
    assert.equal(diff.newText, "hi\n");
    assert.ok(diff.oldText == null, "a new file has no old text");

    const bash = calls.find((c) => c.kind === "execute");
    assert.equal(bash.title, "`cat hello.txt`");
    const bashDone = s.crow.updates.find(
      (u) =>
        u.update.sessionUpdate === "tool_call_update" &&
        u.update.toolCallId === bash.toolCallId &&
        ["completed", "failed"].includes(u.update.status),
    ).update;
    assert.equal(bashDone.status, "completed");
    assert.match(bashDone.content[0].content.text, /hi/);

    const plan = (await s.crow.waitFor((u) => u.update.sessionUpdate === "plan")).update;
    assert.deepEqual(
      plan.entries.map((e) => [e.content, e.status]),
      [["write hello", "completed"], ["check it", "in_progress"]],
    );
    assert.ok(!calls.some((c) => c.title === "Update the plan"), "todo_write shows as the plan, not a card");

    const usage = s.crow.updates.filter((u) => u.update.sessionUpdate === "usage_update");
    assert.ok(usage.length >= 1, "usage_update after model calls");
    assert.equal(usage[0].update.size, 32000);
    assert.ok(usage[0].update.used > 0);

    // Embedded context reached the model as text.
    const first = (await mockRequests())[0].body.messages.find((m) => m.role === "user");
    assert.match(first.content, /<context ref="file:\/\/.*notes\.md">\nbe brief\n<\/context>/);
    assert.equal(s.crow.permissionRequests.length, 2, "write_file and bash asked first");
  } finally {
    await close(s);
  }
});

test("permissions: reject fails the call and the turn goes on; always is remembered", async () => {
  await script({
    steps: [
      { reply: { tool_calls: [{ name: "write_file", arguments: { path: "no.txt", content: "x" } }] } },
      { reply: { tool_calls: [{ name: "bash", arguments: { command: "echo one" } }] } },
      { reply: { tool_calls: [{ name: "bash", arguments: { command: "echo two" } }] } },
      { reply: { text: "ok" } },
    ],
  });
  const s = await open({
    permission: (p) => (p.toolCall.kind === "edit" ? "reject_once" : "allow_always"),
  });
  try {
    const res = await s.crow.prompt(s.id, "try things");
    assert.equal(res.stopReason, "end_turn");
    assert.ok(!existsSync(join(s.dir, "no.txt")));
    const failed = s.crow.updates.find((u) => u.update.sessionUpdate === "tool_call_update" && u.update.status === "failed");
    assert.match(failed.update.content[0].content.text, /permission denied: the user rejected/);
    // The model read the rejection.
    const requests = await mockRequests();
    const toolMsg = requests[1].body.messages.find((m) => m.role === "tool");
    assert.match(toolMsg.content, /permission denied/);
    // One question for the edit, one for the first bash; the second bash was remembered.
    assert.deepEqual(
      s.crow.permissionRequests.map((p) => p.toolCall.kind),
      ["edit", "execute"],
    );
    const pending = s.crow.permissionRequests[0].toolCall;
    assert.equal(pending.title, "Create no.txt");
    // The question shows the change itself: the file as it would be.
    const [diff] = pending.content;
    assert.deepEqual([diff.type, diff.path, diff.newText], ["diff", join(s.dir, "no.txt"), "x"]);
    assert.ok(diff.oldText == null, "a new file has no old text");
    // A command's question names the command and where it runs.
    const command = s.crow.permissionRequests[1].toolCall;
    assert.match(command.content[0].content.text, /echo one/);
    assert.equal(command.rawInput.cwd, s.dir);
    // Calls that may ask are announced pending and run (in_progress) only once allowed.
    const bashId = s.crow.updates.find((u) => u.update.sessionUpdate === "tool_call" && u.update.kind === "execute").update.toolCallId;
    const events = s.crow.log
      .filter((e) => (e.kind === "update" && e.params.update.toolCallId === bashId) || (e.kind === "permission" && e.params.toolCall.toolCallId === bashId))
      .map((e) => (e.kind === "permission" ? "asked" : `${e.params.update.sessionUpdate}:${e.params.update.status ?? "pending"}`));
    assert.deepEqual(events.slice(0, 3), ["tool_call:pending", "asked", "tool_call_update:in_progress"]);
    // No call is left pending: every tool_call has a final status.
    const ids = s.crow.updates.filter((u) => u.update.sessionUpdate === "tool_call").map((u) => u.update.toolCallId);
    for (const id of ids) {
      assert.ok(
        s.crow.updates.some((u) => u.update.toolCallId === id && ["completed", "failed"].includes(u.update.status)),
        `call ${id} has a final status`,
      );
    }
  } finally {
    await close(s);
  }
});

/** Asserts nothing more arrives for `id` after its prompt was answered. The window of
 * silence is the behaviour under test: a slow machine only makes it easier to pass. */
async function assertQuietAfterResponse(crow, id) {
  await sleep(300);
  const responseAt = crow.log.findLast((e) => e.kind === "response").at;
  const late = crow.log.filter((e) => e.kind === "update" && e.params.sessionId === id && e.at > responseAt);
  assert.deepEqual(late.map((e) => e.params.update.sessionUpdate), [], "no update after the response");
}

test("cancel mid-stream: the prompt ends cancelled, nothing after, next prompt works", async () => {
  await script({
    steps: [
      { fault: { stall: { reply: { text: "A long answer that never ends because the stream stalls" }, after_chunks: 2 } } },
      { reply: { text: "second answer" } },
    ],
  });
  const s = await open();
  try {
    const pending = s.crow.prompt(s.id, "talk");
    await s.crow.waitFor((u) => u.update.sessionUpdate === "agent_message_chunk");
    await s.crow.cancel(s.id);
    // The stream stalls for good: only the cancel ends the prompt.
    const res = await within(pending, "the cancelled prompt's answer");
    assert.equal(res.stopReason, "cancelled");
    await assertQuietAfterResponse(s.crow, s.id);

    const again = await s.crow.prompt(s.id, "again");
    assert.equal(again.stopReason, "end_turn");
    assert.match(joined(s.crow, s.id, "agent_message_chunk"), /second answer$/);
  } finally {
    await close(s);
  }
});

test("cancel mid-tool: the command is killed, the prompt ends cancelled", async () => {
  await script({
    steps: [
      { reply: { tool_calls: [{ name: "bash", arguments: { command: "echo $$ > pid; sleep 600" } }] } },
      { reply: { text: "after" } },
    ],
  });
  const s = await open();
  try {
    const pending = s.crow.prompt(s.id, "run it");
    const pidFile = join(s.dir, "pid");
    // The whole line is written: the command is running.
    await until(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").endsWith("\n"), "the command started");
    const pid = Number(readFileSync(pidFile, "utf8").trim());
    await s.crow.cancel(s.id);
    // The command sleeps ten minutes: only the cancel ends the prompt.
    const res = await within(pending, "the cancelled prompt's answer");
    assert.equal(res.stopReason, "cancelled");
    await assertQuietAfterResponse(s.crow, s.id);
    const call = s.crow.updates.find((u) => u.update.sessionUpdate === "tool_call").update;
    assert.ok(
      s.crow.updates.some((u) => u.update.toolCallId === call.toolCallId && u.update.status === "failed"),
      "the cancelled call is not left in progress",
    );
    const alive = () => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    await until(() => !alive(), "sleep was killed");
    assert.equal((await s.crow.prompt(s.id, "again")).stopReason, "end_turn");
  } finally {
    await close(s);
  }
});

test("a second prompt while one runs joins it, and runs next when the turn is cancelled", async () => {
  await script({
    steps: [
      { fault: { stall: { reply: { text: "thinking hard" }, after_chunks: 1 } } },
      { reply: { text: "second turn" } },
    ],
  });
  const s = await open();
  try {
    const first = s.crow.prompt(s.id, "one");
    await s.crow.waitFor((u) => u.update.sessionUpdate === "agent_message_chunk");
    // Not refused: it waits in the running turn's queue (as Zed's queued messages do)...
    const second = s.crow.prompt(s.id, "two");
    await s.crow.cancel(s.id);
    assert.equal((await first).stopReason, "cancelled");
    // ...and the stopped turn never took it, so it runs as the next turn.
    assert.equal((await second).stopReason, "end_turn");
    // Its answer streams in as updates (which the SDK may hand over after the response).
    const said = () =>
      s.crow.updates
        .filter((u) => u.update.sessionUpdate === "agent_message_chunk")
        .map((u) => u.update.content?.text ?? "")
        .join("");
    await until(() => said().endsWith("second turn"), `the second turn's answer (got ${said()})`);
  } finally {
    await close(s);
  }
});

test("fs delegation: reads see editor buffers, writes go through the editor, new files work", async () => {
  await script({
    steps: [
      { reply: { tool_calls: [{ name: "read_file", arguments: { path: "a.txt" } }] } },
      { reply: { tool_calls: [{ name: "edit_file", arguments: { path: "a.txt", old_string: "unsaved", new_string: "edited" } }] } },
      { reply: { tool_calls: [{ name: "write_file", arguments: { path: "sub/new.txt", content: "fresh\n" } }] } },
      { reply: { text: "done" } },
    ],
  });
  const dir = project();
  writeFileSync(join(dir, "a.txt"), "on disk\n");
  const buffers = new Map([[join(dir, "a.txt"), "unsaved buffer\n"]]);
  const crow = startCrow(dir, { fs: true, buffers });
  try {
    await crow.initialize();
    const { sessionId } = await crow.newSession();
    assert.equal((await crow.prompt(sessionId, "go")).stopReason, "end_turn");
    const read = crow.updates.find((u) => u.update.sessionUpdate === "tool_call_update" && u.update.status === "completed");
    assert.match(read.update.content[0].content.text, /unsaved buffer/);
    assert.deepEqual(
      crow.writes.map((w) => [w.path, w.content]),
      [
        [join(dir, "a.txt"), "edited buffer\n"],
        [join(dir, "sub/new.txt"), "fresh\n"],
      ],
    );
    assert.ok(crow.reads.every((r) => r.sessionId === sessionId));
    const diffs = crow.updates
      .filter((u) => u.update.sessionUpdate === "tool_call_update")
      .flatMap((u) => u.update.content ?? [])
      .filter((c) => c.type === "diff");
    assert.deepEqual(
      diffs.map((d) => [d.oldText ?? null, d.newText]),
      [["unsaved buffer\n", "edited buffer\n"], [null, "fresh\n"]],
    );
  } finally {
    await crow.stop();
    cleanup(dir);
  }
});

test("terminal delegation: bash runs in the editor's terminal, shown in the tool call", async () => {
  await script({
    steps: [
      { reply: { tool_calls: [{ name: "bash", arguments: { command: "echo from-terminal; exit 3" } }] } },
      { reply: { text: "saw it" } },
    ],
  });
  const dir = project();
  const crow = startCrow(dir, { terminal: true });
  try {
    await crow.initialize();
    const { sessionId } = await crow.newSession();
    assert.equal((await crow.prompt(sessionId, "run")).stopReason, "end_turn");
    const [kind, create] = crow.terminals.calls[0];
    assert.equal(kind, "create");
    assert.equal(create.command, "bash");
    assert.equal(create.args[0], "-c");
    // The command as the model wrote it, sandboxed or not (the launcher comes in through
    // BASH_ENV, not the command line the editor shows).
    assert.equal(create.args[1], "echo from-terminal; exit 3");
    assert.equal(create.cwd, dir);
    assert.ok(crow.terminals.calls.some(([k]) => k === "release"), "the terminal is released");
    const shown = crow.updates.find(
      (u) => u.update.sessionUpdate === "tool_call_update" && (u.update.content ?? []).some((c) => c.type === "terminal"),
    );
    assert.ok(shown, "the terminal is embedded in the tool call");
    const final = crow.updates.findLast((u) => u.update.sessionUpdate === "tool_call_update").update;
    assert.equal(final.status, "failed");
    // A client that does not say it renders terminal output gets the output as text too.
    assert.match(final.content.find((c) => c.type === "content").content.text, /from-terminal/);
    const toolMsg = (await mockRequests())[1].body.messages.find((m) => m.role === "tool");
    assert.match(toolMsg.content, /from-terminal[\s\S]*exit code: 3/);
  } finally {
    await crow.stop();
    cleanup(dir);
  }
});

test("stdin EOF: crow exits", async () => {
  const dir = project();
  const crow = startCrow(dir);
  try {
    await crow.initialize();
    crow.child.stdin.end();
    const { code } = await within(crow.exited, "crow exits on stdin EOF");
    assert.equal(code, 0);
  } finally {
    crow.child.kill("SIGKILL");
    cleanup(dir);
  }
});

test("load in a new process: the whole history is replayed, then prompts go on", async () => {
  await script({
    steps: [
      {
        reply: {
          thinking: "Plan: write it.",
          text: "Writing the file.",
          tool_calls: [{ name: "write_file", arguments: { path: "kept.txt", content: "kept\n" } }],
        },
      },
      { reply: { text: "Wrote kept.txt." } },
    ],
  });
  const dir = project();
  const first = startCrow(dir);
  let id;
  try {
    const init = await first.initialize();
    assert.equal(init.agentCapabilities.loadSession, true);
    ({ sessionId: id } = await first.newSession());
    assert.equal((await first.prompt(id, "Please keep a file")).stopReason, "end_turn");
  } finally {
    await first.stop();
  }

  // An editor restart: a new process, the same data directory.
  await script({ steps: [{ reply: { text: "Still here." } }] });
  const second = startCrow(dir);
  try {
    const init = await second.initialize();
    assert.ok(init.agentCapabilities.sessionCapabilities.list, "session/list is offered");
    const { sessions } = await second.agent.request(acp.methods.agent.session.list, { cwd: dir });
    const listed = sessions.find((s) => s.sessionId === id);
    assert.ok(listed, `listed: ${JSON.stringify(sessions)}`);
    assert.equal(listed.title, "Please keep a file");
    assert.equal(listed.cwd, dir);

    const loaded = await second.agent.request(acp.methods.agent.session.load, {
      sessionId: id,
      cwd: dir,
      mcpServers: [],
    });
    assert.equal(loaded.modes.currentModeId, "build");
    const replay = second.updates.filter((u) => u.sessionId === id).map((u) => u.update);
    assert.deepEqual(
      replay.map((u) => u.sessionUpdate).filter((k) => k !== "available_commands_update"),
      ["user_message_chunk", "agent_thought_chunk", "agent_message_chunk", "tool_call", "tool_call_update", "agent_message_chunk"],
    );
    assert.equal(replay[0].content.text, "Please keep a file");
    const call = replay.find((u) => u.sessionUpdate === "tool_call");
    assert.equal(call.title, "Write kept.txt");
    assert.equal(call.kind, "edit");
    const result = replay.find((u) => u.sessionUpdate === "tool_call_update");
    assert.equal(result.status, "completed");
    const diff = result.content[0];
    assert.deepEqual([diff.type, diff.path, diff.oldText ?? null, diff.newText], ["diff", join(dir, "kept.txt"), null, "kept\n"]);
    // The commands follow the load response.
    await second.waitFor((u) => u.sessionId === id && u.update.sessionUpdate === "available_commands_update");

    assert.equal((await second.prompt(id, "still there?")).stopReason, "end_turn");
    // The model saw the whole earlier conversation.
    const messages = (await mockRequests())[0].body.messages;
    assert.ok(messages.some((m) => m.role === "user" && m.content === "Please keep a file"));
    assert.ok(messages.some((m) => m.role === "tool" && /kept\.txt/.test(m.content)));

    await assert.rejects(
      second.agent.request(acp.methods.agent.session.load, { sessionId: "no-such-session", cwd: dir, mcpServers: [] }),
      (e) => e.code === -32002 || /no session/.test(JSON.stringify(e)),
    );
  } finally {
    await second.stop();
    cleanup(dir);
  }
});

/** Live processes whose working directory is `dir` (MCP servers crow started there). */
function processesIn(dir) {
  return readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return readlinkSync(`/proc/${p}/cwd`) === dir && !/\) Z /.test(readFileSync(`/proc/${p}/stat`, "utf8"));
      } catch {
        return false;
      }
    });
}

test("MCP servers from session/new: tools appear when ready, are called, and stop with crow", async (t) => {
  const pythonpath = process.env.MCP_TIME_PYTHONPATH;
  if (!pythonpath) {
    assert.ok(!process.env.CROW_REQUIRE_MCP_SERVERS, "mcp-server-time is not installed: run .ci/run");
    t.skip("mcp-server-time is not installed (run .ci/run)");
    return;
  }
  const dir = project();
  const crow = startCrow(dir);
  try {
    await crow.initialize();
    const server = {
      name: "time",
      command: "python3",
      args: ["-m", "mcp_server_time", "--local-timezone", "UTC"],
      env: [{ name: "PYTHONPATH", value: pythonpath }],
    };
    const { sessionId: id } = await crow.newSession(dir, [server]);
    // The server starts in the background: prompt until a request advertises its tools.
    let advertised = false;
    const deadline = Date.now() + 60000;
    while (!advertised && Date.now() < deadline) {
      await script({ steps: [{ reply: { text: "ok" } }] });
      await crow.prompt(id, "ping");
      const tools = (await mockRequests())[0].body.tools ?? [];
      advertised = tools.some((tool) => tool.function.name === "mcp__time__get_current_time");
      if (!advertised) await sleep(100);
    }
    assert.ok(advertised, `the MCP tool never appeared\n${crow.stderr()}`);

    await script({
      steps: [
        { reply: { tool_calls: [{ name: "mcp__time__get_current_time", arguments: { timezone: "Asia/Tokyo" } }] } },
        { reply: { text: "It is late in Tokyo." } },
      ],
    });
    const res = await crow.prompt(id, "What time is it in Tokyo?");
    assert.equal(res.stopReason, "end_turn");
    const call = crow.updates.find(
      (u) => u.update.sessionUpdate === "tool_call" && u.update.rawInput?.timezone === "Asia/Tokyo",
    )?.update;
    assert.ok(call, "the MCP call is shown as a tool call");
    const done = crow.updates.find(
      (u) =>
        u.update.sessionUpdate === "tool_call_update" &&
        u.update.toolCallId === call.toolCallId &&
        ["completed", "failed"].includes(u.update.status),
    )?.update;
    assert.equal(done?.status, "completed");
    const toolMsg = (await mockRequests())[1].body.messages.find((m) => m.role === "tool");
    assert.match(toolMsg.content, /Asia\/Tokyo/);
    assert.equal(processesIn(dir).length, 2, "crow and the server run in the session's directory");
  } finally {
    await crow.stop();
    const deadline = Date.now() + 60000;
    while (processesIn(dir).length > 0 && Date.now() < deadline) await sleep(50);
    assert.deepEqual(processesIn(dir), [], "the MCP server outlived crow acp");
    cleanup(dir);
  }
});

test("approve option: edits run without asking, commands still ask", async () => {
  await script({
    steps: [
      {
        reply: {
          tool_calls: [
            { name: "write_file", arguments: { path: "auto.txt", content: "auto\n" } },
            { name: "bash", arguments: { command: "echo asked" } },
          ],
        },
      },
      { reply: { text: "ok" } },
    ],
  });
  const s = await open();
  try {
    const approve = s.session.configOptions.find((o) => o.id === "approve");
    assert.equal(approve.currentValue, "ask");
    const { configOptions } = await s.crow.agent.request(acp.methods.agent.session.setConfigOption, {
      sessionId: s.id,
      configId: "approve",
      value: "edits",
    });
    assert.equal(configOptions.find((o) => o.id === "approve").currentValue, "edits");
    assert.equal((await s.crow.prompt(s.id, "Write auto.txt\nthen echo")).stopReason, "end_turn");
    assert.equal(readFileSync(join(s.dir, "auto.txt"), "utf8"), "auto\n");
    assert.deepEqual(s.crow.permissionRequests.map((p) => p.toolCall.kind), ["execute"]);
    const info = s.crow.updates.find((u) => u.update.sessionUpdate === "session_info_update");
    assert.equal(info.update.title, "Write auto.txt");
  } finally {
    await close(s);
  }
});

test("a broken configuration is reported by session/new, not by an agent that dies", async () => {
  const dir = project();
  writeFileSync(join(dir, ".crow", "config.toml"), "provider = [\n");
  const crow = startCrow(dir);
  try {
    const init = await crow.initialize();
    assert.equal(init.agentInfo.name, "crow");
    await assert.rejects(crow.newSession(), (e) => /config\.toml/.test(e.message ?? "") || /config\.toml/.test(JSON.stringify(e)));
  } finally {
    await crow.stop();
    cleanup(dir);
  }
});

test("cancel while the user is asked: answered cancelled, the call fails, nothing pending", async () => {
  await script({
    steps: [
      { reply: { tool_calls: [{ name: "write_file", arguments: { path: "never.txt", content: "x" } }] } },
      { reply: { text: "after" } },
    ],
  });
  let answer;
  const asked = new Promise((resolve) => {
    answer = resolve;
  });
  let release;
  const s = await open({
    permission: () => {
      answer();
      // The user does not answer; the client answers "cancelled" once the turn is cancelled.
      return new Promise((resolve) => {
        release = () => resolve("cancelled");
      });
    },
  });
  try {
    const pending = s.crow.prompt(s.id, "write it");
    await asked;
    await s.crow.cancel(s.id);
    release();
    const res = await within(pending, "the cancelled prompt's answer");
    assert.equal(res.stopReason, "cancelled");
    assert.ok(!existsSync(join(s.dir, "never.txt")));
    const call = s.crow.updates.find((u) => u.update.sessionUpdate === "tool_call").update;
    assert.ok(
      s.crow.updates.some((u) => u.update.toolCallId === call.toolCallId && u.update.status === "failed"),
      "the call is not left pending",
    );
    await assertQuietAfterResponse(s.crow, s.id);
    assert.equal((await s.crow.prompt(s.id, "again")).stopReason, "end_turn");
  } finally {
    await close(s);
  }
});

test("an MCP server that fails to start reaches the editor as a notice", async () => {
  const dir = project();
  const crow = startCrow(dir, { notices: true });
  try {
    await crow.initialize();
    const ghost = { name: "ghost", command: join(dir, "no-such-mcp-server"), args: [], env: [] };
    const session = await crow.newSession(dir, [ghost]);
    const found = await crow.waitFor((u) => u.update.sessionUpdate === "notice");
    assert.equal(found.sessionId, session.sessionId);
    assert.equal(found.update.severity, "warning");
    assert.match(found.update.title, /ghost/);
  } finally {
    await crow.stop();
    cleanup(dir);
  }
});

test("images reach a model that reads them; a model that does not is told one was attached", async () => {
  const image = { type: "image", data: "iVBORw0KGgo=", mimeType: "image/png" };
  const ask = [{ type: "text", text: "What is in this picture?" }, image];

  await script({ steps: [{ reply: { text: "A tiny PNG." } }] });
  const dir = project();
  // The last table of the project config is the mock model's: it reads images.
  appendFileSync(join(dir, ".crow", "config.toml"), "images = true\n");
  let crow = startCrow(dir);
  try {
    const init = await crow.initialize();
    assert.equal(init.agentCapabilities.promptCapabilities.image, true);
    const { sessionId } = await crow.newSession();
    assert.equal((await crow.prompt(sessionId, ask)).stopReason, "end_turn");
    const [request] = await mockRequests();
    const user = request.body.messages.find((m) => m.role === "user");
    assert.ok(Array.isArray(user.content), JSON.stringify(user));
    assert.deepEqual(user.content.find((p) => p.type === "image_url"), {
      type: "image_url",
      image_url: { url: "data:image/png;base64,iVBORw0KGgo=" },
    });
  } finally {
    await crow.stop();
    cleanup(dir);
  }

  await script({ steps: [{ reply: { text: "I cannot see it." } }] });
  const plain = project();
  crow = startCrow(plain);
  try {
    await crow.initialize();
    const { sessionId } = await crow.newSession();
    await crow.prompt(sessionId, ask);
    const [request] = await mockRequests();
    const user = request.body.messages.find((m) => m.role === "user");
    assert.equal(typeof user.content, "string");
    assert.match(user.content, /attached 1 image\(s\), but model mock-model does not read images/);
  } finally {
    await crow.stop();
    cleanup(plain);
  }
});

test("terminal output as text: only for clients that do not render terminals", async () => {
  await script({
    steps: [
      { reply: { tool_calls: [{ name: "bash", arguments: { command: "echo shown-by-terminal" } }] } },
      { reply: { text: "ok" } },
    ],
  });
  const dir = project();
  const crow = startCrow(dir, { terminal: true, terminalOutput: true });
  try {
    await crow.initialize();
    const { sessionId } = await crow.newSession();
    assert.equal((await crow.prompt(sessionId, "run")).stopReason, "end_turn");
    const final = crow.updates.findLast((u) => u.update.sessionUpdate === "tool_call_update").update;
    assert.equal(final.status, "completed");
    assert.deepEqual(final.content.map((c) => c.type), ["terminal"]);
  } finally {
    await crow.stop();
    cleanup(dir);
  }
});

test("cancel during a command in the editor's terminal: no $/cancel_request is sent", async () => {
  await script({
    steps: [
      { reply: { tool_calls: [{ name: "bash", arguments: { command: "sleep 600" } }] } },
      { reply: { text: "after" } },
    ],
  });
  const dir = project();
  const crow = startCrow(dir, { terminal: true });
  try {
    await crow.initialize();
    const { sessionId } = await crow.newSession();
    const pending = crow.prompt(sessionId, "run");
    await crow.waitFor((u) => (u.update.content ?? []).some((c) => c.type === "terminal"));
    await crow.cancel(sessionId);
    assert.equal((await pending).stopReason, "cancelled");
    // The terminal is killed and released all the same.
    await until(() => crow.terminals.calls.some(([k]) => k === "release"), "the terminal is released");
    assert.equal((await crow.prompt(sessionId, "again")).stopReason, "end_turn");
    assert.ok(!crow.stdout().includes("$/cancel_request"), "crow sent $/cancel_request");
  } finally {
    await crow.stop();
    cleanup(dir);
  }
});

test("bad input: a line that is not UTF-8 is a parse error; the connection and its sessions live on", async () => {
  const s = await open();
  try {
    s.crow.child.stdin.write(Buffer.from([0x7b, 0x22, 0x69, 0x64, 0x22, 0x3a, 0x31, 0xff, 0x7d, 0x0a]));
    await until(() => s.crow.stdout().includes("-32700"), `a parse error reply\n${s.crow.stderr()}`);
    const reply = s.crow.stdout().split("\n").find((l) => l.includes("-32700"));
    assert.ok(reply, `no parse error reply\n${s.crow.stderr()}`);
    assert.equal(JSON.parse(reply).id, null);
    await script({ steps: [{ reply: { text: "still here" } }] });
    assert.equal((await s.crow.prompt(s.id, "hello?")).stopReason, "end_turn");
  } finally {
    await close(s);
  }
});

test("session/new refuses a cwd that does not exist", async () => {
  const dir = project();
  const crow = startCrow(dir);
  try {
    await crow.initialize();
    await assert.rejects(crow.newSession(join(dir, "no-such-dir")), (e) => e.code === -32602 && /does not exist/.test(JSON.stringify(e)));
  } finally {
    await crow.stop();
    cleanup(dir);
  }
});

test("load after a cancel: the answer that was cut off is marked so", async () => {
  await script({
    steps: [{ fault: { stall: { reply: { text: "An answer that stalls and never ends" }, after_chunks: 2 } } }],
  });
  const dir = project();
  const first = startCrow(dir);
  let id;
  try {
    await first.initialize();
    ({ sessionId: id } = await first.newSession());
    const pending = first.prompt(id, "talk");
    await first.waitFor((u) => u.update.sessionUpdate === "agent_message_chunk");
    await first.cancel(id);
    assert.equal((await pending).stopReason, "cancelled");
  } finally {
    await first.stop();
  }
  const second = startCrow(dir);
  try {
    await second.initialize();
    await second.agent.request(acp.methods.agent.session.load, { sessionId: id, cwd: dir, mcpServers: [] });
    assert.match(joined(second, id, "agent_message_chunk"), /^An answer.* \[cut off\]$/);
  } finally {
    await second.stop();
    cleanup(dir);
  }
});

/** The current value of each config option of a session response, by id. */
function currentValues(response) {
  return Object.fromEntries(response.configOptions.map((o) => [o.id, o.currentValue]));
}

const restoreParams = (sessionId, dir) => ({ sessionId, cwd: dir, mcpServers: [] });

test("an agent per prompt: a session never prompted loads in the next process with its mode, model and approve level", async () => {
  const dir = project();
  appendFileSync(join(dir, ".crow", "config.toml"), "[providers.mock.models.other-model]\ncontext_window = 16000\n");
  const first = startCrow(dir);
  let id;
  try {
    await first.initialize();
    ({ sessionId: id } = await first.newSession());
    await first.agent.request(acp.methods.agent.session.setMode, { sessionId: id, modeId: "plan" });
    await first.agent.request(acp.methods.agent.session.setConfigOption, { sessionId: id, configId: "approve", value: "all" });
    const changed = await first.agent.request(acp.methods.agent.session.setConfigOption, {
      sessionId: id,
      configId: "model",
      value: "mock/other-model",
    });
    assert.equal(currentValues(changed).model, "mock/other-model");
  } finally {
    await first.stop();
  }

  // The next prompt comes with a new process (as acpx runs an agent per prompt).
  await script({
    steps: [{ reply: { tool_calls: [{ name: "bash", arguments: { command: "echo unasked" } }] } }, { reply: { text: "ran it" } }],
  });
  const second = startCrow(dir);
  try {
    await second.initialize();
    const { sessions } = await second.agent.request(acp.methods.agent.session.list, { cwd: dir });
    assert.ok(sessions.some((s) => s.sessionId === id), `listed before any prompt: ${JSON.stringify(sessions)}`);
    const loaded = await second.agent.request(acp.methods.agent.session.load, restoreParams(id, dir));
    assert.equal(loaded.modes.currentModeId, "plan");
    assert.deepEqual(
      [currentValues(loaded).mode, currentValues(loaded).model, currentValues(loaded).approve],
      ["plan", "mock/other-model", "all"],
    );
    // Back to build (saved at once too); the command runs without a question.
    await second.agent.request(acp.methods.agent.session.setMode, { sessionId: id, modeId: "build" });
    assert.equal((await second.prompt(id, "Run a command\nplease")).stopReason, "end_turn");
    assert.deepEqual(second.permissionRequests, [], "approve=all held");
    assert.equal((await mockRequests())[0].body.model, "other-model");
    const info = second.updates.find((u) => u.sessionId === id && u.update.sessionUpdate === "session_info_update");
    assert.equal(info?.update.title, "Run a command", "the first prompt names the session");
  } finally {
    await second.stop();
  }

  const third = startCrow(dir);
  try {
    await third.initialize();
    const resumed = await third.agent.request(acp.methods.agent.session.resume, restoreParams(id, dir));
    assert.deepEqual(
      [resumed.modes.currentModeId, currentValues(resumed).model, currentValues(resumed).approve],
      ["build", "mock/other-model", "all"],
    );
    const { sessions } = await third.agent.request(acp.methods.agent.session.list, { cwd: dir });
    assert.equal(sessions.find((s) => s.sessionId === id).title, "Run a command");
  } finally {
    await third.stop();
    cleanup(dir);
  }
});

test("an always-allow answer holds in the next process", async () => {
  const run = (command) => ({
    steps: [{ reply: { tool_calls: [{ name: "bash", arguments: { command } }] } }, { reply: { text: "ok" } }],
  });
  await script(run("echo one"));
  const dir = project();
  const first = startCrow(dir, { permission: () => "allow_always" });
  let id;
  try {
    await first.initialize();
    ({ sessionId: id } = await first.newSession());
    assert.equal((await first.prompt(id, "run one")).stopReason, "end_turn");
    assert.equal(first.permissionRequests.length, 1);
  } finally {
    await first.stop();
  }
  await script(run("echo two"));
  const second = startCrow(dir, { permission: () => "reject_once" });
  try {
    await second.initialize();
    await second.agent.request(acp.methods.agent.session.load, restoreParams(id, dir));
    assert.equal((await second.prompt(id, "run two")).stopReason, "end_turn");
    assert.deepEqual(second.permissionRequests, [], "bash was always allowed in this session");
    const done = second.updates.findLast((u) => u.update.sessionUpdate === "tool_call_update").update;
    assert.equal(done.status, "completed");
  } finally {
    await second.stop();
    cleanup(dir);
  }
});

test("session/fork: a new session with the history up to a point, the parent recorded", async () => {
  await script({ steps: [{ reply: { text: "first answer" } }, { reply: { text: "second answer" } }] });
  const dir = project();
  const crow = startCrow(dir);
  try {
    const init = await crow.initialize();
    assert.ok(init.agentCapabilities.sessionCapabilities.fork, "session/fork is offered");
    const { sessionId: id } = await crow.newSession();
    await crow.prompt(id, "first question");
    await crow.prompt(id, "second question");

    // The SDK names the method only in its unstable schema.
    const whole = await crow.agent.request("session/fork", restoreParams(id, dir));
    const cut = await crow.agent.request("session/fork", {
      ...restoreParams(id, dir),
      _meta: { crow: { keepTurns: 1 } },
    });
    assert.equal(new Set([id, whole.sessionId, cut.sessionId]).size, 3, "each fork has its own id");
    assert.equal(whole.modes.currentModeId, "build");

    for (const [fork, questions, answers] of [
      [whole.sessionId, "first questionsecond question", "first answersecond answer"],
      [cut.sessionId, "first question", "first answer"],
    ]) {
      await crow.agent.request(acp.methods.agent.session.load, restoreParams(fork, dir));
      assert.equal(joined(crow, fork, "user_message_chunk"), questions);
      assert.equal(joined(crow, fork, "agent_message_chunk"), answers);
    }

    // The fork goes on from its point, on its own.
    await script({ steps: [{ reply: { text: "another answer" } }] });
    assert.equal((await crow.prompt(cut.sessionId, "another way")).stopReason, "end_turn");
    const asked = (await mockRequests())[0].body.messages.filter((m) => m.role === "user").map((m) => m.content);
    assert.deepEqual(asked, ["first question", "another way"]);

    assert.match(crowCli(dir, ["sessions", "show", cut.sessionId]), new RegExp(`forked from ${id}`));
    assert.doesNotMatch(crowCli(dir, ["sessions", "show", id]), /forked from/);
    assert.doesNotMatch(crowCli(dir, ["sessions", "show", id]), /another way/, "the parent is untouched");
  } finally {
    await crow.stop();
    cleanup(dir);
  }
});

test("usage_update for a model with no known context window: an estimated size", async () => {
  await script({ steps: [{ reply: { text: "ok" } }] });
  const dir = project();
  const config = join(dir, ".crow", "config.toml");
  // Neither the configuration nor the catalog knows mock-model's window.
  writeFileSync(config, readFileSync(config, "utf8").replace("[providers.mock.models.mock-model]\ncontext_window = 32000\n", ""));
  assert.doesNotMatch(readFileSync(config, "utf8"), /context_window/);
  const crow = startCrow(dir);
  try {
    await crow.initialize();
    const { sessionId } = await crow.newSession();
    assert.equal((await crow.prompt(sessionId, "hi")).stopReason, "end_turn");
    const usage = crow.updates.find((u) => u.update.sessionUpdate === "usage_update")?.update;
    assert.ok(usage, `no usage_update: ${JSON.stringify(crow.kinds(sessionId))}`);
    assert.ok(usage.used > 0);
    assert.equal(usage.size, 128000);
    assert.equal(usage._meta?.crow?.sizeEstimated, true);
  } finally {
    await crow.stop();
    cleanup(dir);
  }
});

test("/context and /compact: answered in the session, the compaction becomes the next request's start", async () => {
  const s = await open();
  try {
    const commands = await s.crow.waitFor((u) => u.update.sessionUpdate === "available_commands_update");
    for (const name of ["compact", "context"]) {
      assert.ok(commands.update.availableCommands.some((c) => c.name === name), name);
    }
    await script({
      steps: [
        ...[1, 2, 3, 4, 5].map((i) => ({ reply: { text: `answer ${i} `.repeat(40) } })),
        { reply: { text: "## Task\nthe checkpoint" } },
        { reply: { text: "after" } },
      ],
    });
    // More exchanges than compaction keeps verbatim (the last three).
    for (const prompt of ["one", "two", "three", "four", "five"]) {
      assert.equal((await s.crow.prompt(s.id, prompt)).stopReason, "end_turn");
    }

    assert.equal((await s.crow.prompt(s.id, "/context")).stopReason, "end_turn");
    assert.match(joined(s.crow, s.id, "agent_message_chunk"), /context window: 32000 tokens/);
    assert.equal((await mockRequests()).length, 5, "no model call for /context");

    assert.equal((await s.crow.prompt(s.id, "/compact")).stopReason, "end_turn");
    assert.match(joined(s.crow, s.id, "agent_message_chunk"), /Compacted/);
    assert.equal((await s.crow.prompt(s.id, "six")).stopReason, "end_turn");
    const requests = await mockRequests();
    assert.match(JSON.stringify(requests.at(-1).body.messages), /the checkpoint/);
  } finally {
    await close(s);
  }
});
