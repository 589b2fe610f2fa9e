//! Table cases with bad methods and params: unknown and removed methods (404 / -32601), and
//! wrong types and missing fields in the params of `tools/call`, `tools/list`, `tasks/*`
//! and `subscriptions/listen` (in-band -32602 unless noted).
//!
//! Checklist ids cited: B-08, B-23, B-29, T-05, T-24, T-32, T-33, T-39, T-41, T-56.

use mcp_tasks_tests::{TASKS, caps_none, caps_tasks};
use serde_json::{Map, Value, json};

use super::{Expect, Table, call_h, err, err_mentioning, list_h, listen, listen_h};
use crate::bad_input::{UNKNOWN_TASK, enc, rq, sentinel, set, std_headers};

/// Unknown and removed methods (404 / -32601: B-23, T-39, T-41).
pub(super) fn unknown_methods(t: &mut Table) {
    let tasks = caps_tasks();
    let long_method = "x/".repeat(5_000);
    for method in [
        "ping",
        "tasks/list",
        "tasks/result",
        "resources/subscribe",
        "logging/setLevel",
        "notifications/initialized",
        "no/such/method",
        "TOOLS/LIST",
        "",
        long_method.as_str(),
    ] {
        let label: String = method.chars().take(30).collect();
        t.add(
            format!("method: unknown {label:?}"),
            std_headers(method, None),
            enc(&rq(
                json!("m"),
                method,
                json!({"taskId": UNKNOWN_TASK}),
                &tasks,
            )),
            err(404, -32601, Some(json!("m"))),
        );
    }
}

