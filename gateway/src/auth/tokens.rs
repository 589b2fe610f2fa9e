//! `MCPT_AUTH=tokens`: static bearer tokens from a file of `PRINCIPAL TOKEN` lines (`#`
//! comments and blank lines allowed), re-read when its content changes (looked at once a
//! second; the content, not the modification time, decides, so a copy that keeps the old
//! time is still seen).
//!
//! Only SHA-256 digests of the tokens are kept; a presented token is hashed and compared
//! with every entry in constant time, so neither the match position nor a common prefix
//! shows in the timing.

use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

/// Shortest token accepted: shorter ones are guessable.
const MIN_TOKEN_LEN: usize = 16;

/// How often the file's modification time is looked at.
const RECHECK: Duration = Duration::from_secs(1);

/// Why the token file cannot be used; a line's mistake names the line, never the token.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// The file cannot be read.
    #[error("cannot read {}: {why}", .path.display())]
    Read { path: PathBuf, why: std::io::Error },
    /// A line is not two fields.
    #[error("{}: line {line}: expected PRINCIPAL TOKEN", .path.display())]
    NotTwoFields { path: PathBuf, line: usize },
    /// A token is shorter than [`MIN_TOKEN_LEN`].
    #[error(
        "{}: line {line}: the token is shorter than {} characters",
        .path.display(),
        MIN_TOKEN_LEN
    )]
    TooShort { path: PathBuf, line: usize },
    /// A token is on an earlier line too.
    #[error("{}: line {line}: the same token is listed twice", .path.display())]
    Repeated { path: PathBuf, line: usize },
    /// Nothing but comments and blank lines.
    #[error("{}: no PRINCIPAL TOKEN lines", .path.display())]
    Empty { path: PathBuf },
}

/// (principal, SHA-256 of the token).
type Entries = Vec<(String, [u8; 32])>;

struct Loaded {
    /// SHA-256 of the file content last read (good or not).
    content: [u8; 32],
    checked: Instant,
    entries: Entries,
}

/// The token file and what was last read from it.
pub(crate) struct TokenFile {
    path: PathBuf,
    loaded: RwLock<Loaded>,
}

/// SHA-256 of a token, as the file's entries are compared.
pub(crate) fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Equal in time independent of where the inputs differ.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Parse the file's text; every mistake names its line (never the token).
fn parse(path: &Path, text: &str) -> Result<Entries, TokensError> {
    let mut entries: Entries = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let number = n + 1;
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [principal, token] = fields.as_slice() else {
            return Err(TokensError::NotTwoFields {
                path: path.to_owned(),
                line: number,
            });
        };
        if token.len() < MIN_TOKEN_LEN {
            return Err(TokensError::TooShort {
                path: path.to_owned(),
                line: number,
            });
        }
        let d = digest(token);
        if entries.iter().any(|(_, e)| same(e, &d)) {
            return Err(TokensError::Repeated {
                path: path.to_owned(),
                line: number,
            });
        }
        entries.push(((*principal).to_owned(), d));
    }
    if entries.is_empty() {
        let path = path.to_owned();
        return Err(TokensError::Empty { path });
    }
    Ok(entries)
}

fn read(path: &Path) -> Result<([u8; 32], String), TokensError> {
    let text = std::fs::read_to_string(path).map_err(|why| TokensError::Read {
        path: path.to_owned(),
        why,
    })?;
    Ok((digest(&text), text))
}

impl TokenFile {
    /// Read the file once.
    ///
    /// # Errors
    /// Unreadable, or a malformed line (named).
    pub(crate) fn open(path: &Path) -> Result<TokenFile, TokensError> {
        let (content, text) = read(path)?;
        let entries = parse(path, &text)?;
        Ok(TokenFile {
            path: path.to_owned(),
            loaded: RwLock::new(Loaded {
                content,
                checked: Instant::now(),
                entries,
            }),
        })
    }

    /// The principal `token` belongs to.
    pub(crate) fn principal(&self, token: &str) -> Option<String> {
        self.reload_if_changed();
        let presented = digest(token);
        let loaded = self.loaded.read().ok()?;
        // Every entry is compared, match or not.
        let mut found = None;
        for (principal, d) in &loaded.entries {
            if same(d, &presented) {
                found = Some(principal.clone());
            }
        }
        found
    }

