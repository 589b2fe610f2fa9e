//! The kill switch from the console: strike a tool (or its calls with one argument value)
//! and restore it, as `mcp-tasks strike` and `restore` do, through the same store calls
//! (`mcp_tasks_store::strikes`). Each action is logged with the acting principal.
//!
//! Asked by the overview's forms (`POST /console/strikes`, `/console/strikes/restore`,
//! form-encoded) or the API (`POST /console/api/strikes`, `/console/api/strikes/restore`,
//! form-encoded or JSON: `{"tool": "…", "where": "ARG=VALUE", "cancel_running": true}`).

use hyper::StatusCode;
use mcp_tasks_protocol::time::now_millis;
use mcp_tasks_store::strikes::{self, Strike, strike_id};
use serde::Deserialize;

use crate::access::logged;
use crate::{Console, State, api, view};

/// How long a restore spends queueing the held jobs again before leaving the rest to the
/// workers (which release them within seconds anyway).
const RELEASE_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// What a strike or restore request asks.
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Ask {
    tool: String,
    /// `ARG=VALUE`, empty or absent for the whole tool.
    #[serde(default, rename = "where")]
    when: Option<String>,
    #[serde(default, alias = "cancelRunning")]
    cancel_running: bool,
}

/// A refusal: the status and a message that says what was wrong.
pub(crate) type Refusal = (StatusCode, String);

fn bad(why: impl Into<String>) -> Refusal {
    (StatusCode::BAD_REQUEST, why.into())
}

impl Ask {
    /// Read a request body: JSON when `json`, else a form (`tool`, `where`,
    /// `cancel_running=on`).
    fn parse(body: &[u8], json: bool) -> Result<Ask, Refusal> {
        if json {
            return serde_json::from_slice(body).map_err(|e| bad(format!("bad JSON body: {e}")));
        }
        if body.trim_ascii_start().starts_with(b"{") {
            return Err(bad(
                "the body looks like JSON: send it with Content-Type: application/json \
                 (or as a form: tool=…&where=…&cancel_running=on)",
            ));
        }
        let mut ask = Ask::default();
        for (k, v) in api::pairs(&String::from_utf8_lossy(body)) {
            match k.as_str() {
                "tool" => ask.tool = v.trim().to_owned(),
                "where" => ask.when = Some(v),
                "cancel_running" => {
                    ask.cancel_running = match v.as_str() {
                        "on" | "true" | "1" => true,
                        "off" | "false" | "0" | "" => false,
                        other => {
                            return Err(bad(format!(
                                "cancel_running={other:?}: expected on or off"
                            )));
                        }
                    }
                }
                other => return Err(bad(format!("unknown field {other:?}"))),
            }
        }
        Ok(ask)
    }

    /// The strike asked for, struck at `at_ms`, its tool name checked.
    fn strike(self, at_ms: i64) -> Result<Strike, Refusal> {
        let strike = Strike {
            when: self.when()?,
            tool: self.tool,
            at_ms,
            cancel_running: self.cancel_running,
        };
        strikes::check(&strike, &[]).map_err(|e| bad(e.to_string()))?;
        Ok(strike)
    }

    /// The `where` pair, when one is given (a blank one is none). The value is kept as
    /// sent, spaces included, as the CLI keeps it: the strike's id must be the same.
    fn when(&self) -> Result<Option<(String, String)>, Refusal> {
        match self.when.as_deref() {
            None => Ok(None),
            Some(text) if text.trim().is_empty() => Ok(None),
            Some(text) => strikes::parse_where(text)
                .map(Some)
                .map_err(|e| bad(format!("where {e}"))),
        }
    }
}

fn unavailable(e: &mcp_tasks_store::StoreError) -> Refusal {
    tracing::warn!(error = %e, "console: strike or restore failed");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "redis unavailable ({}); retry",
            mcp_tasks_shared::error_chain(e)
        ),
    )
}

/// What a strike did.
pub(crate) struct Struck {
    pub(crate) strike: Strike,
    /// Not in force before (else struck again, replacing it).
    pub(crate) new: bool,
    /// A worker advertises the tool (a strike of an unknown name is recorded all the same,
    /// as the CLI does, with a note: it may be a typo).
    pub(crate) known: bool,
}

impl Struck {
    /// What the operator is told.
    pub(crate) fn message(&self) -> String {
        let mut text = self.strike.struck_message(self.new);
        if !self.known {
            text.push_str(&format!(
                ". Note: no worker advertises a tool named {}; struck anyway",
                self.strike.tool
            ));
        }
        text
    }
}

