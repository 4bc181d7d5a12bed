//! A per-thread pool of DMA chunk buffers.
//!
//! Log chunks are allocated and freed at the rate data is appended; taking
//! fresh pages from the allocator each time costs page faults and zeroing
//! (a quarter of the append path's CPU when measured). Full chunks that leave
//! the tail cache come back here instead, up to a bound per thread.

use std::cell::RefCell;

use glommio::io::DmaBuffer;

/// Pooled bytes per thread (per shard).
pub const POOL_BYTES_MAX: usize = 32 << 20;

thread_local! {
    static POOL: RefCell<Pool> = const { RefCell::new(Pool { buffers: Vec::new(), bytes: 0 }) };
}

struct Pool {
    buffers: Vec<DmaBuffer>,
    bytes: usize,
}

/// A page-aligned buffer of exactly `capacity` bytes (contents unspecified).
pub(crate) fn take(capacity: usize) -> DmaBuffer {
    let pooled = POOL.with_borrow_mut(|pool| {
        let slot = pool
            .buffers
            .iter()
            .rposition(|buffer| buffer.len() == capacity)?;
        pool.bytes -= capacity;
        Some(pool.buffers.swap_remove(slot))
    });
    pooled.unwrap_or_else(|| glommio::allocate_dma_buffer_global(capacity))
}

/// Returns a buffer for reuse (dropped if the pool is full).
pub(crate) fn give(buffer: DmaBuffer) {
    POOL.with_borrow_mut(|pool| {
        if pool.bytes + buffer.len() <= POOL_BYTES_MAX {
            pool.bytes += buffer.len();
            pool.buffers.push(buffer);
        }
    });
}
