#!/usr/bin/env node
// Interop test for mcp-tasks: drives a running server with the official, unmodified
// TypeScript MCP client packages (@modelcontextprotocol/client 2.4.0 and
// @modelcontextprotocol/ext-tasks 0.2.2, protocol revision 2026-07-28 + Tasks extension).
//
//   npm ci --prefix tests/interop
//   node tests/interop/interop.mjs http://127.0.0.1:PORT/mcp
//
// Prints one line per scenario (`ok <name>` / `FAIL <name>: why`) and a final
// `N passed, M failed` on stdout; exits 1 if anything failed or hung.
// Diagnostics go to stderr. INTEROP_DEBUG=1 logs every HTTP exchange live; without it,
// the HTTP exchanges of a failed scenario are printed to stderr after its FAIL line.
// INTEROP_TIMEOUT_MS overrides the overall timeout (default 60000); INTEROP_ONLY=a,b runs
// only the named scenarios (plus `discover`, which connects the shared session).
//
// How the pieces fit (see docs/architecture.md):
// - `Client` (client package) connects over `StreamableHTTPClientTransport` with version
//   negotiation pinned to 2026-07-28: it probes `server/discover` and then stamps the
//   per-request `_meta` envelope (protocol version, client info, client capabilities).
// - The ext-tasks session (`createTaskSessionFromClient`) needs, for a 2026-07-28 Tasks
//   server, a host-owned raw request path (`rawDispatch`) plus the `_meta` framing values,
//   because the SDK Client's result decoding does not accept `resultType: "task"`.
//   `tools/call` and `tasks/*` go through that path; the session adds the `_meta` framing
//   (with the tasks extension declared) itself. This script's raw coordinator sends those
//   JSON-RPC requests over its own `StreamableHTTPClientTransport` (the SDK transport derives
//   `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` from the body) and matches
//   responses by id.
// - Task status reaches the session by `tasks/get` polling (driven by ext-tasks) and by
//   `notifications/tasks` on a `subscriptions/listen` stream the host opens with
//   `client.listen({ taskIds })`; the Client hands those notifications to the session.

import {
  Client,
  SdkHttpError,
  StreamableHTTPClientTransport,
} from "@modelcontextprotocol/client";
import {
  DispatchError,
  createApplicationInputHandler,
  createTaskSessionEndpointId,
  createTaskSessionFromClient,
} from "@modelcontextprotocol/ext-tasks/client";

const PROTOCOL_VERSION = "2026-07-28";
const TASKS_EXT = "io.modelcontextprotocol/tasks";
const DEBUG = ["1", "true", "yes"].includes(
  String(process.env.INTEROP_DEBUG ?? "").toLowerCase(),
);
const OVERALL_TIMEOUT_MS = Number(process.env.INTEROP_TIMEOUT_MS ?? 60_000);
const CLIENT_INFO = { name: "mcp-tasks-interop", version: "0.1.0" };
// Declared on every request of the task-aware hosts: form elicitation (the `ask` tool
// needs it on the originating tools/call) and the tasks extension.
const TASK_CLIENT_CAPABILITIES = {
  elicitation: { form: {} },
  extensions: { [TASKS_EXT]: {} },
};

// ---------------------------------------------------------------------------
// Output and wire logging

const startedAt = Date.now();
const elapsed = () => `${((Date.now() - startedAt) / 1000).toFixed(3)}s`;
function diag(...parts) {
  process.stderr.write(`[${elapsed()}] ${parts.join(" ")}\n`);
}
const clip = (s, n = 4000) =>
  s.length > n ? `${s.slice(0, n)}… (${s.length - n} more chars)` : s;

let wireLog = []; // exchanges of the running scenario
function wire(line) {
  const entry = `[${elapsed()}] ${line}`;
  wireLog.push(entry);
  if (DEBUG) process.stderr.write(`${entry}\n`);
}

