"""Load for `tests/callgrind/run.sh`: MCP requests over keep-alive HTTP connections, with
callgrind's instrumentation of the measured process switched on only around them.

    drive.py PORT warm N              N tasks, one at a time, each polled until completed
    drive.py PORT worker N PID T      instrumentation on in PID; T clients each run N/T
                                      tasks (tools/call sleep ms=0, then tasks/get every
                                      3 ms until completed); instrumentation off
    drive.py PORT gateway N PID T     a completed task first; then instrumentation on in PID
                                      and T clients each send N/T tools/call and N/T
                                      tasks/get of that task; instrumentation off
    drive.py PORT redis N PID T       as gateway, then each client polls the tasks it
                                      created until completed (one more tasks/get each,
                                      mostly) before instrumentation goes off
"""

import http.client
import json
import subprocess
import sys
import threading
import time

VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "callgrind-drive", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {
        "elicitation": {},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    },
}


def rpc(conn, method, params, name):
    params = dict(params, _meta=META)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": VERSION,
        "mcp-method": method,
    }
    if name:
        headers["mcp-name"] = name
    conn.request("POST", "/mcp", body, headers)
    reply = json.loads(conn.getresponse().read())
    if "result" not in reply:
        sys.exit(f"drive.py: {method} failed: {reply}")
    return reply["result"]


def call(conn):
    result = rpc(conn, "tools/call", {"name": "sleep", "arguments": {"ms": 0}}, "sleep")
    if result.get("resultType") != "task":
        sys.exit(f"drive.py: tools/call answered without a task: {result}")
    return result["taskId"]


def until_completed(conn, task):
    while True:
        status = rpc(conn, "tasks/get", {"taskId": task}, task)["status"]
        if status == "completed":
            return
        if status in ("failed", "cancelled"):
            sys.exit(f"drive.py: task {task} ended {status}")
        time.sleep(0.003)


def clients(port, count, each):
    def run():
        try:
            each(http.client.HTTPConnection("127.0.0.1", port))
        except BaseException as e:  # a failed client fails the run
            failures.append(e)

    failures = []
    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        sys.exit(f"drive.py: a client failed: {failures[0]!r}")


def instrument(pid, on):
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", pid], check=True,
                   capture_output=True)


def main():
    port, mode, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    conn = http.client.HTTPConnection("127.0.0.1", port)
    if mode == "warm":
        # A worker under valgrind takes a while to announce its tools.
        deadline = time.time() + 60
        while not any(t["name"] == "sleep" for t in rpc(conn, "tools/list", {}, "")["tools"]):
            if time.time() > deadline:
                sys.exit("drive.py: no worker announced the sleep tool within 60 s")
            time.sleep(0.2)
        for _ in range(n):
            until_completed(conn, call(conn))
        return
    pid, count = sys.argv[4], int(sys.argv[5])
    per_client = n // count
    if mode == "worker":
        def each(c):
            for _ in range(per_client):
                until_completed(c, call(c))
        instrument(pid, True)
        clients(port, count, each)
        instrument(pid, False)
    elif mode in ("gateway", "redis"):
        done = call(conn)
        until_completed(conn, done)

        def each(c):
            created = []
            for _ in range(per_client):
                created.append(call(c))
                if rpc(c, "tasks/get", {"taskId": done}, done)["status"] != "completed":
                    sys.exit("drive.py: the completed task is not completed")
            if mode == "redis":
                # The worker's part of each task (its read and finish) is in the unit: wait
                # for it, at the cost of one more tasks/get per task (more if not done yet).
                for task in created:
                    until_completed(c, task)
        instrument(pid, True)
        clients(port, count, each)
        instrument(pid, False)
    else:
        sys.exit(f"drive.py: unknown mode {mode}")


if __name__ == "__main__":
    main()
