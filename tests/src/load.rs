//! A busy machine for a fault test, and how many rounds a fault loop runs.
//!
//! Restarts, elections and heals behave differently when the CPU is
//! contended (DESIGN "Known traps"), so every fault test of issue 32 also
//! runs while [`Busy`] keeps every core busy, and loops: a short count in
//! CI, the full count with `BROOK_E2E_LONG=1` (run by hand, reported in the
//! session's note).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// Spinning threads per core: two, so a broker's pinned shard shares its
/// core with more than one runnable thread, as on a busy host.
const SPINNERS_PER_CORE: usize = 2;

/// Threads that spin at normal priority until dropped.
#[derive(Debug)]
pub struct Busy {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<u64>>,
}

impl Busy {
    /// Starts [`SPINNERS_PER_CORE`] spinning threads per core.
    pub fn start() -> Busy {
        let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..cores * SPINNERS_PER_CORE)
            .map(|index| {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("busy-{index}"))
                    .spawn(move || {
                        let mut spins = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            spins = std::hint::black_box(spins.wrapping_add(1));
                        }
                        spins
                    })
                    .expect("a spinning thread")
            })
            .collect();
        Busy { stop, threads }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Whether the long mode runs (`BROOK_E2E_LONG=1`).
pub fn long_mode() -> bool {
    std::env::var("BROOK_E2E_LONG").is_ok_and(|value| value == "1")
}

/// `ci` rounds, or `long` in the long mode.
pub fn rounds(ci: usize, long: usize) -> usize {
    if long_mode() { long } else { ci }
}