/// Wrong types and missing fields in params (in-band -32602 unless noted).
pub(super) fn wrong_params(t: &mut Table) {
    let none = caps_none();
    let tasks = caps_tasks();
    let id41 = || Some(json!(41));
    let call = |params: Value, caps: &Value| enc(&rq(json!(41), "tools/call", params, caps));
    t.add(
        "tools/call: name is a number",
        call_h(Some(b"42")),
        call(json!({"name": 42}), &none),
        err_mentioning(200, -32602, id41(), "name"),
    );
    t.add(
        "tools/call: name missing",
        call_h(Some(b"greet")),
        call(json!({"arguments": {}}), &none),
        err_mentioning(200, -32602, id41(), "name"),
    );
    t.add(
        "tools/call: unknown tool",
        call_h(Some(b"no_such_tool")),
        call(json!({"name": "no_such_tool"}), &none),
        err_mentioning(200, -32602, id41(), "no_such_tool"),
    );
    for (name, args) in [
        ("array", json!([1, 2])),
        ("string", json!("text")),
        ("null", Value::Null),
        ("number", json!(5)),
    ] {
        t.add(
            format!("tools/call: arguments {name}"),
            call_h(Some(b"greet")),
            call(json!({"name": "greet", "arguments": args}), &none),
            err_mentioning(200, -32602, id41(), "arguments"),
        );
    }
    t.add(
        "tools/call: arguments break the schema (tool error, no task)",
        call_h(Some(b"echo")),
        call(json!({"name": "echo", "arguments": {"text": 5}}), &none),
        Expect::ToolError { id: json!(41) },
    );
    t.add(
        "tools/call: required argument missing (tool error, no task)",
        call_h(Some(b"echo")),
        call(json!({"name": "echo", "arguments": {}}), &none),
        Expect::ToolError { id: json!(41) },
    );
    t.add(
        "tools/call: task-only tool without the extension (B-08)",
        call_h(Some(b"failing_job")),
        call(json!({"name": "failing_job"}), &none),
        Expect::Error {
            status: 400,
            code: -32021,
            id: id41(),
            data: Some(json!({"requiredCapabilities": {"extensions": {TASKS: {}}}})),
            mentions: None,
        },
    );
    t.add(
        "tools/list: a cursor this server never issued",
        list_h(),
        enc(&rq(
            json!(41),
            "tools/list",
            json!({"cursor": "bogus"}),
            &none,
        )),
        err_mentioning(200, -32602, id41(), "cursor"),
    );

    let task_req =
        |method: &str, params: Value, caps: &Value| enc(&rq(json!(41), method, params, caps));
    let huge = "a".repeat(100 * 1024);
    for (name, params, header) in [
        ("taskId a number", json!({"taskId": 7}), Some(b"7".to_vec())),
        (
            "taskId missing",
            json!({}),
            Some(UNKNOWN_TASK.as_bytes().to_vec()),
        ),
        (
            "taskId null",
            json!({"taskId": null}),
            Some(b"null".to_vec()),
        ),
        (
            "taskId an object",
            json!({"taskId": {"id": UNKNOWN_TASK}}),
            Some(UNKNOWN_TASK.as_bytes().to_vec()),
        ),
    ] {
        for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
            let mut params = params.clone();
            if method == "tasks/update" {
                params["inputResponses"] = json!({});
            }
            t.add(
                format!("{method}: {name}"),
                set(std_headers(method, None), "mcp-name", header.as_deref()),
                task_req(method, params, &tasks),
                err_mentioning(200, -32602, id41(), "taskId"),
            );
        }
    }
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let mut params = json!({"taskId": UNKNOWN_TASK});
        if method == "tasks/update" {
            params["inputResponses"] = json!({"k": {"action": "accept", "content": {}}});
        }
        t.add(
            format!("{method}: unknown task id (T-24, T-32)"),
            std_headers(method, Some(UNKNOWN_TASK)),
            task_req(method, params.clone(), &tasks),
            err_mentioning(200, -32602, id41(), "not found"),
        );
        t.add(
            format!("{method}: without the Tasks extension (T-05)"),
            std_headers(method, Some(UNKNOWN_TASK)),
            task_req(method, params.clone(), &none),
            err(400, -32021, id41()),
        );
        let mut params = params;
        params["taskId"] = json!(huge);
        t.add(
            format!("{method}: 100 KB task id"),
            std_headers(method, Some(&huge)),
            task_req(method, params.clone(), &tasks),
            err(200, -32602, id41()),
        );
        t.add(
            format!("{method}: 100 KB task id, short Mcp-Name"),
            std_headers(method, Some("aaaa")),
            task_req(method, params, &tasks),
            err(400, -32020, id41()),
        );
        for odd in ["", "mcpt:task:*", "../../etc/passwd", "tsk_*", "tsk_\u{e9}"] {
            let mut params = json!({"taskId": odd});
            if method == "tasks/update" {
                params["inputResponses"] = json!({});
            }
            t.add(
                format!("{method}: odd task id {odd:?}"),
                set(
                    std_headers(method, None),
                    "mcp-name",
                    Some(&sentinel(odd.as_bytes())),
                ),
                task_req(method, params, &tasks),
                err(200, -32602, id41()),
            );
        }
    }
    let update = |responses: Option<Value>| {
        let mut params = json!({"taskId": UNKNOWN_TASK});
        if let Some(r) = responses {
            params["inputResponses"] = r;
        }
        task_req("tasks/update", params, &tasks)
    };
    let update_h = || std_headers("tasks/update", Some(UNKNOWN_TASK));
    for (name, responses) in [
        ("an array", Some(json!([{"action": "accept"}]))),
        ("a string", Some(json!("accept"))),
        ("null", Some(Value::Null)),
        ("a number", Some(json!(1))),
        ("missing", None),
    ] {
        t.add(
            format!("tasks/update: inputResponses {name} (T-33)"),
            update_h(),
            update(responses),
            err_mentioning(200, -32602, id41(), "inputResponses"),
        );
    }
    let many: Map<String, Value> = (0..65)
        .map(|i| (format!("k{i}"), json!({"action": "decline"})))
        .collect();
    t.add(
        "tasks/update: 65 inputResponses (T-56)",
        update_h(),
        update(Some(Value::Object(many))),
        err_mentioning(200, -32602, id41(), "inputResponses"),
    );

    let ids_1001: Vec<String> = (0..1001).map(|i| format!("tsk_{i:032}")).collect();
    for (name, params) in [
        ("notifications missing", json!({})),
        (
            "notifications an array",
            json!({"notifications": [{"taskIds": []}]}),
        ),
        ("notifications a string", json!({"notifications": "all"})),
        ("notifications null", json!({"notifications": null})),
        (
            "taskIds not an array",
            json!({"notifications": {"taskIds": UNKNOWN_TASK}}),
        ),
        (
            "taskIds with numbers",
            json!({"notifications": {"taskIds": [1, 2]}}),
        ),
        (
            "1001 taskIds (T-56)",
            json!({"notifications": {"taskIds": ids_1001}}),
        ),
    ] {
        t.add(
            format!("subscriptions/listen: {name}"),
            listen_h(),
            listen(params, &tasks),
            err(200, -32602, id41()),
        );
    }
    t.add(
        "subscriptions/listen: taskIds without the Tasks extension",
        listen_h(),
        listen(json!({"notifications": {"taskIds": []}}), &none),
        err(400, -32021, id41()),
    );
}
