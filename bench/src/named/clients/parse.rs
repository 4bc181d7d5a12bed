//! What Kafka's performance tools print, read back as numbers: the summary
//! line of ProducerPerformance, the CSV line of ConsumerPerformance and the
//! last two lines of EndToEndLatency (Kafka 4.1's formats), and the
//! newline-counted stdout of kcat (`-f '%o\n'`, one line per record).
//!
//! Each parser takes the tool's whole stdout (or its kept tail) and finds
//! its lines by their fixed words, so progress lines and log lines around
//! them do not matter. The Java tools print "MB" for 2^20 bytes, and so do
//! these figures (MiB).

use thiserror::Error;

/// Why a tool's output could not be read.
#[derive(Debug, Error, PartialEq)]
pub enum OutputError {
    #[error("{tool} printed no {what} line")]
    NoSummary {
        tool: &'static str,
        what: &'static str,
    },
    #[error("{tool}: no number for {field} in {line:?}")]
    Field {
        tool: &'static str,
        field: &'static str,
        line: String,
    },
}

/// ProducerPerformance's final line: `N records sent, R records/sec (M
/// MB/sec), A ms avg latency, X ms max latency, P ms 50th, P ms 95th, P ms
/// 99th, P ms 99.9th.` (its progress lines every 5 s lack the percentiles).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProducerSummary {
    pub records: u64,
    pub records_per_second: f64,
    pub mib_per_second: f64,
    pub average_ms: f64,
    pub max_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

const PRODUCER_PERFORMANCE: &str = "ProducerPerformance";

/// The last summary line of ProducerPerformance's `stdout`.
pub fn producer_summary(stdout: &str) -> Result<ProducerSummary, OutputError> {
    let line = stdout
        .lines()
        .rev()
        .find(|line| line.contains(" ms 99.9th"))
        .ok_or(OutputError::NoSummary {
            tool: PRODUCER_PERFORMANCE,
            what: "summary",
        })?;
    let field = |field: &'static str, suffix: &str| {
        number_before(line, suffix).ok_or_else(|| OutputError::Field {
            tool: PRODUCER_PERFORMANCE,
            field,
            line: line.to_owned(),
        })
    };
    Ok(ProducerSummary {
        records: field("records sent", " records sent")? as u64,
        records_per_second: field("records/sec", " records/sec")?,
        mib_per_second: field("MB/sec", " MB/sec")?,
        average_ms: field("avg latency", " ms avg latency")?,
        max_ms: field("max latency", " ms max latency")?,
        p50_ms: field("50th", " ms 50th")?,
        p95_ms: field("95th", " ms 95th")?,
        p99_ms: field("99th", " ms 99th")?,
        p999_ms: field("99.9th", " ms 99.9th")?,
    })
}

/// The number just before the first `suffix` in `line`: the last word
/// before it, without the brackets the tools put around some.
fn number_before(line: &str, suffix: &str) -> Option<f64> {
    let (before, _) = line.split_once(suffix)?;
    let word = before.split_whitespace().next_back()?;
    word.trim_start_matches('(').parse().ok()
}

/// ConsumerPerformance's result, from its CSV header and the line after it
/// (`--show-detailed-stats` off): totals over the whole run, and the same
/// over the fetching alone (`fetch.*`: without the group join).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConsumerSummary {
    /// data.consumed.in.MB (keys and values).
    pub mib: f64,
    /// MB.sec, the group join included.
    pub mib_per_second: f64,
    /// data.consumed.in.nMsg.
    pub records: u64,
    pub records_per_second: f64,
    /// rebalance.time.ms: subscribing until the first partitions were
    /// assigned.
    pub rebalance_ms: f64,
    pub fetch_ms: f64,
    pub fetch_mib_per_second: f64,
    pub fetch_records_per_second: f64,
}

const CONSUMER_PERFORMANCE: &str = "ConsumerPerformance";

/// The columns ConsumerPerformance prints (Kafka 4.1), found by name.
const CONSUMER_HEADER_START: &str = "start.time, end.time";

/// The result line of ConsumerPerformance's `stdout`.
pub fn consumer_summary(stdout: &str) -> Result<ConsumerSummary, OutputError> {
    let mut lines = stdout.lines();
    let header = lines
        .by_ref()
        .find(|line| line.starts_with(CONSUMER_HEADER_START))
        .ok_or(OutputError::NoSummary {
            tool: CONSUMER_PERFORMANCE,
            what: "header",
        })?;
    // The WARNING of a run that timed out may come between them.
    let values = lines
        .find(|line| line.split(", ").count() == header.split(", ").count())
        .ok_or(OutputError::NoSummary {
            tool: CONSUMER_PERFORMANCE,
            what: "result",
        })?;
    let field = |field: &'static str| {
        header
            .split(", ")
            .zip(values.split(", "))
            .find(|(name, _)| name.trim() == field)
            .and_then(|(_, value)| value.trim().parse::<f64>().ok())
            .ok_or_else(|| OutputError::Field {
                tool: CONSUMER_PERFORMANCE,
                field,
                line: values.to_owned(),
            })
    };
    Ok(ConsumerSummary {
        mib: field("data.consumed.in.MB")?,
        mib_per_second: field("MB.sec")?,
        records: field("data.consumed.in.nMsg")? as u64,
        records_per_second: field("nMsg.sec")?,
        rebalance_ms: field("rebalance.time.ms")?,
        fetch_ms: field("fetch.time.ms")?,
        fetch_mib_per_second: field("fetch.MB.sec")?,
        fetch_records_per_second: field("fetch.nMsg.sec")?,
    })
}

