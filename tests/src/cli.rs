//! The command lines of the test tools (`bench`, `chaos`, `cluster`): parsing a clap
//! derive into the tool's options with a one-line usage error, and the value parsers they
//! share (durations, bounded numbers).

use std::fmt::Display;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use clap::error::ErrorKind;

/// Exit status of a tool given bad options.
pub const USAGE_EXIT: u8 = 64;

/// Parse this process's arguments into `T`, then `check` them together.
///
/// `--help` (and `-h`) prints clap's help on stdout: `Err(ExitCode::SUCCESS)`. A bad flag or
/// value, or a `check` failure, prints one line on stderr, `TOOL: WHAT (see --help)`:
/// `Err(64)`.
pub fn parse<T: clap::Parser>(
    tool: &str,
    check: impl FnOnce(&T) -> Result<(), String>,
) -> Result<T, ExitCode> {
    let args = match T::try_parse() {
        Ok(args) => args,
        Err(e) => {
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return Err(ExitCode::SUCCESS);
            }
            return Err(usage_error(tool, &first_line(&e)));
        }
    };
    match check(&args) {
        Ok(()) => Ok(args),
        Err(msg) => Err(usage_error(tool, &msg)),
    }
}

fn usage_error(tool: &str, msg: &str) -> ExitCode {
    eprintln!("{tool}: {msg} (see --help)");
    ExitCode::from(USAGE_EXIT)
}

/// clap's message as one line: its first paragraph without the `error: ` prefix (the rest
/// is a tip and the usage).
fn first_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let paragraph: Vec<&str> = text
        .trim_start()
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let line = paragraph.join(" ");
    line.strip_prefix("error: ").unwrap_or(&line).to_owned()
}

/// A duration as the services read theirs ([`mcp_tasks_shared::config::parse_duration`]):
/// a whole number and a unit, `ms`, `s`, `m`, `h` or `d`, like `500ms`, `2s`, `5m`.
pub fn duration(s: &str) -> Result<Duration, String> {
    mcp_tasks_shared::config::parse_duration(s).ok_or_else(|| {
        "expected a whole number and a unit (ms, s, m, h), like 500ms, 2s or 5m".into()
    })
}

/// A value parser of durations of at least `min`.
pub fn duration_at_least(
    min: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s| {
        let d = duration(s)?;
        if d < min {
            return Err(format!("must be at least {min:?}"));
        }
        Ok(d)
    }
}

/// A value parser of numbers of at least `min`.
pub fn at_least<T>(min: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: FromStr + PartialOrd + Display + Copy + Send + Sync + 'static,
    T::Err: Display,
{
    move |s| {
        let n: T = s.trim().parse().map_err(|e: T::Err| e.to_string())?;
        if n < min {
            return Err(format!("must be at least {min}"));
        }
        Ok(n)
    }
}

/// A value parser of numbers from `lo` to `hi`.
pub fn between<T>(
    lo: T,
    hi: T,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: FromStr + PartialOrd + Display + Copy + Send + Sync + 'static,
    T::Err: Display,
{
    move |s| {
        let n: T = s.trim().parse().map_err(|e: T::Err| e.to_string())?;
        if n < lo || n > hi {
            return Err(format!("takes {lo} to {hi}"));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{at_least, between, duration, duration_at_least};

    #[test]
    fn durations_take_the_services_units() {
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(duration("1h"), Ok(Duration::from_secs(3600)));
        // The project's one duration parser (humantime underneath) takes fractions and
        // long unit names too.
        assert_eq!(duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration("2sec"), Ok(Duration::from_secs(2)));
        for bad in ["", "2", "s", "-1s", "2 s"] {
            assert!(duration(bad).is_err(), "{bad:?}");
        }
        let d = duration_at_least(Duration::from_millis(100));
        assert!(d("99ms").is_err());
        assert_eq!(d("100ms"), Ok(Duration::from_millis(100)));
    }

    #[test]
    fn bounded_numbers() {
        assert_eq!(at_least(1usize)("3"), Ok(3));
        assert!(at_least(1usize)("0").is_err());
        assert!(at_least(1usize)("x").is_err());
        assert_eq!(between(1u16, 1024)("1024"), Ok(1024));
        assert!(between(1u16, 1024)("1025").is_err());
    }
}