let fetchSeq = 0;
/** A fetch that records every HTTP exchange (request headers/body, status, body). */
function loggingFetch(label) {
  return async (input, init = {}) => {
    const n = ++fetchSeq;
    const headers = new Headers(init.headers ?? {});
    const shown = [];
    for (const [k, v] of headers) {
      if (k.startsWith("mcp-") || k === "accept" || k === "content-type")
        shown.push(`${k}: ${v}`);
    }
    wire(
      `#${n} ${label} → ${init.method ?? "GET"} ${String(input)} {${shown.join("; ")}} ${clip(String(init.body ?? ""))}`,
    );
    let response;
    try {
      response = await fetch(input, init);
    } catch (error) {
      wire(`#${n} ${label} ✗ fetch failed: ${error?.cause?.message ?? error.message}`);
      throw error;
    }
    const ct = response.headers.get("content-type") ?? "";
    wire(`#${n} ${label} ← HTTP ${response.status} ${ct}`);
    if (response.body === null) return response;
    const [mine, theirs] = response.body.tee();
    void (async () => {
      const reader = mine.pipeThrough(new TextDecoderStream()).getReader();
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          if (value.trim() !== "") wire(`#${n} ${label} ← ${clip(value.trim())}`);
        }
        wire(`#${n} ${label} ← (end of body)`);
      } catch (error) {
        wire(`#${n} ${label} ← (body aborted: ${error?.name ?? error})`);
      }
    })();
    return new Response(theirs, {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  };
}

// ---------------------------------------------------------------------------
// Host plumbing

/**
 * The host-owned request coordinator ext-tasks needs for V2 task traffic: it owns request
 * ids and response matching, and sends over its own SDK Streamable HTTP transport.
 */
async function createRawCoordinator(url, label) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: loggingFetch(`${label}/raw`),
  });
  const pending = new Map();
  let nextId = 1;
  transport.onmessage = (message) => {
    if (message.id !== undefined && ("result" in message || "error" in message)) {
      const waiter = pending.get(message.id);
      if (waiter === undefined) {
        diag(`${label}/raw: response for unknown id ${JSON.stringify(message.id)}`);
        return;
      }
      pending.delete(message.id);
      waiter.resolve(
        "error" in message
          ? { kind: "error", error: message.error }
          : { kind: "result", result: message.result },
      );
    } else if (message.method !== undefined && message.id === undefined) {
      diag(`${label}/raw: notification on a request stream: ${clip(JSON.stringify(message), 300)}`);
    }
  };
  transport.onerror = (error) => {
    wire(`${label}/raw transport error: ${error?.message ?? error}`);
  };
  await transport.start();

  const dispatch = (request, options = {}) => {
    const id = `${label}-raw-${nextId++}`;
    const message = { jsonrpc: "2.0", id, method: request.method };
    if (request.params !== undefined) message.params = request.params;
    const abort = new AbortController();
    const timeoutMs = options.context?.requestTimeoutMs ?? 30_000;
    return new Promise((resolve, reject) => {
      let timer;
      let settled = false;
      const finish = (fn, value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        options.signal?.removeEventListener("abort", onAbort);
        pending.delete(id);
        fn(value);
      };
      const onAbort = () => {
        abort.abort();
        finish(reject, options.signal.reason ?? new DOMException("Aborted", "AbortError"));
      };
      if (options.signal?.aborted) return onAbort();
      options.signal?.addEventListener("abort", onAbort, { once: true });
      timer = setTimeout(() => {
        abort.abort();
        finish(reject, new DispatchError(`${request.method} (${id}): no response within ${timeoutMs} ms`));
      }, timeoutMs);
      pending.set(id, {
        resolve: (value) => finish(resolve, value),
      });
      transport
        .send(message, {
          requestSignal: abort.signal,
          ...(options.context?.headers ? { headers: options.context.headers } : {}),
          onRequestStreamEnd: () => {
            if (pending.has(id))
              finish(reject, new DispatchError(`${request.method} (${id}): response stream ended without a JSON-RPC response`));
          },
        })
        .catch((error) => {
          if (!pending.has(id)) return;
          // A JSON-RPC error carried by a non-400 HTTP status (e.g. 404 -32601) is still
          // the server's answer to this request.
          if (error instanceof SdkHttpError && typeof error.data?.text === "string") {
            try {
              const body = JSON.parse(error.data.text);
              if (body?.id === id && body.error) {
                finish(resolve, { kind: "error", error: body.error });
                return;
              }
            } catch {
              // not JSON
            }
          }
          finish(reject, new DispatchError(`${request.method} (${id}): ${error?.message ?? error}`, false, { cause: error }));
        });
    });
  };
  return {
    dispatch,
    close: async () => {
      for (const [, waiter] of pending) waiter.resolve({ kind: "error", error: { code: -32603, message: "coordinator closed" } });
      pending.clear();
      await transport.close();
    },
  };
}

