//! Generated JSON-RPC bodies: bytes of the fuzz input drawn, in a fixed order, into a request
//! and the [`Shape`] of what was drawn. The oracle (`expect`) is `request_decoder.rs`'s.

use serde_json::{Map, Value, json};

use crate::{CAPS_KEY, METHOD_POOL, VERSION, VERSION_KEY};

/// Bytes to choices; zeros once exhausted.
pub(crate) struct Src<'a>(pub(crate) &'a [u8]);

impl Src<'_> {
    pub(crate) fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    pub(crate) fn pick(&mut self, n: u8) -> u8 {
        self.byte() % n
    }

    /// A short string: a length byte, then that many bytes (lossy UTF-8).
    pub(crate) fn string(&mut self) -> String {
        let len = usize::from(self.byte() % 24).min(self.0.len());
        let (s, rest) = self.0.split_at(len);
        self.0 = rest;
        String::from_utf8_lossy(s).into_owned()
    }

    /// A JSON value of bounded depth.
    pub(crate) fn value(&mut self, depth: u8) -> Value {
        match self.pick(if depth == 0 { 5 } else { 7 }) {
            0 => Value::Null,
            1 => Value::Bool(self.byte() & 1 == 1),
            2 => json!(i64::from(self.byte() as i8) * 1_000_003),
            3 => json!(f64::from(self.byte()) / 7.0),
            4 => Value::String(self.string()),
            5 => Value::Array((0..self.pick(4)).map(|_| self.value(depth - 1)).collect()),
            _ => {
                let mut m = Map::new();
                for _ in 0..self.pick(4) {
                    let k = self.string();
                    m.insert(k, self.value(depth - 1));
                }
                Value::Object(m)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdKind {
    Int,
    Str,
    Absent,
    Null,
    Float,
    Bool,
    Obj,
    Arr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetaKind {
    Valid,
    Missing,
    NotObject,
    NoVersion,
    VersionNotString,
    OtherVersion,
    NoCaps,
    CapsNotObject,
}

/// What a generated body is, for the oracle.
pub(crate) struct Shape {
    pub(crate) id: IdKind,
    pub(crate) jsonrpc_ok: bool,
    pub(crate) method: Option<String>,
    pub(crate) params_ok: bool,
    pub(crate) meta: MetaKind,
    /// `params.name` / `params.taskId` is a string, for methods that need one.
    pub(crate) name_ok: bool,
}

/// A generated request object, and what it is.
pub(crate) struct Generated {
    /// The request object.
    pub(crate) body: Map<String, Value>,
    /// Its params as drawn (also when `params` was then sent as something else).
    pub(crate) params: Map<String, Value>,
    /// The params member `Mcp-Name` names, for methods that have one.
    pub(crate) name_field: Option<&'static str>,
    pub(crate) shape: Shape,
}

impl Generated {
    /// Draw every part of a request in turn: id, `jsonrpc`, method, `_meta`, params, and
    /// the request object's other members.
    pub(crate) fn draw(src: &mut Src<'_>) -> Generated {
        let (id_kind, id) = draw_id(src);
        let jsonrpc = match src.pick(10) {
            0 => None,
            1 => Some(json!("1.0")),
            2 => Some(json!(2.0)),
            3 => Some(json!("2.0 ")),
            _ => Some(json!("2.0")),
        };
        let jsonrpc_ok = jsonrpc == Some(json!("2.0"));
        let method: Option<Value> = match src.pick(12) {
            0 => None,
            1 => Some(src.value(1)),
            2 => Some(Value::String(src.string())),
            _ => {
                let i = usize::from(src.byte()) % METHOD_POOL.len();
                Some(json!(METHOD_POOL[i]))
            }
        };
        let method_str = method.as_ref().and_then(Value::as_str).map(str::to_owned);
        let (meta_kind, meta) = draw_meta(src);
        let name_field = match method_str.as_deref() {
            Some("tools/call") => Some("name"),
            Some("tasks/get" | "tasks/update" | "tasks/cancel") => Some("taskId"),
            _ => None,
        };
        let (params, name_ok) = draw_params(src, meta, name_field);
        let params_value = match src.pick(12) {
            0 => None,
            1 => Some(Value::Array(vec![Value::Object(params.clone())])),
            2 => Some(src.value(0)),
            _ => Some(Value::Object(params.clone())),
        };
        let params_ok = matches!(params_value, None | Some(Value::Object(_)));
        // Without params at all, `_meta` is missing.
        let meta_kind = if params_value.is_none() {
            MetaKind::Missing
        } else {
            meta_kind
        };
        let body = draw_request_object(src, jsonrpc, id, method, params_value);
        Generated {
            body,
            params,
            name_field,
            shape: Shape {
                id: id_kind,
                jsonrpc_ok,
                method: method_str,
                params_ok,
                meta: meta_kind,
                name_ok,
            },
        }
    }
}

pub(crate) fn draw_id(src: &mut Src<'_>) -> (IdKind, Option<Value>) {
    let id_kind = match src.pick(16) {
        0..=4 => IdKind::Int,
        5..=8 => IdKind::Str,
        9 | 10 => IdKind::Absent,
        11 => IdKind::Null,
        12 => IdKind::Float,
        13 => IdKind::Bool,
        14 => IdKind::Obj,
        _ => IdKind::Arr,
    };
    let id = match id_kind {
        IdKind::Int => Some(json!(i64::from(src.byte() as i8) * 977)),
        IdKind::Str => Some(Value::String(src.string())),
        IdKind::Absent => None,
        IdKind::Null => Some(Value::Null),
        IdKind::Float => Some(json!(f64::from(src.byte()) + 0.5)),
        IdKind::Bool => Some(Value::Bool(true)),
        IdKind::Obj => Some(json!({"id": 1})),
        IdKind::Arr => Some(json!([1])),
    };
    (id_kind, id)
}

/// `params._meta` (`None`: not sent) and what it is.
pub(crate) fn draw_meta(src: &mut Src<'_>) -> (MetaKind, Option<Value>) {
    let meta_kind = match src.pick(14) {
        0 => MetaKind::Missing,
        1 => MetaKind::NotObject,
        2 => MetaKind::NoVersion,
        3 => MetaKind::VersionNotString,
        4 => MetaKind::OtherVersion,
        5 => MetaKind::NoCaps,
        6 => MetaKind::CapsNotObject,
        _ => MetaKind::Valid,
    };
    let caps = if src.byte() & 1 == 1 {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}})
    } else {
        json!({})
    };
    let meta = match meta_kind {
        MetaKind::Valid => Some(json!({VERSION_KEY: VERSION, CAPS_KEY: caps})),
        MetaKind::Missing => None,
        MetaKind::NotObject => Some(src.value(0)),
        MetaKind::NoVersion => Some(json!({CAPS_KEY: caps})),
        MetaKind::VersionNotString => Some(json!({VERSION_KEY: 20260728, CAPS_KEY: caps})),
        MetaKind::OtherVersion => {
            let v = match src.pick(3) {
                0 => "2025-11-25".to_owned(),
                1 => "1900-01-01".to_owned(),
                _ => src.string(),
            };
            Some(json!({VERSION_KEY: v, CAPS_KEY: caps}))
        }
        MetaKind::NoCaps => Some(json!({VERSION_KEY: VERSION})),
        MetaKind::CapsNotObject => Some(json!({VERSION_KEY: VERSION, CAPS_KEY: src.value(0)})),
    };
    // A drawn "other" version may happen to be the supported one.
    let meta_kind = match (meta_kind, &meta) {
        (MetaKind::OtherVersion, Some(m)) if m[VERSION_KEY] == VERSION => MetaKind::Valid,
        (k, _) => k,
    };
    (meta_kind, meta)
}

/// The params members: `_meta`, `name` and `taskId` (the one `name_field` names usually
/// right), and now and then others; with whether the named one is a string.
pub(crate) fn draw_params(
    src: &mut Src<'_>,
    meta: Option<Value>,
    name_field: Option<&str>,
) -> (Map<String, Value>, bool) {
    let mut params = Map::new();
    if let Some(m) = meta {
        params.insert("_meta".into(), m);
    }
    let mut name_ok = true;
    for field in ["name", "taskId"] {
        let is_required = name_field == Some(field);
        match src.pick(8) {
            0 if is_required => {
                name_ok = false;
            }
            1 => {
                params.insert(field.into(), src.value(1));
                if is_required && !params[field].is_string() {
                    name_ok = false;
                }
            }
            2 | 3 => {
                let v = match src.pick(4) {
                    0 => "greet".to_owned(),
                    1 => "tsk_AAAAAAAAAAAAAAAAAAAAAA".to_owned(),
                    _ => src.string(),
                };
                params.insert(field.into(), Value::String(v));
            }
            _ if is_required => {
                params.insert(field.into(), json!("echo"));
            }
            _ => {}
        }
    }
    for field in ["arguments", "inputResponses", "notifications", "cursor"] {
        if src.pick(4) == 0 {
            params.insert(field.into(), src.value(2));
        }
    }
    if src.pick(4) == 0 {
        let k = src.string();
        if !matches!(k.as_str(), "_meta" | "name" | "taskId") {
            params.insert(k, src.value(2));
        }
    }
    (params, name_ok)
}

/// The request object around the drawn members, now and then with a `result` or an
/// unknown member.
pub(crate) fn draw_request_object(
    src: &mut Src<'_>,
    jsonrpc: Option<Value>,
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
) -> Map<String, Value> {
    let mut obj = Map::new();
    if let Some(j) = jsonrpc {
        obj.insert("jsonrpc".into(), j);
    }
    if let Some(i) = id {
        obj.insert("id".into(), i);
    }
    if let Some(m) = method {
        obj.insert("method".into(), m);
    }
    if let Some(p) = params {
        obj.insert("params".into(), p);
    }
    if src.pick(8) == 0 {
        obj.insert("result".into(), json!({}));
    }
    if src.pick(8) == 0 {
        let k = src.string();
        if !matches!(
            k.as_str(),
            "jsonrpc" | "id" | "method" | "params" | "result" | "error"
        ) {
            obj.insert(k, src.value(1));
        }
    }
    obj
}

/// Cut or insert a byte in the serialisation, for two `mode`s in eight; whether it did.
pub(crate) fn damage(mode: u8, src: &mut Src<'_>, body: &mut Vec<u8>) -> bool {
    match (mode >> 1) % 8 {
        0 => {
            let cut = usize::from(src.byte()) % (body.len() + 1);
            body.truncate(cut);
            true
        }
        1 => {
            let at = usize::from(src.byte()) % (body.len() + 1);
            let b = src.byte();
            body.insert(at, b);
            true
        }
        _ => false,
    }
}
