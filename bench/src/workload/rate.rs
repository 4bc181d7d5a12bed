//! Pacing a producer at a target rate: records fall due at even intervals
//! from the start, and a producer that falls behind catches up (it does not
//! skip), so the offered load is what was asked for, as in the OpenMessaging
//! Benchmark. Each record's latency then counts from when it fell due.

use std::time::Duration;

/// Records due at `per_second`, counted from time 0 (nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimiter {
    start_ns: u64,
    interval_ns: f64,
    issued: u64,
}

impl RateLimiter {
    pub fn new(per_second: f64, start_ns: u64) -> RateLimiter {
        RateLimiter {
            start_ns,
            interval_ns: 1e9 / per_second.max(1e-9),
            issued: 0,
        }
    }

    /// When the next record falls due.
    pub fn next_due_ns(&self) -> u64 {
        self.start_ns + (self.issued as f64 * self.interval_ns) as u64
    }

    /// Takes the next record if it is due at `now_ns`; returns when it fell
    /// due (its creation time).
    pub fn take(&mut self, now_ns: u64) -> Option<u64> {
        let due = self.next_due_ns();
        (due <= now_ns).then(|| {
            self.issued += 1;
            due
        })
    }

    /// How long until the next record falls due.
    pub fn wait(&self, now_ns: u64) -> Duration {
        Duration::from_nanos(self.next_due_ns().saturating_sub(now_ns))
    }

    pub fn issued(&self) -> u64 {
        self.issued
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_fall_due_evenly_and_a_late_producer_catches_up() {
        // 1000 records/s: one every millisecond from t = 5 ms.
        let mut limiter = RateLimiter::new(1000.0, 5_000_000);
        assert_eq!(limiter.take(4_999_999), None);
        assert_eq!(limiter.wait(4_000_000), Duration::from_millis(1));
        assert_eq!(limiter.take(5_000_000), Some(5_000_000));
        assert_eq!(limiter.take(5_500_000), None);
        // 3.5 ms late: three records are due, each stamped when it fell due.
        let due: Vec<u64> = std::iter::from_fn(|| limiter.take(8_500_000)).collect();
        assert_eq!(due, vec![6_000_000, 7_000_000, 8_000_000]);
        assert_eq!(limiter.issued(), 4);
        assert_eq!(limiter.wait(8_500_000), Duration::from_micros(500));
    }
}
