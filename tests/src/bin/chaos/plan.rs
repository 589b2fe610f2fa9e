//! What each task will be: [`Plan`] (its kind, arguments, answer and delays, drawn from
//! the seed), how a terminal state is judged against it, and the seeded [`Rng`].

use std::hash::{BuildHasher as _, Hasher as _};
use std::time::Duration;

use serde_json::{Value, json};

use crate::state::Seen;

/// A seed for a run without `--seed`: from the process's RandomState and the clock.
pub(crate) fn random_seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.finish() % 1_000_000_000
}

/// xorshift64*, seeded by `--seed` (or [`random_seed`] when none is given).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, never 0.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    pub(crate) fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    Sleep,
    Ask,
    CancelSleep,
    CancelAsk,
}

impl Kind {
    pub(crate) const ALL: [Kind; 4] = [Kind::Sleep, Kind::Ask, Kind::CancelSleep, Kind::CancelAsk];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Sleep => "sleep",
            Kind::Ask => "ask",
            Kind::CancelSleep => "cancel-sleep",
            Kind::CancelAsk => "cancel-ask",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) kind: Kind,
    pub(crate) ms: u64,
    pub(crate) steps: u64,
    pub(crate) answer: String,
    /// ask: after input_required is seen; cancel-ask: same; cancel-sleep: after submission.
    pub(crate) delay: Duration,
}

impl Plan {
    pub(crate) fn make(i: usize, seed: u64) -> Plan {
        let mut rng = Rng::new(seed ^ (i as u64).wrapping_mul(0xA24B_AED4_963E_E407));
        let roll = rng.range(0, 99);
        let kind = match roll {
            0..=49 => Kind::Sleep,
            50..=74 => Kind::Ask,
            75..=89 => Kind::CancelSleep,
            _ => Kind::CancelAsk,
        };
        let (ms, delay) = match kind {
            Kind::Sleep => (rng.range(4, 80) * 50, Duration::ZERO),
            Kind::CancelSleep => (rng.range(10, 80) * 50, rng.millis(0, 3000)),
            Kind::Ask => (0, rng.millis(200, 3000)),
            Kind::CancelAsk => (0, rng.millis(200, 2000)),
        };
        Plan {
            kind,
            ms,
            steps: rng.range(1, 5),
            answer: format!("a{i}-{:x}", rng.next() & 0xffff_ffff),
            delay,
        }
    }

    pub(crate) fn call(&self, i: usize) -> (&'static str, Value) {
        match self.kind {
            Kind::Sleep | Kind::CancelSleep => {
                ("sleep", json!({"ms": self.ms, "steps": self.steps}))
            }
            Kind::Ask | Kind::CancelAsk => {
                ("ask", json!({"question": format!("chaos question {i}")}))
            }
        }
    }

    /// Why `seen` is not an acceptable terminal state, if it is not.
    pub(crate) fn judge(&self, seen: &Seen) -> Option<String> {
        let slept = format!("slept {} ms", self.ms);
        let answered = format!("answer: {}", self.answer);
        let completed_with = |text: &str| {
            seen.status == "completed" && !seen.is_error && seen.text.as_deref() == Some(text)
        };
        let ok = match self.kind {
            Kind::Sleep => completed_with(&slept),
            Kind::Ask => completed_with(&answered),
            Kind::CancelSleep => seen.status == "cancelled" || completed_with(&slept),
            Kind::CancelAsk => seen.status == "cancelled",
        };
        (!ok).then(|| format!("expected {}, got {}", self.expected(), seen.describe()))
    }

    pub(crate) fn expected(&self) -> String {
        match self.kind {
            Kind::Sleep => format!("completed 'slept {} ms'", self.ms),
            Kind::Ask => format!("completed 'answer: {}'", self.answer),
            Kind::CancelSleep => format!("cancelled or completed 'slept {} ms'", self.ms),
            Kind::CancelAsk => "cancelled".into(),
        }
    }
}