let endpointIdPromise;
function endpointIdFor(url) {
  endpointIdPromise ??= createTaskSessionEndpointId("mcp-tasks-interop", {
    transport: "streamable-http",
    url,
  });
  return endpointIdPromise;
}

/**
 * Connects a Client (pinned to 2026-07-28) and, when `tasks` is set, wraps it in an
 * ext-tasks session whose V2 traffic goes through a raw coordinator.
 */
async function connectHost(url, label, { tasks = true, onInputRequest } = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: loggingFetch(`${label}/sdk`),
  });
  const client = new Client(CLIENT_INFO, {
    capabilities: tasks ? TASK_CLIENT_CAPABILITIES : {},
    versionNegotiation: { mode: { pin: PROTOCOL_VERSION } },
  });
  client.onerror = (error) => wire(`${label}/sdk client error: ${error?.message ?? error}`);
  const notifications = [];
  // Installed before the session adapter, which chains to it: lets the script see what
  // the Client delivered (e.g. notifications/tasks from a listen stream).
  client.fallbackNotificationHandler = async (notification) => {
    notifications.push(notification);
  };
  await client.connect(transport, { timeout: 10_000 });
  if (!tasks) {
    return { client, notifications, close: () => client.close().catch(() => {}) };
  }
  const raw = await createRawCoordinator(url, label);
  const errors = [];
  const session = createTaskSessionFromClient(client, {
    endpointId: await endpointIdFor(url),
    rawDispatch: raw.dispatch,
    v2RequestFraming: {
      protocolVersion: client.getNegotiatedProtocolVersion() ?? PROTOCOL_VERSION,
      clientInfo: CLIENT_INFO,
      clientCapabilities: TASK_CLIENT_CAPABILITIES,
    },
    ...(onInputRequest ? { onInputRequest } : {}),
    onError: (error) => {
      errors.push(error);
      diag(`${label} session error: ${describeError(error)}`);
    },
  });
  const subscriptions = [];
  return {
    client,
    session,
    notifications,
    errors,
    /** Opens a listen stream for task notifications (the ext-tasks session consumes them). */
    async listenTasks(taskIds) {
      const sub = await client.listen({ taskIds }, { timeout: 5_000 });
      subscriptions.push(sub);
      return sub;
    },
    async close() {
      for (const sub of subscriptions) await sub.close().catch(() => {});
      await session.close().catch(() => {});
      await client.close().catch(() => {});
      await raw.close().catch(() => {});
    },
  };
}

// ---------------------------------------------------------------------------
// Helpers

/** Compact rendering of zod issues (`path: message`, unions as `either … or …`). */
function formatIssues(issues) {
  return issues
    .map((issue) => {
      const path = (issue.path ?? []).join(".") || "(root)";
      if (issue.code === "invalid_union" && Array.isArray(issue.errors))
        return `${path}: either ${issue.errors.map((branch) => `[${formatIssues(branch)}]`).join(" or ")}`;
      return `${path}: ${issue.message}`;
    })
    .join("; ");
}

