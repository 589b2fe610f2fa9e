//! Job priorities: each queue has a stream per priority ([`crate::keys::Layout::queue_streams`]),
//! and workers read them in order ([`Priority::ALL`]), so a `high` job is taken before every
//! `normal` one already queued, and `low` ones only when neither has any.

use serde::{Deserialize, Serialize};

/// The priority of a job: which of its queue's streams it goes to.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Taken before every `normal` and `low` job of its queue.
    High,
    /// Most jobs.
    #[default]
    Normal,
    /// Taken only while no `high` or `normal` job of its queue waits.
    Low,
}

impl Priority {
    /// Every priority, in the order workers read them.
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Low];

    /// `high`, `normal` or `low`.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }

    /// The priority named `name` (`high`, `normal`, `low`).
    pub fn parse(name: &str) -> Option<Priority> {
        Priority::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// Whether this is [`Priority::Normal`] (for serde's `skip_serializing_if`).
    pub fn is_normal(&self) -> bool {
        *self == Priority::Normal
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_order_is_high_first() {
        for p in Priority::ALL {
            assert_eq!(Priority::parse(p.as_str()), Some(p));
        }
        assert_eq!(Priority::parse("urgent"), None);
        assert!(Priority::High < Priority::Normal && Priority::Normal < Priority::Low);
        assert_eq!(serde_json::to_string(&Priority::High).unwrap(), "\"high\"");
    }
}
