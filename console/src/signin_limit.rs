//! How often one client address may try to sign in: [`ATTEMPTS`] per [`WINDOW`], then 429
//! until the window ends. Kept in this gateway's memory (each replica counts its own).
//! Behind a reverse proxy every client shares the proxy's address: the limit is then the
//! proxy's (forwarded addresses are not trusted, since any client can write them).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sign-in attempts allowed per address and window.
pub(crate) const ATTEMPTS: u32 = 10;
/// The window attempts are counted in.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered before ended windows are swept.
const SWEEP_ABOVE: usize = 10_000;

/// Attempts per address in its current window.
#[derive(Default)]
pub(crate) struct Attempts {
    by_addr: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl Attempts {
    /// Count an attempt from `addr` at `now`; `Err` with the time left in its window when
    /// it has used its [`ATTEMPTS`].
    pub(crate) fn admit(&self, addr: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut map = self
            .by_addr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() > SWEEP_ABOVE {
            map.retain(|_, (start, _)| now.duration_since(*start) < WINDOW);
        }
        let (start, count) = map.entry(addr).or_insert((now, 0));
        if now.duration_since(*start) >= WINDOW {
            (*start, *count) = (now, 0);
        }
        if *count >= ATTEMPTS {
            return Err(WINDOW.saturating_sub(now.duration_since(*start)));
        }
        *count += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_its_attempts_per_window() {
        let a = Attempts::default();
        let (one, two): (IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        for _ in 0..ATTEMPTS {
            assert!(a.admit(one, t0).is_ok());
        }
        let wait = a.admit(one, t0 + Duration::from_secs(20)).unwrap_err();
        assert_eq!(wait, Duration::from_secs(40));
        assert!(a.admit(two, t0).is_ok(), "another address has its own");
        assert!(a.admit(one, t0 + WINDOW).is_ok(), "a new window");
    }
}
