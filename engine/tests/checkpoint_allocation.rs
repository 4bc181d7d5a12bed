//! Decoding a checkpoint reserves memory for the entries it holds, not for
//! the count it declares: the count comes from a file that may be damaged.
//!
//! Its own test binary, with one test, because it counts allocations with a
//! global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use brook_engine::log::checkpoint::{CHECKPOINT_ENTRIES_MAX, decode_offsets};
use brook_engine::log::epoch_cache::LeaderEpochCache;

/// The system allocator, remembering the largest single allocation.
struct Largest;

static LARGEST_BYTES: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST_BYTES.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST_BYTES.fetch_max(new_size, Ordering::Relaxed);
        unsafe { System.realloc(pointer, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Largest = Largest;

#[test]
fn a_huge_declared_count_reserves_nothing() {
    let offsets = format!("0\n{CHECKPOINT_ENTRIES_MAX}\norders 0 42\n");
    let epochs = format!("0\n{CHECKPOINT_ENTRIES_MAX}\n3 100\n");
    LARGEST_BYTES.store(0, Ordering::Relaxed);
    assert!(decode_offsets(&offsets).is_err());
    assert!(LeaderEpochCache::decode(&epochs).is_err());
    let largest = LARGEST_BYTES.load(Ordering::Relaxed);
    assert!(largest < 4096, "decoding allocated {largest} bytes at once");
}
