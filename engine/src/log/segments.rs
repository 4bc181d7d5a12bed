//! Lookups over a partition's sorted segment list (S3, S8).

use crate::types::{Offset, TimestampMs};

/// The segment holding `offset`: the last one whose base offset is ≤ it
/// (S3, first step). `None` if `offset` precedes every segment.
pub fn segment_for_offset(
    base_offsets: impl Fn(usize) -> Offset,
    count: usize,
    offset: Offset,
) -> Option<usize> {
    let (mut low, mut high) = (0usize, count);
    while low < high {
        let middle = low + (high - low) / 2;
        if base_offsets(middle) <= offset {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    low.checked_sub(1)
}

/// The first segment whose largest timestamp is ≥ `target`: the only place a
/// record with timestamp ≥ `target` can first appear (S8, Kafka's
/// `fetchOffsetByTimestamp`). `None` if no segment reaches `target`.
pub fn first_segment_reaching(
    largest_timestamps: impl IntoIterator<Item = TimestampMs>,
    target: TimestampMs,
) -> Option<usize> {
    largest_timestamps
        .into_iter()
        .position(|largest| largest >= target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_land_in_the_floor_segment() {
        // The seeds' example: segments 0, 368769, 737337; offset 368776 is in the second.
        let bases = [Offset(0), Offset(368_769), Offset(737_337)];
        let find = |offset| segment_for_offset(|i| bases[i], bases.len(), Offset(offset));
        assert_eq!(find(368_776), Some(1));
        assert_eq!(find(0), Some(0));
        assert_eq!(find(368_768), Some(0));
        assert_eq!(find(1 << 40), Some(2));
        let later = [Offset(100)];
        assert_eq!(segment_for_offset(|i| later[i], 1, Offset(99)), None);
        assert_eq!(segment_for_offset(|_| Offset(0), 0, Offset(5)), None);
    }

    #[test]
    fn time_lands_in_the_first_segment_reaching_it() {
        let largest = [
            TimestampMs(10),
            TimestampMs(30),
            TimestampMs(20),
            TimestampMs(40),
        ];
        assert_eq!(first_segment_reaching(largest, TimestampMs(25)), Some(1));
        assert_eq!(first_segment_reaching(largest, TimestampMs(5)), Some(0));
        assert_eq!(first_segment_reaching(largest, TimestampMs(41)), None);
    }
}