function describeError(error) {
  if (error === undefined || error === null) return String(error);
  const one = (e) => {
    if (Array.isArray(e?.issues)) return `${e.name ?? "Error"}: ${formatIssues(e.issues)}`;
    let text = `${e?.name ?? "Error"}: ${e?.message ?? String(e)}`;
    if (e?.code !== undefined) text += ` (code ${e.code})`;
    if (e?.data !== undefined) text += ` data=${clip(JSON.stringify(e.data), 500)}`;
    return text;
  };
  const parts = [one(error)];
  let cause = error.cause;
  for (let depth = 0; cause !== undefined && depth < 5; depth++) {
    parts.push(`cause ${one(cause)}`);
    cause = cause?.cause;
  }
  return parts.join(" <- ");
}

class Check extends Error {}
function check(condition, message) {
  if (!condition) throw new Check(message);
}
const textOf = (result) =>
  Array.isArray(result?.content)
    ? result.content.filter((c) => c?.type === "text").map((c) => c.text).join("")
    : undefined;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const STEP = /^step (\d+)\/(\d+)$/;

function describeOutcome(outcome) {
  if (outcome.status === "completed")
    return `completed with ${clip(JSON.stringify(outcome.result), 400)}`;
  if (outcome.status === "failed") return `failed: ${describeError(outcome.error)}`;
  return outcome.status;
}

/** Calls a tool through the session and runs it to its outcome, recording task events. */
async function runTool(host, name, args, { ctx, expectTask = true, onTask, settleOptions = {}, ...callOptions } = {}) {
  if (ctx) ctx.note = `tools/call ${name} sent, no answer yet`;
  const execution = await host.session.callTool(name, args, callOptions);
  if (ctx) ctx.note = execution.kind === "task" ? `task ${execution.handle.taskId} created` : "immediate result";
  if (expectTask)
    check(execution.kind === "task", `expected a task for ${name} (extension declared), got an immediate result`);
  if (onTask && execution.kind === "task") await onTask(execution);
  const events = [];
  const { outcome } = await execution.settle({
    ...settleOptions,
    onEvent: (event) => {
      if (event.type === "task") {
        events.push(event.task);
        if (ctx)
          ctx.note = `task ${event.task.taskId}: last observed ${event.task.status}${event.task.statusMessage ? ` (${JSON.stringify(event.task.statusMessage)})` : ""}, ${events.length} snapshot(s)`;
      }
    },
  });
  return { execution, outcome, events };
}

// ---------------------------------------------------------------------------
// Scenarios

const scenarios = [];
const scenario = (name, timeoutMs, fn, { needsSession = true } = {}) =>
  scenarios.push({ name, timeoutMs, fn, needsSession });

let URL_ARG;
let main; // the shared task-aware host
const askAnswers = new Map(); // answer token -> elicitation params seen by the handler

const inputHandler = createApplicationInputHandler({
  elicitation: async (request, context) => {
    const token = context.applicationContext?.answer;
    askAnswers.set(token ?? "(none)", {
      params: request.params,
      scope: context.scope,
      delivery: context.delivery,
      taskId: context.taskId,
      inputId: context.inputId,
    });
    if (token === undefined) return { action: "cancel" };
    return { action: "accept", content: { answer: token } };
  },
  sampling: async () => {
    throw new Error("this host does not sample");
  },
  roots: async () => ({ roots: [] }),
});

