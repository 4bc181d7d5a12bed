use super::*;

const SEGMENT: Offset = Offset(0);

fn interval(messages: Option<u64>, ms: Option<u64>) -> FlushPolicy {
    FlushPolicy::Interval { messages, ms }
}

/// A log of one segment whose appends are `bytes_per_record` bytes each.
struct Log {
    progress: LogProgress,
    bytes: SegmentBytes,
    end_position: u64,
}

impl Log {
    fn new(flush: FlushPolicy) -> Log {
        Log {
            progress: LogProgress::open(flush, Offset(0), Offset(0)),
            bytes: SegmentBytes::default(),
            end_position: 0,
        }
    }

    fn append(&mut self, records: u64, now_ms: u64) {
        self.end_position += records * 100;
        let end = Offset(self.progress.log_end_offset().0 + records as i64);
        self.progress
            .appended(SEGMENT, self.end_position, end, records, now_ms);
    }

    fn write_all(&mut self) -> Moved {
        self.bytes.written = self.end_position;
        let bytes = self.bytes;
        self.progress.advance(|_| Some(bytes))
    }

    fn next_sync(&self, awaited: bool, now_ms: u64) -> SyncStep {
        let active = ActiveSegment {
            base_offset: SEGMENT,
            bytes: self.bytes,
            sealing: false,
        };
        self.progress
            .next_sync(active, SyncerState::Running, awaited, now_ms)
    }

    fn sync(&mut self, written: u64) -> Moved {
        self.bytes.synced = written;
        let bytes = self.bytes;
        self.progress.advance(|_| Some(bytes))
    }
}

#[test]
fn an_append_is_written_then_durable_as_its_bytes_are() {
    let mut log = Log::new(FlushPolicy::Continuous);
    log.append(3, 0);
    assert_eq!(log.progress.log_end_offset(), Offset(3));
    assert_eq!(log.progress.written_offset(), Offset(0));
    assert_eq!(
        log.next_sync(false, 0),
        SyncStep::Wait,
        "nothing written yet"
    );
    let moved = log.write_all();
    assert_eq!(
        moved,
        Moved {
            written: true,
            durable: false
        }
    );
    assert_eq!(log.progress.written_offset(), Offset(3));
    assert_eq!(log.progress.counted_offset(), Offset(0), "not yet synced");
    let SyncStep::Sync { written, .. } = log.next_sync(false, 0) else {
        panic!("continuous flushing syncs what is written");
    };
    assert!(log.sync(written).durable);
    assert_eq!(log.progress.durable_offset(), Offset(3));
    assert_eq!(log.progress.counted_offset(), Offset(3));
    assert_eq!(log.next_sync(false, 0), SyncStep::Wait);
}

#[test]
fn a_partly_written_append_is_not_written() {
    let mut log = Log::new(FlushPolicy::Continuous);
    log.append(1, 0);
    log.append(1, 0);
    log.bytes.written = 150;
    let bytes = log.bytes;
    log.progress.advance(|_| Some(bytes));
    assert_eq!(log.progress.written_offset(), Offset(1));
}

#[test]
fn flush_messages_waits_for_enough_records_unless_someone_waits() {
    let mut log = Log::new(interval(Some(10), None));
    log.append(5, 0);
    log.write_all();
    assert_eq!(log.progress.counted_offset(), Offset(5), "written counts");
    assert_eq!(log.next_sync(false, 1_000_000), SyncStep::Wait);
    assert!(
        matches!(log.next_sync(true, 0), SyncStep::Sync { .. }),
        "a wait for durability syncs whatever the policy"
    );
    log.append(5, 0);
    log.write_all();
    assert!(matches!(log.next_sync(false, 0), SyncStep::Sync { .. }));
}

/// Appended records not yet written do not count toward flush.messages:
/// a sync then would cover only the written half and leave the other half
/// unsynced, below the limit, until more arrived.
#[test]
fn flush_messages_counts_written_records() {
    let mut log = Log::new(interval(Some(10), None));
    log.append(5, 0);
    log.write_all();
    log.append(5, 0);
    assert_eq!(
        log.next_sync(false, 0),
        SyncStep::Wait,
        "5 written, 5 on their way"
    );
    log.write_all();
    let SyncStep::Sync { written, .. } = log.next_sync(false, 0) else {
        panic!("10 written records are due");
    };
    log.sync(written);
    assert_eq!(log.progress.durable_offset(), Offset(10));
}