/// EndToEndLatency's result: `Avg latency: A ms` and `Percentiles: 50th =
/// P, 99th = P, 99.9th = P` (whole milliseconds, as the tool rounds them
/// down).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EndToEndSummary {
    pub average_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

const END_TO_END_LATENCY: &str = "EndToEndLatency";

/// The result lines of EndToEndLatency's `stdout`.
pub fn end_to_end_summary(stdout: &str) -> Result<EndToEndSummary, OutputError> {
    let line_after = |prefix: &'static str| {
        stdout
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix(prefix))
            .ok_or(OutputError::NoSummary {
                tool: END_TO_END_LATENCY,
                what: prefix.trim_end_matches(':'),
            })
    };
    let average = line_after("Avg latency:")?;
    let percentiles = line_after("Percentiles:")?;
    let field = |field: &'static str, line: &str, value: Option<&str>| {
        value
            .and_then(|value| value.trim().parse::<f64>().ok())
            .ok_or_else(|| OutputError::Field {
                tool: END_TO_END_LATENCY,
                field,
                line: line.to_owned(),
            })
    };
    let percentile = |name: &'static str| {
        let value = percentiles.split(',').find_map(|part| {
            let (label, value) = part.split_once('=')?;
            (label.trim() == name).then_some(value)
        });
        field(name, percentiles, value)
    };
    Ok(EndToEndSummary {
        average_ms: field(
            "avg latency",
            average,
            average.trim().strip_suffix("ms").map(str::trim),
        )?,
        p50_ms: percentile("50th")?,
        p99_ms: percentile("99th")?,
        p999_ms: percentile("99.9th")?,
    })
}

/// How much of a client's output is kept (the end of it): the Java tools'
/// results are their last lines, and kcat prints a line per record, which
/// is counted rather than kept.
pub const OUTPUT_KEPT_MAX: usize = 64 << 10;

/// The end of a stream of output, as it arrives in pieces, and its lines
/// counted.
#[derive(Clone, Debug, Default)]
pub struct OutputTail {
    kept: std::collections::VecDeque<u8>,
    /// Newlines seen in the whole stream.
    pub lines: u64,
    /// Bytes seen in the whole stream.
    pub bytes: u64,
}

impl OutputTail {
    pub fn push(&mut self, piece: &[u8]) {
        self.lines += piece.iter().filter(|byte| **byte == b'\n').count() as u64;
        self.bytes += piece.len() as u64;
        let piece = &piece[piece.len().saturating_sub(OUTPUT_KEPT_MAX)..];
        let over = (self.kept.len() + piece.len()).saturating_sub(OUTPUT_KEPT_MAX);
        self.kept.drain(..over);
        self.kept.extend(piece);
        debug_assert!(self.kept.len() <= OUTPUT_KEPT_MAX);
    }

