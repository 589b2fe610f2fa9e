#!/usr/bin/env node
// Interop test for mcp-tasks with 2025-era clients: the official TypeScript SDK 1.32.2
// (protocol 2025-11-25, with its experimental tasks client) and 1.22.0 (protocol
// 2025-06-18), unmodified, over Streamable HTTP. Every client alternates its requests
// between two gateways (its `fetch` sends request n to gateway n mod 2), so each session is
// started on one gateway and continued on the other.
//
//   npm ci --prefix tests/legacy
//   node tests/legacy/legacy.mjs http://127.0.0.1:A/mcp http://127.0.0.1:B/mcp
//
// Prints `ok <name>` / `FAIL <name>: why` per scenario and `N passed, M failed`; exits 1 on
// any failure or after LEGACY_TIMEOUT_MS (default 90000).

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { Client as OldClient } from "sdk-2025-06-18/client/index.js";
import { StreamableHTTPClientTransport as OldTransport } from "sdk-2025-06-18/client/streamableHttp.js";

const [urlA, urlB] = process.argv.slice(2);
if (!urlA || !urlB) {
  process.stderr.write("usage: legacy.mjs URL_A URL_B\n");
  process.exit(2);
}
const TIMEOUT = Number(process.env.LEGACY_TIMEOUT_MS ?? 90_000);
const overall = setTimeout(() => {
  process.stdout.write(`FAIL timeout: nothing finished within ${TIMEOUT} ms\n`);
  process.exit(1);
}, TIMEOUT);

/** A fetch sending request n to gateway n mod 2; counts requests per gateway and session. */
function alternating() {
  const hits = { A: 0, B: 0 };
  const sessions = { A: new Set(), B: new Set() };
  let n = 0;
  const f = (input, init) => {
    const which = n++ % 2 === 0 ? "A" : "B";
    hits[which]++;
    const sid = new Headers(init?.headers ?? {}).get("mcp-session-id");
    if (sid) sessions[which].add(sid);
    return fetch(which === "A" ? urlA : urlB, init);
  };
  return { f, hits, sessions };
}

class Check extends Error {}
function check(cond, message) {
  if (!cond) throw new Check(message);
}
const textOf = (result) => result?.content?.find((c) => c.type === "text")?.text;

async function modernClient(withElicitation) {
  const route = alternating();
  const client = new Client(
    { name: "legacy-interop-1.32", version: "1.32.2" },
    { capabilities: withElicitation ? { elicitation: {} } : {} },
  );
  if (withElicitation) {
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      check(req.params.message === "Which colour?", `unexpected question ${req.params.message}`);
      return { action: "accept", content: { answer: "blue" } };
    });
  }
  const transport = new StreamableHTTPClientTransport(new URL(urlA), { fetch: route.f });
  await client.connect(transport);
  return { client, transport, route };
}

/** Drain a callToolStream; returns { types, statuses, result, error }. */
async function drain(stream) {
  const out = { types: [], statuses: [], result: undefined, error: undefined, taskId: undefined };
  for await (const m of stream) {
    out.types.push(m.type);
    if (m.type === "taskCreated") out.taskId = m.task.taskId;
    if (m.type === "taskStatus") out.statuses.push(m.task.status);
    if (m.type === "result") out.result = m.result;
    if (m.type === "error") out.error = m.error;
  }
  return out;
}

