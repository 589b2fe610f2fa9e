//! The request body in one serde pass: the members `envelope.rs` reads are built, the
//! others only scanned. What the members mean, and every check on them, is `envelope.rs`'s.

use std::borrow::Cow;
use std::fmt;

use mcp_tasks_protocol::meta::{
    CLIENT_CAPABILITIES_KEY, IDEMPOTENCY_KEY, PRIORITY_KEY, PROTOCOL_VERSION_KEY, TRACEPARENT_KEY,
};
use mcp_tasks_protocol::params::META;
use serde::de::{
    Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::{Map, Value};

use crate::error::DispatchError;

/// The members of a request object, scanned from the body (B-02, B-03): a parse error for
/// anything that is not one JSON value, an invalid request for a batch or a non-object.
pub(super) fn request_members(body: &[u8]) -> Result<Members<'_>, DispatchError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let top = Level::Request
        .deserialize(&mut de)
        .and_then(|top| de.end().map(|()| top))
        .map_err(|e| DispatchError::Parse(e.to_string()))?;
    match top {
        Top::Object(obj) => Ok(obj),
        Top::Array => Err(DispatchError::InvalidRequest(
            "batches are not supported".into(),
        )),
        Top::Other => Err(DispatchError::InvalidRequest(
            "the body must be a JSON-RPC request object".into(),
        )),
    }
}

/// The body in one pass: the members of the request object, of its `params` and of their
/// `_meta`. The members the gateway reads are built as they are scanned; the others
/// (`clientInfo`, unknown `_meta` keys, `result`) are scanned and dropped
/// ([`Level::Unread`]), so they cost no tree of maps: building the whole body as a `Value`
/// was a fifth of the gateway's instructions per request. serde_json's nesting limit holds
/// over the whole body either way.
enum Top<'a> {
    Object(Members<'a>),
    Array,
    Other,
}

/// An object's members in order, each name unescaped. A repeated name keeps its last value
/// on lookup, as `Value` parsing does.
#[derive(Default)]
pub(super) struct Members<'a>(Vec<(Cow<'a, str>, Slot<'a>)>);

/// A member's value: built; for the nested member on the way to `_meta` (see [`Level`]) its
/// own members, or that it was not an object; or, for a member that is not read, only that
/// it was sent.
pub(super) enum Slot<'a> {
    Value(Value),
    Object(Members<'a>),
    NotObject,
    Skipped,
}

impl<'a> Members<'a> {
    pub(super) fn slot(&self, name: &str) -> Option<&Slot<'a>> {
        self.0.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// A member's value (`None`: not sent).
    pub(super) fn value(&self, name: &str) -> Option<&Value> {
        match self.slot(name) {
            Some(Slot::Value(v)) => Some(v),
            _ => None,
        }
    }

    /// A member, taken out (a repeated name: the last, and the others are dropped too, so
    /// none of them is read again).
    pub(super) fn take_slot(&mut self, name: &str) -> Option<Slot<'a>> {
        let mut taken = None;
        self.0.retain_mut(|(k, slot)| {
            if k != name {
                return true;
            }
            taken = Some(std::mem::replace(slot, Slot::Skipped));
            false
        });
        taken
    }

    /// A member's value, taken out (`None`: not sent, or not a built value).
    pub(super) fn take(&mut self, name: &str) -> Option<Value> {
        match self.take_slot(name)? {
            Slot::Value(v) => Some(v),
            _ => None,
        }
    }

    /// The built members as a map (a repeated name keeps its first place and last value, as
    /// `Value` parsing does): `params` without `_meta`.
    pub(super) fn into_map(self) -> Map<String, Value> {
        let mut map = Map::with_capacity(self.0.len());
        for (name, slot) in self.0 {
            if let Slot::Value(v) = slot {
                map.insert(name.into_owned(), v);
            }
        }
        map
    }
}

/// Where in the body a value is, and so which of an object's members are built, which is
/// read member by member (`params` in the request, `_meta` in `params`), and which are
/// only scanned (`Unread`). An unread value is visited, not skipped as raw text, so serde's
/// nesting limit, number range and escape checks hold in it: a body nested too deep, with
/// a number no float holds or a lone surrogate anywhere stays a parse error (-32700).
#[derive(Clone, Copy, PartialEq)]
enum Level {
    Request,
    Params,
    Meta,
    Unread,
}

impl Level {
    /// The member read member by member, and its level.
    fn nested(self) -> Option<(&'static str, Level)> {
        match self {
            Level::Request => Some(("params", Level::Params)),
            Level::Params => Some((META, Level::Meta)),
            Level::Meta | Level::Unread => None,
        }
    }

    /// Whether a member is built to be read (every member of `params`: they are its typed
    /// params).
    fn keeps(self, name: &str) -> bool {
        match self {
            Level::Request => matches!(name, "id" | "jsonrpc" | "method"),
            Level::Params => true,
            Level::Meta => {
                name == PROTOCOL_VERSION_KEY
                    || name == CLIENT_CAPABILITIES_KEY
                    || name == TRACEPARENT_KEY
                    || name == IDEMPOTENCY_KEY
                    || name == PRIORITY_KEY
            }
            Level::Unread => false,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Level {
    type Value = Top<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Top<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Level {
    type Value = Top<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top<'de>, A::Error> {
        if self == Level::Unread {
            while map.next_key::<IgnoredAny>()?.is_some() {
                map.next_value_seed(Level::Unread)?;
            }
            return Ok(Top::Object(Members(Vec::new())));
        }
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(4));
        while let Some(Name(name)) = map.next_key()? {
            let slot = match self.nested() {
                Some((nested, level)) if name == nested => match map.next_value_seed(level)? {
                    Top::Object(m) => Slot::Object(m),
                    Top::Array | Top::Other => Slot::NotObject,
                },
                _ if self.keeps(&name) => Slot::Value(map.next_value()?),
                _ => {
                    map.next_value_seed(Level::Unread)?;
                    Slot::Skipped
                }
            };
            members.push((name, slot));
        }
        Ok(Top::Object(Members(members)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top<'de>, A::Error> {
        while seq.next_element_seed(Level::Unread)?.is_some() {}
        Ok(Top::Array)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Top<'de>, E> {
        Ok(Top::Other)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Top<'de>, E> {
        Ok(Top::Other)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Top<'de>, E> {
        Ok(Top::Other)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Top<'de>, E> {
        Ok(Top::Other)
    }
    fn visit_str<E>(self, _: &str) -> Result<Top<'de>, E> {
        Ok(Top::Other)
    }
    fn visit_unit<E>(self) -> Result<Top<'de>, E> {
        Ok(Top::Other)
    }
}

/// A member name, borrowed from the body unless it holds escapes.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(Visit)
    }
}