/// Strike as the request `body` (JSON when `json`) asks, by `principal`.
pub(crate) async fn strike(
    state: &State,
    (body, json): (&[u8], bool),
    principal: &str,
) -> Result<Struck, Refusal> {
    let strike = Ask::parse(body, json)?.strike(now_millis())?;
    let adverts = state
        .store
        .fleet()
        .adverts()
        .await
        .map_err(|e| unavailable(&e))?;
    strikes::check(&strike, &adverts).map_err(|e| bad(e.to_string()))?;
    let known = adverts.iter().any(|a| a.tool.name == strike.tool);
    let new = state
        .store
        .controls()
        .strike(&strike)
        .await
        .map_err(|e| unavailable(&e))?;
    let by = logged(principal);
    tracing::info!(
        console.owner = %by,
        "console: {} struck by {by}{}",
        strike.describe(),
        if strike.cancel_running { " (running calls cancelled)" } else { "" }
    );
    Ok(Struck { strike, new, known })
}

/// What a restore did.
pub(crate) struct Restored {
    /// How messages name the strike lifted.
    pub(crate) describe: String,
    /// Held jobs queued again here; `Err` says why the rest is left to the workers.
    pub(crate) released: Result<usize, String>,
}

/// Lift the strike the request `body` (JSON when `json`) names, by `principal`, and queue
/// its held jobs again.
pub(crate) async fn restore(
    state: &State,
    (body, json): (&[u8], bool),
    principal: &str,
) -> Result<Restored, Refusal> {
    let strike = Ask::parse(body, json)?.strike(0)?;
    let lifted = state
        .store
        .controls()
        .lift_strike(&strike_id(&strike.tool, strike.when.as_ref()))
        .await
        .map_err(|e| unavailable(&e))?;
    if !lifted {
        let left = state
            .store
            .controls()
            .strikes()
            .await
            .map_err(|e| unavailable(&e))?;
        let names: Vec<String> = left.0.iter().map(Strike::describe).collect();
        return Err((
            StatusCode::NOT_FOUND,
            format!(
                "no strike on {} ({})",
                strike.describe(),
                if names.is_empty() {
                    "none is in force".to_owned()
                } else {
                    format!("in force: {}", names.join(", "))
                }
            ),
        ));
    }
    let by = logged(principal);
    tracing::info!(console.owner = %by, "console: {} restored by {by}", strike.describe());
    // The strike is lifted: that is the work. Queueing the held jobs here only saves the
    // workers their few seconds.
    let released =
        match tokio::time::timeout(RELEASE_WITHIN, state.store.controls().release_all_held()).await
        {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(mcp_tasks_shared::error_chain(&e)),
            Err(_) => Err(format!("took over {} s", RELEASE_WITHIN.as_secs())),
        };
    Ok(Restored {
        describe: strike.describe(),
        released,
    })
}

/// After a strike or restore: the strikes in force into the console's memory now, so the
/// page the operator lands on shows them (the refresh would within 2 s).
pub(crate) async fn shown_now(state: &State, console: &Console) {
    match state.store.controls().strikes().await {
        Ok(strikes) => console.view.set_strikes(view::strike_rows(strikes)),
        Err(e) => tracing::debug!(error = %e, "console: strikes not re-read; the refresh will"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_come_as_forms_or_json() {
        let form = Ask::parse(b"tool=deploy&where=repo%3Dweb&cancel_running=on", false).unwrap();
        assert_eq!(form.tool, "deploy");
        assert_eq!(form.when().unwrap(), Some(("repo".into(), "web".into())));
        assert!(form.cancel_running);
        let json = Ask::parse(br#"{"tool": "deploy", "cancelRunning": true}"#, true).unwrap();
        assert_eq!(json.when().unwrap(), None);
        assert!(json.cancel_running);
        let blank = Ask::parse(b"tool=deploy&where=+", false).unwrap();
        assert_eq!(blank.when().unwrap(), None);
        // The value as sent, as the CLI keeps it: the same strike id from both.
        let spaced = Ask::parse(b"tool=deploy&where=msg%3Dhi+", false).unwrap();
        assert_eq!(spaced.when().unwrap(), Some(("msg".into(), "hi ".into())));
        let (_, why) = Ask::parse(br#"{"tool": "deploy"}"#, false).unwrap_err();
        assert!(why.contains("Content-Type: application/json"), "{why}");

        let (status, why) = Ask::parse(b"tool=deploy&colour=red", false).unwrap_err();
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(why.contains("unknown field \"colour\""), "{why}");
        let (_, why) = Ask::parse(b"{\"tool\": 3}", true).unwrap_err();
        assert!(why.starts_with("bad JSON body"), "{why}");
        let (_, why) = Ask::parse(b"tool=deploy&where=repo", false)
            .unwrap()
            .when()
            .unwrap_err();
        assert!(why.contains("expected ARG=VALUE"), "{why}");
        let (_, why) = Ask::parse(b"tool=deploy&cancel_running=maybe", false).unwrap_err();
        assert!(why.contains("expected on or off"), "{why}");
    }
}