    /// The digests of `principal`'s tokens in the file now (reread when it changed).
    #[cfg(feature = "console")]
    pub(crate) fn digests_of(&self, principal: &str) -> Vec<[u8; 32]> {
        self.reload_if_changed();
        let Ok(loaded) = self.loaded.read() else {
            return Vec::new();
        };
        loaded
            .entries
            .iter()
            .filter(|(p, _)| p == principal)
            .map(|(_, d)| *d)
            .collect()
    }

    fn reload_if_changed(&self) {
        let due = self
            .loaded
            .read()
            .map(|l| l.checked.elapsed() >= RECHECK)
            .unwrap_or(false);
        if !due {
            return;
        }
        let Ok(mut loaded) = self.loaded.write() else {
            return;
        };
        if loaded.checked.elapsed() < RECHECK {
            return;
        }
        loaded.checked = Instant::now();
        let (content, text) = match read(&self.path) {
            Ok(read) => read,
            Err(why) => {
                if loaded.content != [0; 32] {
                    tracing::warn!(error = %why, "token file not reloaded; keeping the previous tokens");
                }
                // Warn once until it is readable again.
                loaded.content = [0; 32];
                return;
            }
        };
        if content == loaded.content {
            return;
        }
        loaded.content = content;
        match parse(&self.path, &text) {
            Ok(entries) => {
                tracing::info!(entries = entries.len(), "token file reloaded");
                loaded.entries = entries;
            }
            // Keep serving with the tokens that worked; say why once per change.
            Err(why) => {
                tracing::warn!(error = %why, "token file not reloaded; keeping the previous tokens");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_name_their_mistakes_and_never_the_token() {
        let p = Path::new("tokens.txt");
        let err = parse(p, "alice 0123456789abcdef extra\n")
            .unwrap_err()
            .to_string();
        assert_eq!(err, "tokens.txt: line 1: expected PRINCIPAL TOKEN");
        let err = parse(p, "# c\n\nalice short\n").unwrap_err().to_string();
        assert!(
            err.starts_with("tokens.txt: line 3: the token is shorter"),
            "{err}"
        );
        assert!(!err.contains("short\n"));
        let err = parse(p, "a 0123456789abcdef\nb 0123456789abcdef\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 2: the same token is listed twice"),
            "{err}"
        );
        assert!(parse(p, "# only comments\n").is_err());
    }

    #[test]
    fn tokens_map_to_their_principal_and_reload_on_change() {
        let dir = std::env::temp_dir().join(format!("mcpt-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens");
        std::fs::write(
            &path,
            "alice aaaaaaaaaaaaaaaaaaaa\nbob bbbbbbbbbbbbbbbbbbbb\n",
        )
        .unwrap();
        let file = TokenFile::open(&path).unwrap();
        assert_eq!(
            file.principal("aaaaaaaaaaaaaaaaaaaa").as_deref(),
            Some("alice")
        );
        assert_eq!(
            file.principal("bbbbbbbbbbbbbbbbbbbb").as_deref(),
            Some("bob")
        );
        assert_eq!(file.principal("aaaaaaaaaaaaaaaaaaab"), None);
        assert_eq!(file.principal(""), None);

        // Rotate bob's token; a file with a mistake is ignored, keeping the last good one.
        // The old modification time kept: the content decides.
        let before = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::fs::write(&path, "bob cccccccccccccccccccc\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(before)
            .unwrap();
        file.loaded.write().unwrap().checked -= RECHECK;
        assert_eq!(
            file.principal("cccccccccccccccccccc").as_deref(),
            Some("bob")
        );
        assert_eq!(file.principal("aaaaaaaaaaaaaaaaaaaa"), None);

        std::fs::write(&path, "broken\n").unwrap();
        file.loaded.write().unwrap().checked -= RECHECK;
        assert_eq!(
            file.principal("cccccccccccccccccccc").as_deref(),
            Some("bob")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