scenario("discover", 15_000, async (ctx) => {
  main = await connectHost(URL_ARG, "main", { onInputRequest: inputHandler });
  ctx.note = "connected";
  const era = main.client.getProtocolEra();
  check(era === "modern", `client negotiated era ${era}, expected modern (server/discover rejected?)`);
  const version = main.client.getNegotiatedProtocolVersion();
  check(version === PROTOCOL_VERSION, `negotiated protocol version ${version}, expected ${PROTOCOL_VERSION}`);
  const ext = main.client.getServerCapabilities()?.extensions?.[TASKS_EXT];
  check(
    ext !== null && typeof ext === "object" && !Array.isArray(ext) && Object.keys(ext).length === 0,
    `server capability extensions["${TASKS_EXT}"] is ${JSON.stringify(ext)}, expected exactly {}`,
  );
  check(
    main.session.capabilities.execution && main.session.capabilities.inputResponses,
    `ext-tasks did not select the Tasks V2 protocol (capabilities ${JSON.stringify(main.session.capabilities)})`,
  );
});

scenario("echo", 10_000, async () => {
  // A plain SDK call: no ext-tasks, no tasks extension declared, so the server must answer
  // with an ordinary CallToolResult.
  const plain = await connectHost(URL_ARG, "plain", { tasks: false });
  try {
    const text = `hello ${Date.now()} ünïcødé`;
    const result = await plain.client.callTool({ name: "echo", arguments: { text } });
    check(result.isError !== true, `echo returned isError: ${clip(JSON.stringify(result), 400)}`);
    check(textOf(result) === text, `echo text ${JSON.stringify(textOf(result))}, expected ${JSON.stringify(text)}`);
  } finally {
    await plain.close();
  }
}, { needsSession: false });

scenario("echo-tasks-session", 10_000, async (ctx) => {
  // The same call through the ext-tasks session (extension declared): the server may answer
  // immediately or with a task; either way the client must surface the text.
  const text = `session echo ${Date.now()}`;
  const { outcome, execution } = await runTool(main, "echo", { text }, { ctx, expectTask: false });
  check(outcome.status === "completed", `echo (${execution.kind}) ended ${describeOutcome(outcome)}`);
  check(textOf(outcome.result) === text, `echo text ${JSON.stringify(textOf(outcome.result))}, expected ${JSON.stringify(text)}`);
});

scenario("sleep-progress", 15_000, async (ctx) => {
  const ms = 1500;
  const steps = 3;
  let listenNote = "no listen stream";
  const { outcome, events, execution } = await runTool(main, "sleep", { ms, steps }, {
    ctx,
    onTask: async (execution) => {
      // Open a listen stream for the task so status changes are pushed as well as polled.
      try {
        const sub = await main.listenTasks([execution.handle.taskId]);
        listenNote = `listen ack ${JSON.stringify(sub.honoredFilter)}`;
      } catch (error) {
        listenNote = `listen failed: ${describeError(error)}`;
        diag(`sleep-progress: ${listenNote} (continuing with polling only)`);
      }
    },
  });
  ctx.note = listenNote;
  // Distinct working-state messages in the order the client observed them. Messages that
  // are not about steps (e.g. a seed message such as "Queued for execution.") are allowed.
  const messages = [];
  for (const task of events) {
    if (task.status !== "working" || !/^step\b/i.test(task.statusMessage ?? "")) continue;
    if (messages.at(-1) !== task.statusMessage) messages.push(task.statusMessage);
  }
  const others = [...new Set(events.filter((t) => t.statusMessage !== undefined && !/^step\b/i.test(t.statusMessage)).map((t) => `${t.status}: ${t.statusMessage}`))];
  const pushed = main.notifications.filter(
    (n) => n?.method === "notifications/tasks" && n.params?.taskId === execution.handle.taskId,
  ).length;
  diag(`sleep-progress: step messages seen: ${JSON.stringify(messages)}; other messages: ${JSON.stringify(others)}; ${listenNote}; notifications/tasks delivered: ${pushed}`);
  check(outcome.status === "completed", `sleep ended ${describeOutcome(outcome)}`);
  const bad = messages.filter((m) => {
    const match = STEP.exec(m);
    return !match || Number(match[2]) !== steps || Number(match[1]) < 1 || Number(match[1]) > steps;
  });
  check(bad.length === 0, `malformed step statusMessage(s): ${JSON.stringify(bad)} (expected "step i/${steps}")`);
  const numbers = messages.map((m) => Number(STEP.exec(m)[1]));
  check(numbers.every((n, i) => i === 0 || n > numbers[i - 1]), `step messages went backwards: ${JSON.stringify(messages)}`);
  check(
    messages.length >= 2,
    `saw ${messages.length} distinct "step i/${steps}" status message(s) before the result (${JSON.stringify(messages)}), expected at least 2`,
  );
  check(textOf(outcome.result) === `slept ${ms} ms`, `result text ${JSON.stringify(textOf(outcome.result))}, expected "slept ${ms} ms"`);
});

