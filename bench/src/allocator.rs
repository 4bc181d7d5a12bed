//! A global allocator that counts live heap bytes.
//!
//! Memory targets ("an idle partition costs at most 100 KiB") are checked
//! against what the process really allocates, including glommio's files and
//! tasks, which no `heap_bytes()` estimate can see. The binary installs it:
//!
//! ```
//! #[global_allocator]
//! static ALLOCATOR: brook_bench::allocator::CountingAllocator =
//!     brook_bench::allocator::CountingAllocator;
//!
//! fn main() {
//!     assert!(brook_bench::allocator::is_installed());
//!     let before = brook_bench::allocator::allocated_bytes();
//!     let kept = vec![0u8; 1 << 20];
//!     assert!(brook_bench::allocator::allocated_bytes() >= before + kept.len());
//! }
//! ```
//!
//! The count is one relaxed atomic add per allocation: cheap enough to leave
//! on during throughput runs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

/// [`System`], counting the bytes it hands out and takes back.
#[derive(Clone, Copy, Debug, Default)]
pub struct CountingAllocator;

// SAFETY: every call is forwarded unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the counter only observes sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees for `layout` are passed on as they are.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let pointer = unsafe { System.alloc_zeroed(layout) };
        if !pointer.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: `pointer` came from this allocator (so from `System`) with `layout`.
        unsafe { System.dealloc(pointer, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `dealloc`; `new_size` is the caller's to guarantee.
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        if !moved.is_null() {
            LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        moved
    }
}

/// Heap bytes currently allocated through [`CountingAllocator`] (0 when it
/// is not the global allocator).
pub fn allocated_bytes() -> usize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Whether [`CountingAllocator`] is the process's global allocator, i.e.
/// whether [`allocated_bytes`] means anything.
pub fn is_installed() -> bool {
    let before = allocated_bytes();
    let probe = std::hint::black_box(vec![0u8; 4096]);
    let counted = allocated_bytes() != before;
    drop(probe);
    counted
}
