#!/usr/bin/env python3
"""Interop test for mcp-tasks with the official Python SDK (PyPI `mcp`, pinned in
requirements.txt), unmodified, over Streamable HTTP at protocol 2025-11-25. Every HTTP
request goes to one of two gateways in turn (an httpx transport that alternates), so the
session is started on one gateway and continued on the other.

    python3 -m venv target/py && target/py/bin/pip install -r tests/python/requirements.txt
    target/py/bin/python tests/python/sdk_client.py http://127.0.0.1:A/mcp http://127.0.0.1:B/mcp

Prints `ok <name>` / `FAIL <name>: why` per scenario and `N passed, M failed`; exits 1 on
any failure.
"""

import asyncio
import sys
from datetime import timedelta

import httpx
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError


class Alternating(httpx.AsyncBaseTransport):
    """Sends request n to gateway n mod 2; counts the requests each got."""

    def __init__(self, urls):
        self.urls = [httpx.URL(u) for u in urls]
        self.hits = [0, 0]
        self.n = 0
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request):
        which = self.n % 2
        self.n += 1
        self.hits[which] += 1
        target = self.urls[which]
        request.url = request.url.copy_with(host=target.host, port=target.port)
        request.headers["host"] = f"{target.host}:{target.port}"
        return await self.inner.handle_async_request(request)

    async def aclose(self):
        await self.inner.aclose()


class Check(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Check(message)


def text_of(result):
    return next((c.text for c in result.content if c.type == "text"), None)


async def answer_blue(context, params):
    return types.ElicitResult(action="accept", content={"answer": "blue"})


async def scenarios(session, transport):
    init = await session.initialize()
    yield "initialize", lambda: check(
        init.protocolVersion == "2025-11-25"
        and init.capabilities.tasks is not None
        and init.capabilities.tasks.requests.tools.call is not None,
        f"initialize: {init}",
    )

    tools = (await session.list_tools()).tools
    support = {t.name: t.execution.taskSupport if t.execution else None for t in tools}
    yield "tools-list", lambda: check(
        support.get("sleep") == "optional"
        and support.get("ask") == "optional"
        and support.get("echo") == "forbidden",
        f"taskSupport: {support}",
    )

    echo = await session.call_tool("echo", {"text": "hello"})
    yield "echo", lambda: check(text_of(echo) == "hello" and not echo.isError, f"{echo}")

    progress = []

    async def on_progress(value, total, message):
        progress.append((value, total, message))

    sleep = await session.call_tool(
        "sleep",
        {"ms": 1500, "steps": 3},
        read_timeout_seconds=timedelta(seconds=30),
        progress_callback=on_progress,
    )
    yield "sync-sleep-with-progress", lambda: check(
        text_of(sleep) == "slept 1500 ms" and len({m for _, _, m in progress}) >= 2,
        f"result {sleep} progress {progress}",
    )

    ask = await session.call_tool(
        "ask", {"question": "Which colour?"}, read_timeout_seconds=timedelta(seconds=30)
    )
    yield "sync-ask-through-elicitation-callback", lambda: check(
        text_of(ask) == "answer: blue", f"{ask}"
    )

    tool_error = await session.call_tool("fail", {"mode": "tool", "message": "tool says no"})
    yield "fail-as-tool-error", lambda: check(
        tool_error.isError and text_of(tool_error) == "tool says no", f"{tool_error}"
    )

    try:
        r = await session.call_tool("fail", {"mode": "protocol", "message": "boom"})
        protocol_error = f"no error: {r}"
    except McpError as e:
        protocol_error = e.error.message
    yield "fail-as-protocol-error", lambda: check(
        protocol_error == "boom", f"{protocol_error}"
    )

    tasks = session.experimental
    created = await tasks.call_tool_as_task("sleep", {"ms": 600, "steps": 2}, ttl=120000)
    task_id = created.task.taskId
    got = await tasks.get_task(task_id)
    statuses = [s.status async for s in tasks.poll_task(task_id)]
    result = await tasks.get_task_result(task_id, types.CallToolResult)
    yield "tasks-create-get-result", lambda: check(
        got.taskId == task_id
        and statuses[-1] == "completed"
        and text_of(result) == "slept 600 ms",
        f"get {got} statuses {statuses} result {result}",
    )

    long = await tasks.call_tool_as_task("sleep", {"ms": 60000, "steps": 60}, ttl=120000)
    cancelled = await tasks.cancel_task(long.task.taskId)
    after = await tasks.get_task(long.task.taskId)
    yield "tasks-cancel", lambda: check(
        cancelled.status == "cancelled" and after.status == "cancelled",
        f"cancel {cancelled} then {after}",
    )

    listed = await tasks.list_tasks()
    ids = {t.taskId for t in listed.tasks}
    yield "tasks-list", lambda: check(
        {task_id, long.task.taskId} <= ids, f"listed {ids}"
    )

    yield "both-gateways-served", lambda: check(
        min(transport.hits) >= 5, f"requests per gateway {transport.hits}"
    )


async def main(urls):
    transport = Alternating(urls)
    passed = failed = 0
    async with httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(30, read=300)) as http:
        async with streamable_http_client(urls[0], http_client=http) as (read, write, _):
            async with ClientSession(
                read, write, elicitation_callback=answer_blue
            ) as session:
                steps = scenarios(session, transport)
                while True:
                    try:
                        name, verdict = await steps.__anext__()
                    except StopAsyncIteration:
                        break
                    except Exception as e:  # a step's call failed: the rest cannot run
                        print(f"FAIL (aborted): {type(e).__name__}: {e}")
                        failed += 1
                        break
                    try:
                        verdict()
                        print(f"ok {name}")
                        passed += 1
                    except Check as e:
                        print(f"FAIL {name}: {e}")
                        failed += 1
    print(f"python sdk mcp {mcp_version()}: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


def mcp_version():
    from importlib.metadata import version

    return version("mcp")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: sdk_client.py URL_A URL_B", file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(asyncio.wait_for(main(sys.argv[1:]), 120)))