    /// The kept end as text (a character cut at its start is replaced).
    pub fn text(&self) -> String {
        let (front, back) = self.kept.as_slices();
        String::from_utf8_lossy(&[front, back].concat()).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from Kafka 4.1.2's tools run against `brook serve` and a
    // one-node Kafka 4.1.2 on this machine.

    const PRODUCER_OUTPUT: &str = "\
421920 records sent, 84384.0 records/sec (82.41 MB/sec), 368.2 ms avg latency, 639.0 ms max latency.
475560 records sent, 95112.0 records/sec (92.88 MB/sec), 324.3 ms avg latency, 438.0 ms max latency.
2000000 records sent, 84263.7 records/sec (82.29 MB/sec), 353.03 ms avg latency, 817.00 ms max latency, 321 ms 50th, 575 ms 95th, 720 ms 99th, 790 ms 99.9th.
";

    #[test]
    fn the_producer_summary_is_the_line_with_percentiles() {
        let summary = producer_summary(PRODUCER_OUTPUT).unwrap();
        assert_eq!(
            summary,
            ProducerSummary {
                records: 2_000_000,
                records_per_second: 84263.7,
                mib_per_second: 82.29,
                average_ms: 353.03,
                max_ms: 817.0,
                p50_ms: 321.0,
                p95_ms: 575.0,
                p99_ms: 720.0,
                p999_ms: 790.0,
            }
        );
        let kafka = "300000 records sent, 42128.9 records/sec (41.14 MB/sec), 626.44 ms avg latency, \
                     1332.00 ms max latency, 597 ms 50th, 1128 ms 95th, 1278 ms 99th, 1311 ms 99.9th.\n";
        let summary = producer_summary(kafka).unwrap();
        assert_eq!((summary.records, summary.p99_ms), (300_000, 1278.0));
        assert_eq!(summary.p999_ms, 1311.0);
    }

    #[test]
    fn a_producer_run_without_its_summary_is_an_error() {
        let progress_only = PRODUCER_OUTPUT.lines().next().unwrap();
        assert_eq!(
            producer_summary(progress_only),
            Err(OutputError::NoSummary {
                tool: "ProducerPerformance",
                what: "summary"
            })
        );
        let garbled = "x records sent, 1 records/sec (2 MB/sec), 3 ms avg latency, 4 ms max latency, \
                       5 ms 50th, 6 ms 95th, 7 ms 99th, 8 ms 99.9th.";
        assert!(matches!(
            producer_summary(garbled),
            Err(OutputError::Field {
                field: "records sent",
                ..
            })
        ));
    }

    const CONSUMER_OUTPUT: &str = "\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-12-06 15:58:26:521, 2026-12-06 15:58:31:356, 195.3125, 40.3956, 200000, 41365.0465, 3452, 1383, 141.2238, 144613.1598
";

    #[test]
    fn the_consumer_summary_is_read_by_column_name() {
        let summary = consumer_summary(CONSUMER_OUTPUT).unwrap();
        assert_eq!(
            summary,
            ConsumerSummary {
                mib: 195.3125,
                mib_per_second: 40.3956,
                records: 200_000,
                records_per_second: 41365.0465,
                rebalance_ms: 3452.0,
                fetch_ms: 1383.0,
                fetch_mib_per_second: 141.2238,
                fetch_records_per_second: 144613.1598,
            }
        );
        // A run that timed out warns between the header and the result.
        let timed_out = "\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
WARNING: Exiting before consuming the expected number of messages: timeout (10000 ms) exceeded. You can use the --timeout option to increase the timeout.
2026-12-06 15:59:52:007, 2026-12-06 15:59:54:322, 292.9688, 126.5524, 300000, 129589.6328, 976, 1339, 218.7967, 224047.7969
";
        let summary = consumer_summary(timed_out).unwrap();
        assert_eq!((summary.records, summary.rebalance_ms), (300_000, 976.0));
        assert_eq!(summary.fetch_mib_per_second, 218.7967);
    }

    #[test]
    fn a_consumer_run_without_its_result_is_an_error() {
        let header = CONSUMER_OUTPUT.lines().next().unwrap();
        assert_eq!(
            consumer_summary(header),
            Err(OutputError::NoSummary {
                tool: "ConsumerPerformance",
                what: "result"
            })
        );
        assert!(matches!(
            consumer_summary("Exception in thread \"main\""),
            Err(OutputError::NoSummary { what: "header", .. })
        ));
    }

    #[test]
    fn the_end_to_end_summary_has_the_average_and_percentiles() {
        let output = "\
Topic \"e2e\" does not exist. Will create topic with 1 partition(s) and replication factor = 1
0\t125.563999
1000\t0.910803
Avg latency: 2.9796 ms
Percentiles: 50th = 1, 99th = 16, 99.9th = 28
";
        assert_eq!(
            end_to_end_summary(output).unwrap(),
            EndToEndSummary {
                average_ms: 2.9796,
                p50_ms: 1.0,
                p99_ms: 16.0,
                p999_ms: 28.0,
            }
        );
        let cut_short = output.replace("Percentiles: 50th = 1, 99th = 16, 99.9th = 28\n", "");
        assert!(matches!(
            end_to_end_summary(&cut_short),
            Err(OutputError::NoSummary {
                what: "Percentiles",
                ..
            })
        ));
        let garbled = output.replace("99.9th = 28", "99.9th = many");
        assert!(matches!(
            end_to_end_summary(&garbled),
            Err(OutputError::Field {
                field: "99.9th",
                ..
            })
        ));
    }

    #[test]
    fn the_output_tail_counts_every_line_and_keeps_the_end() {
        // kcat -f '%o\n' over two partitions, arriving in uneven pieces.
        let kcat: String = (0..20_000)
            .map(|offset| format!("{}\n", offset / 2))
            .collect();
        let mut tail = OutputTail::default();
        for piece in kcat.as_bytes().chunks(4093) {
            tail.push(piece);
        }
        assert_eq!(tail.lines, 20_000);
        assert_eq!(tail.bytes, kcat.len() as u64);
        let kept = tail.text();
        assert_eq!(kept.len(), OUTPUT_KEPT_MAX);
        assert!(kcat.ends_with(&kept));
        // A piece larger than what is kept.
        let mut tail = OutputTail::default();
        tail.push(kcat.as_bytes());
        assert_eq!(tail.text(), kept);
        assert_eq!(tail.lines, 20_000);
    }
}
