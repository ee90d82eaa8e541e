// The permission policy through `crow acp` driven by the official ACP TypeScript SDK:
// "always" answers kept for the project, and commands where the kernel has no sandbox. Run
// after interop.test.mjs, on the same mock model, one test at a time.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import { script, project, startCrow, cleanup } from "./harness.mjs";

/** Opens crow in a fresh project: initialize + session/new. */
async function open(options) {
  const dir = project();
  const crow = startCrow(dir, options);
  await crow.initialize();
  const session = await crow.newSession();
  return { dir, crow, session, id: session.sessionId };
}

async function close({ dir, crow }) {
  await crow.stop();
  cleanup(dir);
}

test("always allow in this project: the rule is shown, saved to .crow/config.toml and applies at once", async () => {
  const bash = (command) => ({ reply: { tool_calls: [{ name: "bash", arguments: { command } }] } });
  await script({
    steps: [bash("git status --short"), bash("git status"), bash("git log -1"), { reply: { text: "ok" } }],
  });
  const s = await open({
    permission: (p) =>
      p.options.some((o) => o.optionId === "allow_always_project") && p.toolCall.rawInput.command.startsWith("git status")
        ? "allow_always_project"
        : "allow_once",
  });
  try {
    const before = readFileSync(join(s.dir, ".crow", "config.toml"), "utf8");
    assert.equal((await s.crow.prompt(s.id, "look at git")).stopReason, "end_turn");
    // Asked for the first git status (the rule offered) and for git log; the second git status
    // ran under the saved rule.
    const asked = s.crow.permissionRequests.map((p) => p.toolCall.rawInput.command);
    assert.deepEqual(asked, ["git status --short", "git log -1"]);
    const offered = s.crow.permissionRequests[0].options.find((o) => o.optionId === "allow_always_project");
    assert.equal(offered.kind, "allow_always");
    assert.equal(offered.name, "Always allow `bash(git status*)` in this project (saves to .crow/config.toml)");
    const after = readFileSync(join(s.dir, ".crow", "config.toml"), "utf8");
    assert.ok(after.startsWith(before), "the file's own content is kept");
    assert.match(after, /\[permissions\]\nallow = \["bash\(git status\*\)"\]/);
    // The next session reads it from the file: no question for git status.
    await script({ steps: [bash("git status"), { reply: { text: "ok" } }] });
    const next = await s.crow.newSession();
    const before2 = s.crow.permissionRequests.length;
    assert.equal((await s.crow.prompt(next.sessionId, "again")).stopReason, "end_turn");
    assert.equal(s.crow.permissionRequests.length, before2, "not asked again");
  } finally {
    await close(s);
  }
});

test("no sandbox on this machine: a command asks before running unconfined, whatever the approve level", async () => {
  await script({
    steps: [{ reply: { tool_calls: [{ name: "bash", arguments: { command: "echo unconfined > made.txt" } }] } }, { reply: { text: "ok" } }],
  });
  const s = await open({
    notices: true,
    env: { CROW_SANDBOX_UNSUPPORTED: "1", CROW_SANDBOX_MODE: "workspace-write" },
  });
  try {
    // Said once to the editor's user, as a notice.
    const notice = await s.crow.waitFor((u) => u.update.sessionUpdate === "notice");
    assert.match(notice.update.title, /sandbox is unavailable/);
    await s.crow.agent.request(acp.methods.agent.session.setConfigOption, { sessionId: s.id, configId: "approve", value: "all" });
    assert.equal((await s.crow.prompt(s.id, "make it")).stopReason, "end_turn");
    assert.equal(s.crow.permissionRequests.length, 1, "asked although approve is all");
    const asked = s.crow.permissionRequests[0];
    assert.match(asked.toolCall.title, /WITHOUT the sandbox/);
    assert.ok(!asked.options.some((o) => o.optionId === "allow_always_project"), "no project rule for this question");
    assert.equal(readFileSync(join(s.dir, "made.txt"), "utf8"), "unconfined\n");
    // Said once to the user, in the agent's log.
    assert.equal(s.crow.stderr().match(/the sandbox is unavailable/g)?.length, 1, s.crow.stderr());
  } finally {
    await close(s);
  }
});
