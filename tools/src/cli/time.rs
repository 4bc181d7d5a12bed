//! Times on the command line, as Kafka's tools take them: ListOffsets'
//! special timestamps (`-1` latest, `-2` earliest, `-3` the record with the
//! largest timestamp), milliseconds since the epoch, an RFC 3339 date-time
//! (`2026-11-30T10:00:00Z`, `2026-11-30 10:00:00.5`; UTC when no zone is
//! given), or for `--since` a duration before now (`15m`). Formats are
//! humantime's, the standard crate for them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// ListOffsets' "latest" (the log end offset).
pub const LATEST: i64 = -1;
/// ListOffsets' "earliest" (the log start offset).
pub const EARLIEST: i64 = -2;
/// ListOffsets' "max-timestamp" (KIP-734).
pub const MAX_TIMESTAMP: i64 = -3;

/// `--time` of `brook offsets`: a special timestamp, its name, or a time.
pub fn parse_list_offsets_time(text: &str) -> Result<i64, String> {
    match text.trim() {
        "-1" | "latest" => Ok(LATEST),
        "-2" | "earliest" => Ok(EARLIEST),
        "-3" | "max-timestamp" => Ok(MAX_TIMESTAMP),
        other => parse_timestamp(other).map_err(|_| {
            format!(
                "'{text}' is not -1 (latest), -2 (earliest), -3 (max-timestamp), \
                 milliseconds since the epoch or a date-time like 2026-11-30T10:00:00Z"
            )
        }),
    }
}

/// Milliseconds since the epoch, or an RFC 3339 date-time (UTC unless a
/// zone is given).
pub fn parse_timestamp(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if let Ok(millis) = text.parse::<i64>() {
        return if millis >= 0 {
            Ok(millis)
        } else {
            Err(format!("'{text}': a timestamp cannot be negative"))
        };
    }
    let time = humantime::parse_rfc3339_weak(text.trim_end_matches('Z'))
        .map_err(|error| format!("'{text}' is not a date-time: {error}"))?;
    millis_since_epoch(time).ok_or_else(|| format!("'{text}' is before 1970"))
}

/// `--since`: a timestamp as [`parse_timestamp`], or a duration before `now`.
pub fn parse_since(text: &str, now: SystemTime) -> Result<i64, String> {
    if let Ok(millis) = parse_timestamp(text) {
        return Ok(millis);
    }
    let ago = humantime::parse_duration(text.trim()).map_err(|_| {
        format!(
            "'{text}' is not milliseconds since the epoch, a date-time like \
             2026-11-30T10:00:00Z or a duration like 15m"
        )
    })?;
    now.checked_sub(ago)
        .and_then(millis_since_epoch)
        .ok_or_else(|| format!("'{text}' ago is before 1970"))
}

/// A duration like `10s`, `500ms` or `1m 30s`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|error| format!("'{text}' is not a duration like 10s or 500ms: {error}"))
}

fn millis_since_epoch(time: SystemTime) -> Option<i64> {
    let since = time.duration_since(UNIX_EPOCH).ok()?;
    i64::try_from(since.as_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-30T10:00:00Z.
    const TEN_AM: i64 = 1_796_032_800_000;

    #[test]
    fn list_offsets_times_take_kafka_special_values_and_times() {
        assert_eq!(parse_list_offsets_time("-1"), Ok(LATEST));
        assert_eq!(parse_list_offsets_time("latest"), Ok(LATEST));
        assert_eq!(parse_list_offsets_time("-2"), Ok(EARLIEST));
        assert_eq!(parse_list_offsets_time("earliest"), Ok(EARLIEST));
        assert_eq!(parse_list_offsets_time("-3"), Ok(MAX_TIMESTAMP));
        assert_eq!(
            parse_list_offsets_time("1700000000000"),
            Ok(1_700_000_000_000)
        );
        assert_eq!(parse_list_offsets_time("2026-11-30T10:00:00Z"), Ok(TEN_AM));
        for bad in ["-4", "yesterday", "", "12abc", "2026-13-01T00:00:00Z"] {
            assert!(parse_list_offsets_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn timestamps_are_millis_or_utc_date_times() {
        assert_eq!(parse_timestamp("2026-11-30T10:00:00"), Ok(TEN_AM));
        assert_eq!(parse_timestamp("2026-11-30 10:00:00.250"), Ok(TEN_AM + 250));
        assert!(parse_timestamp("-5").is_err());
    }

    #[test]
    fn since_also_takes_a_duration_before_now() {
        let now = UNIX_EPOCH + Duration::from_millis(TEN_AM as u64);
        assert_eq!(parse_since("15m", now), Ok(TEN_AM - 15 * 60_000));
        assert_eq!(parse_since("2026-11-30T10:00:00Z", now), Ok(TEN_AM));
        assert!(parse_since("soon", now).is_err());
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("10").is_err());
    }
}