let main;
const scenarios = [
  ["initialize-2025-11-25", async () => {
    main = await modernClient(true);
    check(main.transport.protocolVersion === "2025-11-25", `negotiated ${main.transport.protocolVersion}`);
    const caps = main.client.getServerCapabilities();
    check(caps?.tasks?.requests?.tools?.call, `no tasks capability: ${JSON.stringify(caps)}`);
    check(main.transport.sessionId?.startsWith("ses_"), `session id ${main.transport.sessionId}`);
  }],
  ["tools-list", async () => {
    const { tools } = await main.client.listTools();
    const support = Object.fromEntries(tools.map((t) => [t.name, t.execution?.taskSupport]));
    check(support.sleep === "optional", `sleep: ${support.sleep}`);
    check(support.ask === "optional", `ask: ${support.ask}`);
    check(support.echo === "forbidden", `echo: ${support.echo}`);
  }],
  ["sync-sleep-with-progress", async () => {
    const progress = [];
    const result = await main.client.callTool(
      { name: "sleep", arguments: { ms: 3000, steps: 3 } },
      undefined,
      { onprogress: (p) => progress.push(p), timeout: 30_000 },
    );
    check(textOf(result) === "slept 3000 ms", `result ${JSON.stringify(result)}`);
    const messages = new Set(progress.map((p) => p.message));
    check(messages.size >= 2, `progress: ${JSON.stringify(progress)}`);
  }],
  ["sync-ask-through-elicitation-handler", async () => {
    const result = await main.client.callTool(
      { name: "ask", arguments: { question: "Which colour?" } },
      undefined,
      { timeout: 30_000 },
    );
    check(textOf(result) === "answer: blue", `result ${JSON.stringify(result)}`);
  }],
  ["task-sleep", async () => {
    const r = await drain(main.client.experimental.tasks.callToolStream(
      { name: "sleep", arguments: { ms: 600, steps: 2 } }));
    check(r.types[0] === "taskCreated", `types ${r.types}`);
    check(textOf(r.result) === "slept 600 ms", `result ${JSON.stringify(r)}`);
  }],
  ["task-ask-through-elicitation-handler", async () => {
    const r = await drain(main.client.experimental.tasks.callToolStream(
      { name: "ask", arguments: { question: "Which colour?" } }));
    check(r.types[0] === "taskCreated", `types ${r.types}`);
    check(textOf(r.result) === "answer: blue", `result ${JSON.stringify(r.result)} error ${r.error}`);
  }],
  ["task-fail-protocol", async () => {
    const r = await drain(main.client.experimental.tasks.callToolStream(
      { name: "fail", arguments: { mode: "protocol", message: "boom" } }));
    check(r.statuses.includes("failed") && r.error, `got ${JSON.stringify(r)}`);
  }],
  ["task-fail-tool", async () => {
    const r = await drain(main.client.experimental.tasks.callToolStream(
      { name: "fail", arguments: { mode: "tool", message: "tool says no" } }));
    check(r.result?.isError === true && textOf(r.result) === "tool says no", `got ${JSON.stringify(r)}`);
  }],
  ["tasks-result-list-cancel", async () => {
    const tasks = main.client.experimental.tasks;
    const created = await main.client.request(
      { method: "tools/call", params: { name: "sleep", arguments: { ms: 60000 }, task: { ttl: 60000 } } },
      (await import("@modelcontextprotocol/sdk/types.js")).CreateTaskResultSchema,
    );
    const id = created.task.taskId;
    const listed = await tasks.listTasks();
    check(listed.tasks.some((t) => t.taskId === id), `not listed: ${JSON.stringify(listed)}`);
    const cancelled = await tasks.cancelTask(id);
    check(cancelled.status === "cancelled", `cancel: ${JSON.stringify(cancelled)}`);
    const got = await tasks.getTask(id);
    check(got.status === "cancelled", `get: ${JSON.stringify(got)}`);
  }],
  ["session-spans-both-gateways", async () => {
    const { hits, sessions } = main.route;
    check(hits.A > 2 && hits.B > 2, `hits ${JSON.stringify(hits)}`);
    const sid = main.transport.sessionId;
    check(sessions.A.has(sid) && sessions.B.has(sid), "the session was not used on both gateways");
  }],
  ["client-2025-06-18-echo-and-sleep", async () => {
    const route = alternating();
    const client = new OldClient({ name: "legacy-interop-1.22", version: "1.22.0" }, { capabilities: {} });
    const transport = new OldTransport(new URL(urlA), { fetch: route.f });
    await client.connect(transport);
    check(transport.protocolVersion === "2025-06-18", `negotiated ${transport.protocolVersion}`);
    const { tools } = await client.listTools();
    check(tools.some((t) => t.name === "sleep"), "sleep not listed");
    const echo = await client.callTool({ name: "echo", arguments: { text: "hello 2025" } });
    check(textOf(echo) === "hello 2025", `echo ${JSON.stringify(echo)}`);
    const progress = [];
    const slept = await client.callTool(
      { name: "sleep", arguments: { ms: 2000, steps: 4 } },
      undefined,
      { onprogress: (p) => progress.push(p), timeout: 30_000 },
    );
    check(textOf(slept) === "slept 2000 ms", `sleep ${JSON.stringify(slept)}`);
    check(progress.length >= 2, `progress ${JSON.stringify(progress)}`);
    check(route.hits.A > 1 && route.hits.B > 1, `hits ${JSON.stringify(route.hits)}`);
    await transport.terminateSession();
    await client.close();
  }],
];

let passed = 0;
let failed = 0;
for (const [name, run] of scenarios) {
  try {
    await run();
    passed++;
    process.stdout.write(`ok ${name}\n`);
  } catch (error) {
    failed++;
    const why = error instanceof Check ? error.message : (error?.stack ?? String(error));
    process.stdout.write(`FAIL ${name}: ${String(why).replace(/\s*\n\s*/g, " ")}\n`);
  }
}
if (main) {
  await main.transport.terminateSession().catch(() => {});
  await main.client.close();
}
clearTimeout(overall);
process.stdout.write(`${passed} passed, ${failed} failed\n`);
process.exit(failed === 0 ? 0 : 1);