scenario("task-notifications", 15_000, async (ctx) => {
  // Push path on its own: notifications/tasks on a listen stream reach the session.
  const ms = 2000;
  const steps = 2;
  let taskId;
  let ack;
  const { outcome } = await runTool(main, "sleep", { ms, steps }, {
    ctx,
    onTask: async (execution) => {
      taskId = execution.handle.taskId;
      const sub = await main.listenTasks([taskId]);
      ack = sub.honoredFilter;
    },
  });
  check(outcome.status === "completed", `sleep ended ${describeOutcome(outcome)}`);
  // Not checked: the acknowledged filter. Client 2.4.0 parses the acknowledgement with the
  // core SubscriptionFilter schema, which has no `taskIds`, so `honoredFilter` comes back
  // without it even when the server acknowledged the id (seen on the wire).
  diag(`task-notifications: client-reported honoredFilter ${JSON.stringify(ack)}`);
  const pushed = main.notifications
    .filter((n) => n?.method === "notifications/tasks" && n.params?.taskId === taskId)
    .map((n) => n.params);
  const summary = pushed.map((p) => `${p.status}${p.statusMessage ? `(${p.statusMessage})` : ""}`);
  diag(`task-notifications: delivered ${JSON.stringify(summary)}`);
  check(pushed.length > 0, "no notifications/tasks for the task reached the client");
  check(pushed.some((p) => p.status === "working" && STEP.test(p.statusMessage ?? "")), `no working notification with a "step i/${steps}" message: ${JSON.stringify(summary)}`);
  const last = pushed.at(-1);
  check(last.status === "completed", `last notification is ${last.status}, expected completed: ${JSON.stringify(summary)}`);
  check(textOf(last.result) === `slept ${ms} ms`, `completed notification result ${clip(JSON.stringify(last.result), 300)}`);
});

scenario("ask", 15_000, async (ctx) => {
  const answer = `blue-${Date.now()}`;
  const question = "What is your favourite colour?";
  const { outcome, events, execution } = await runTool(main, "ask", { question }, {
    ctx,
    applicationContext: { answer },
  });
  const seen = askAnswers.get(answer);
  check(seen !== undefined, `the elicitation handler was never invoked (events: ${JSON.stringify(events.map((t) => t.status))}; outcome ${describeOutcome(outcome)})`);
  check(seen.scope === "task" && seen.delivery === "task-update" && seen.taskId === execution.handle.taskId,
    `elicitation arrived as ${JSON.stringify({ scope: seen.scope, delivery: seen.delivery, taskId: seen.taskId })}, expected task-scoped input of this task`);
  const params = seen.params ?? {};
  check(params.mode === undefined || params.mode === "form", `elicitation mode ${JSON.stringify(params.mode)}, expected form`);
  const schema = params.requestedSchema;
  check(
    schema?.type === "object" &&
      schema.properties?.answer?.type === "string" &&
      JSON.stringify(schema.required) === JSON.stringify(["answer"]),
    `requestedSchema ${JSON.stringify(schema)}, expected {type: object, properties: {answer: {type: string}}, required: [answer]}`,
  );
  check(events.some((t) => t.status === "input_required"), `no input_required snapshot observed: ${JSON.stringify(events.map((t) => t.status))}`);
  check(outcome.status === "completed", `ask ended ${describeOutcome(outcome)}`);
  check(outcome.result.isError !== true, `ask result isError: ${clip(JSON.stringify(outcome.result), 300)}`);
  check(textOf(outcome.result) === `answer: ${answer}`, `result text ${JSON.stringify(textOf(outcome.result))}, expected ${JSON.stringify(`answer: ${answer}`)}`);
});

