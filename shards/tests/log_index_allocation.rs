//! Opening a log never reads an index file larger than its segment allows
//! into memory: a damaged, huge `.index` is rebuilt from the log instead.
//!
//! Its own test binary, with one test, because it counts allocations with a
//! global allocator.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use brook_engine::types::Offset;
use brook_shards::runtime::block_on;
use common::*;

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

const HUGE_INDEX_BYTES: u64 = 64 << 20;

#[test]
fn a_huge_index_file_is_rebuilt_without_being_read() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("huge-0");
    block_on(async move {
        let log = open(&dir, small_segments(4096), crashed()).await;
        for i in 0..20 {
            log.append(&batch(2, 400, 1_700_000_000_000 + i), EPOCH, now_ms())
                .await
                .unwrap();
        }
        let expected = read_all(&log, Offset(0), 1 << 20, false).await.unwrap();
        log.close().await.unwrap();
        let bases = segment_bases(&dir);
        assert!(bases.len() >= 2, "a sealed segment: {bases:?}");
        let index = dir.join(format!("{:020}.index", bases[0].0));
        // Sparse: 64 MiB of zeros that take no disk space.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&index)
            .unwrap()
            .set_len(HUGE_INDEX_BYTES)
            .unwrap();

        LARGEST_BYTES.store(0, Ordering::Relaxed);
        let log = open(&dir, small_segments(4096), clean()).await;
        let largest = LARGEST_BYTES.load(Ordering::Relaxed);
        assert!(
            (largest as u64) < HUGE_INDEX_BYTES / 4,
            "opening allocated {largest} bytes at once"
        );
        assert!(
            std::fs::metadata(&index).unwrap().len() < HUGE_INDEX_BYTES,
            "the index was rebuilt"
        );
        let read = read_all(&log, Offset(0), 1 << 20, false).await.unwrap();
        assert_bytes_eq(&read, &expected, "the log after the rebuild");
        log.close().await.unwrap();
    });
}