#[test]
fn flush_ms_is_due_once_the_oldest_unsynced_append_is_old_enough() {
    let mut log = Log::new(interval(None, Some(300)));
    log.append(1, 1_000);
    log.append(1, 1_200);
    log.write_all();
    assert_eq!(log.next_sync(false, 1_100), SyncStep::WaitUntil(1_300));
    assert_eq!(log.next_sync(false, 1_299), SyncStep::WaitUntil(1_300));
    let SyncStep::Sync { written, .. } = log.next_sync(false, 1_300) else {
        panic!("due at the oldest append plus flush.ms");
    };
    log.sync(written);
    assert_eq!(log.progress.durable_offset(), Offset(2));
    log.append(1, 5_000);
    log.write_all();
    assert_eq!(
        log.next_sync(false, 5_000),
        SyncStep::WaitUntil(5_300),
        "measured from the oldest append not yet synced"
    );
}

#[test]
fn never_by_either_measure_waits_for_ever() {
    let mut log = Log::new(interval(None, None));
    log.append(1_000, 0);
    log.write_all();
    assert_eq!(log.next_sync(false, u64::MAX), SyncStep::Wait);
}

#[test]
fn a_stopping_syncer_exits_and_a_sealing_segment_is_left_to_its_seal() {
    let mut log = Log::new(FlushPolicy::Continuous);
    log.append(1, 0);
    log.write_all();
    let active = ActiveSegment {
        base_offset: SEGMENT,
        bytes: log.bytes,
        sealing: false,
    };
    let stopping = log
        .progress
        .next_sync(active, SyncerState::Stopping, true, 0);
    assert_eq!(stopping, SyncStep::Exit);
    let sealing = ActiveSegment {
        sealing: true,
        ..active
    };
    let step = log
        .progress
        .next_sync(sealing, SyncerState::Running, true, 0);
    assert_eq!(step, SyncStep::Wait);
}

#[test]
fn written_marks_are_bounded_and_still_become_durable() {
    let mut log = Log::new(interval(None, None));
    for _ in 0..1_000 {
        log.append(1, 0);
        log.write_all();
    }
    assert!(log.progress.marks.len() <= WRITTEN_MARKS_MAX);
    assert_eq!(log.progress.written_offset(), Offset(1_000));
    assert_eq!(log.progress.durable_offset(), Offset(0));
    log.sync(log.end_position);
    assert_eq!(log.progress.durable_offset(), Offset(1_000));
    assert!(log.progress.marks.is_empty());
    assert_eq!(log.progress.written_unsynced_records, 0);
}

#[test]
fn a_removed_segment_holds_nothing_to_wait_for() {
    let mut progress = LogProgress::open(FlushPolicy::Continuous, Offset(0), Offset(0));
    progress.appended(Offset(0), 100, Offset(1), 1, 0);
    progress.appended(Offset(1), 100, Offset(2), 1, 0);
    let moved = progress.advance(|base| {
        (base == Offset(1)).then_some(SegmentBytes {
            written: 100,
            synced: 0,
        })
    });
    assert!(moved.written && moved.durable);
    assert_eq!(progress.written_offset(), Offset(2));
    assert_eq!(progress.durable_offset(), Offset(1));
}

#[test]
fn the_high_watermark_never_passes_the_log_end() {
    let mut progress = LogProgress::open(FlushPolicy::Continuous, Offset(10), Offset(20));
    assert_eq!(progress.high_watermark(), Offset(10));
    assert!(
        !progress.set_high_watermark(Offset(12)),
        "clamped to the end"
    );
    progress.appended(SEGMENT, 100, Offset(15), 5, 0);
    assert!(progress.set_high_watermark(Offset(12)));
    assert_eq!(progress.high_watermark(), Offset(12));
    assert!(
        progress.set_high_watermark(Offset(4)),
        "replication may set it back (a new leader)"
    );
}

#[test]
fn the_backlog_target_is_the_first_append_unwritten_past_a_position() {
    let mut log = Log::new(FlushPolicy::Continuous);
    for _ in 0..4 {
        log.append(1, 0);
    }
    log.bytes.written = 100;
    let bytes = log.bytes;
    log.progress.advance(|_| Some(bytes));
    assert_eq!(
        log.progress.first_unwritten_past(SEGMENT, 250),
        Some(Offset(3))
    );
    assert_eq!(log.progress.first_unwritten_past(SEGMENT, 401), None);
    assert_eq!(log.progress.first_unwritten_past(Offset(7), 0), None);
}
