//! Any bytes as produced records: batch parsing, validation, record
//! timestamps and the recovery scanner must return errors, never panic.
//!
//! Run: `cargo fuzz run record_batch` (from the repository root).

#![no_main]

use brook_engine::log::batch::{BatchView, Batches};
use brook_engine::log::recovery::{Contiguity, Scanner};
use brook_engine::log::records::record_stamps;
use brook_engine::types::Offset;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for (_, batch) in Batches::new(data).flatten() {
        let _ = batch.validate_for_append(Offset(0));
        let _ = record_stamps(&batch);
    }
    if let Ok(batch) = BatchView::parse_exact(data) {
        let _ = batch.verify_crc();
    }
    let mut scanner = Scanner::new(Offset(0), Some(Offset(0)), Contiguity::Strict, None);
    let _ = scanner.scan(0, data, true, |_, _| {});
});