scenario("fail-protocol", 15_000, async (ctx) => {
  const message = `boom ${Date.now()}`;
  const { outcome, events } = await runTool(main, "fail", { mode: "protocol", message }, { ctx });
  check(outcome.status === "failed", `fail(protocol) ended ${describeOutcome(outcome)}, expected failed`);
  check(outcome.error.code === -32603, `error code ${outcome.error.code}, expected -32603 (${describeError(outcome.error)})`);
  check(outcome.error.message === message, `error message ${JSON.stringify(outcome.error.message)}, expected ${JSON.stringify(message)}`);
  const last = events.at(-1);
  check(last?.status === "failed", `last task snapshot ${last?.status}, expected failed`);
});

scenario("fail-tool", 15_000, async (ctx) => {
  const message = `tool says no ${Date.now()}`;
  const { outcome, events } = await runTool(main, "fail", { mode: "tool", message }, { ctx });
  check(outcome.status === "completed", `fail(tool) ended ${describeOutcome(outcome)}, expected completed`);
  check(outcome.result.isError === true, `result isError is ${JSON.stringify(outcome.result.isError)}, expected true`);
  check(textOf(outcome.result) === message, `result text ${JSON.stringify(textOf(outcome.result))}, expected ${JSON.stringify(message)}`);
  const last = events.at(-1);
  check(last?.status === "completed", `last task snapshot ${last?.status}, expected completed`);
});

scenario("cancel", 15_000, async (ctx) => {
  const execution = await main.session.callTool("sleep", { ms: 60_000, steps: 60 });
  check(execution.kind === "task", "expected a task for sleep (extension declared), got an immediate result");
  const taskId = execution.handle.taskId;
  const controller = main.session.task(taskId);
  let snap = await controller.snapshot();
  check(snap.status === "working", `task is ${snap.status} before cancellation, expected working`);
  ctx.note = "cancelling";
  await execution.cancel();
  const outcome = await execution.result();
  check(outcome.status === "cancelled", `execution outcome after cancel() is ${describeOutcome(outcome)}`);
  const deadline = Date.now() + 10_000;
  const seen = [];
  for (;;) {
    snap = await controller.snapshot(); // tasks/get through the client
    if (seen.at(-1) !== snap.status) seen.push(snap.status);
    ctx.note = `tasks/get statuses after cancel: ${JSON.stringify(seen)}`;
    if (snap.status === "cancelled") break;
    check(snap.status === "working", `task ended ${snap.status} after tasks/cancel, expected cancelled (statuses ${JSON.stringify(seen)})`);
    check(Date.now() < deadline, `task still ${snap.status} 10 s after tasks/cancel was acknowledged`);
    await sleep(200);
  }
  const again = await controller.snapshot();
  check(again.status === "cancelled", `cancelled task later reported ${again.status}`);
});

