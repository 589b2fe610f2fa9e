//! Method names (base-protocol.md §5–§12, tasks-extension.md §7–§12, and the 2025 methods
//! the gateway still serves in sessions): one enum, spelled once.

use std::fmt;

/// A JSON-RPC method this server knows, in either protocol era. Which era serves which is the
/// gateway's business; a name that is not here is answered with -32601 by both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// `server/discover` (2026-07-28, B-10).
    ServerDiscover,
    /// `tools/list`.
    ToolsList,
    /// `tools/call`.
    ToolsCall,
    /// `tasks/get`.
    TasksGet,
    /// `tasks/update` (2026-07-28).
    TasksUpdate,
    /// `tasks/cancel`.
    TasksCancel,
    /// `subscriptions/listen` (2026-07-28).
    SubscriptionsListen,
    /// `prompts/list` (served when an upstream offers prompts).
    PromptsList,
    /// `prompts/get`.
    PromptsGet,
    /// `resources/list` (served when an upstream offers resources).
    ResourcesList,
    /// `resources/templates/list`.
    ResourcesTemplatesList,
    /// `resources/read`.
    ResourcesRead,
    /// `initialize` (2025: the start of a session).
    Initialize,
    /// `ping` (2025).
    Ping,
    /// `tasks/result` (2025-11-25).
    TasksResult,
    /// `tasks/list` (2025-11-25).
    TasksList,
    /// `notifications/cancelled` (2025: a client gave up on one of its requests).
    NotificationsCancelled,
}

impl Method {
    /// Every method, in the order above.
    pub const ALL: [Method; 17] = [
        Method::ServerDiscover,
        Method::ToolsList,
        Method::ToolsCall,
        Method::TasksGet,
        Method::TasksUpdate,
        Method::TasksCancel,
        Method::SubscriptionsListen,
        Method::PromptsList,
        Method::PromptsGet,
        Method::ResourcesList,
        Method::ResourcesTemplatesList,
        Method::ResourcesRead,
        Method::Initialize,
        Method::Ping,
        Method::TasksResult,
        Method::TasksList,
        Method::NotificationsCancelled,
    ];

    /// The methods of revision 2026-07-28; anything else is -32601 there (B-23, T-39).
    /// The prompts and resources methods are -32601 too while no upstream offers them.
    pub const REVISION_2026: [Method; 12] = [
        Method::ServerDiscover,
        Method::ToolsList,
        Method::ToolsCall,
        Method::TasksGet,
        Method::TasksUpdate,
        Method::TasksCancel,
        Method::SubscriptionsListen,
        Method::PromptsList,
        Method::PromptsGet,
        Method::ResourcesList,
        Method::ResourcesTemplatesList,
        Method::ResourcesRead,
    ];

    /// The method's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::ServerDiscover => "server/discover",
            Method::ToolsList => "tools/list",
            Method::ToolsCall => "tools/call",
            Method::TasksGet => "tasks/get",
            Method::TasksUpdate => "tasks/update",
            Method::TasksCancel => "tasks/cancel",
            Method::SubscriptionsListen => "subscriptions/listen",
            Method::PromptsList => "prompts/list",
            Method::PromptsGet => "prompts/get",
            Method::ResourcesList => "resources/list",
            Method::ResourcesTemplatesList => "resources/templates/list",
            Method::ResourcesRead => "resources/read",
            Method::Initialize => "initialize",
            Method::Ping => "ping",
            Method::TasksResult => "tasks/result",
            Method::TasksList => "tasks/list",
            Method::NotificationsCancelled => "notifications/cancelled",
        }
    }

    /// The method named `name` (exactly: method names are case-sensitive), if known.
    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// Whether revision 2026-07-28 defines this method.
    pub fn in_2026(self) -> bool {
        Method::REVISION_2026.contains(&self)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_case_sensitive() {
        for m in Method::ALL {
            assert_eq!(Method::from_name(m.as_str()), Some(m));
        }
        assert_eq!(Method::from_name("TOOLS/LIST"), None);
        assert_eq!(Method::from_name(""), None);
        assert!(!Method::Ping.in_2026() && Method::TasksUpdate.in_2026());
    }
}