scenario("resume-by-id", 20_000, async (ctx) => {
  const ms = 2000;
  // Start the task on a first, separate host and hand it off (no cancellation).
  const first = await connectHost(URL_ARG, "resume-a");
  let taskId;
  let reference;
  try {
    const execution = await first.session.callTool("sleep", { ms, steps: 2 });
    check(execution.kind === "task", "expected a task for sleep (extension declared), got an immediate result");
    taskId = execution.handle.taskId;
    await execution.handoff((ref) => {
      reference = ref;
    });
    await execution.result(); // local detach settles at once; the remote task keeps running
  } finally {
    await first.close();
  }
  ctx.note = `task ${taskId} handed off`;
  // Follow it by id from a brand-new Client and connection.
  const second = await connectHost(URL_ARG, "resume-b");
  try {
    const byId = {
      endpointId: await endpointIdFor(URL_ARG),
      generation: "v2",
      taskId,
      originalOperation: "tools/call",
    };
    check(JSON.stringify(byId) === JSON.stringify(reference), `handoff reference ${JSON.stringify(reference)} differs from ${JSON.stringify(byId)}`);
    const resumed = await second.session.resumeTask(byId);
    check(resumed.kind === "task" && resumed.handle.taskId === taskId, "resumed execution does not follow the task id");
    const { outcome } = await resumed.settle();
    check(outcome.status === "completed", `resumed task ended ${describeOutcome(outcome)}`);
    check(textOf(outcome.result) === `slept ${ms} ms`, `result text ${JSON.stringify(textOf(outcome.result))}, expected "slept ${ms} ms"`);
  } finally {
    await second.close();
  }
});

// ---------------------------------------------------------------------------
// Runner

async function run() {
  URL_ARG = process.argv[2];
  if (!URL_ARG || !/^https?:\/\//.test(URL_ARG)) {
    process.stderr.write("usage: node tests/interop/interop.mjs http://127.0.0.1:PORT/mcp\n");
    process.exit(2);
  }
  let passed = 0;
  let failed = 0;
  let current;
  let selected = scenarios;
  const finish = (code) => {
    process.stdout.write(`${passed} passed, ${failed} failed\n`, () => process.exit(code));
  };
  const overall = setTimeout(() => {
    if (current) {
      failed++;
      process.stdout.write(`FAIL ${current.name}: overall timeout of ${OVERALL_TIMEOUT_MS} ms reached (hung)\n`);
    }
    const rest = selected.slice(selected.indexOf(current) + 1);
    for (const s of rest) {
      failed++;
      process.stdout.write(`FAIL ${s.name}: not run (overall timeout)\n`);
    }
    finish(1);
  }, OVERALL_TIMEOUT_MS);
  process.on("unhandledRejection", (reason) => diag(`unhandled rejection: ${describeError(reason)}`));

  const only = (process.env.INTEROP_ONLY ?? "").split(",").map((x) => x.trim()).filter(Boolean);
  selected = only.length === 0 ? scenarios : scenarios.filter((s) => s.name === "discover" || only.includes(s.name));
  for (const s of selected) {
    current = s;
    wireLog = [];
    const ctx = { note: undefined };
    if (s.needsSession && s.name !== "discover" && main === undefined) {
      failed++;
      process.stdout.write(`FAIL ${s.name}: not run (no connected task session)\n`);
      continue;
    }
    diag(`--- ${s.name}`);
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(
        () => reject(new Check(`timed out after ${s.timeoutMs} ms (hung)${ctx.note ? `; last: ${ctx.note}` : ""}`)),
        s.timeoutMs,
      );
    });
    try {
      await Promise.race([s.fn(ctx), timeout]);
      passed++;
      process.stdout.write(`ok ${s.name}\n`);
    } catch (error) {
      failed++;
      const why = error instanceof Check ? error.message : describeError(error);
      process.stdout.write(`FAIL ${s.name}: ${why.replace(/\s*\n\s*/g, " ")}\n`);
      if (!DEBUG && wireLog.length > 0) {
        process.stderr.write(`--- HTTP exchanges of ${s.name}:\n${wireLog.join("\n")}\n--- end of ${s.name}\n`);
      }
    } finally {
      clearTimeout(timer);
    }
  }
  current = undefined;
  clearTimeout(overall);
  if (main) await Promise.race([main.close(), sleep(2000)]);
  finish(failed === 0 ? 0 : 1);
}

await run();
