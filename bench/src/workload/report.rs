//! A run's figures: throughput over the measured window, produce-ack and
//! end-to-end latency percentiles, the exactly-once verdict; as text for
//! people and JSON (`--json`) for machines.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::log::json::JsonObject;
use crate::workload::options::WorkloadOptions;
use crate::workload::stats::{Totals, Verification};

/// Latency percentiles in microseconds (histograms hold nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Percentiles {
    pub samples: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(histogram: &Histogram<u64>) -> Percentiles {
        let micros = |nanos: u64| nanos as f64 / 1000.0;
        Percentiles {
            samples: histogram.len(),
            p50: micros(histogram.value_at_quantile(0.50)),
            p90: micros(histogram.value_at_quantile(0.90)),
            p99: micros(histogram.value_at_quantile(0.99)),
            p999: micros(histogram.value_at_quantile(0.999)),
            p9999: micros(histogram.value_at_quantile(0.9999)),
            max: micros(histogram.max()),
        }
    }

    fn to_json(self) -> JsonObject {
        JsonObject::new()
            .integer("samples", self.samples)
            .number("p50_us", self.p50)
            .number("p90_us", self.p90)
            .number("p99_us", self.p99)
            .number("p99_9_us", self.p999)
            .number("p99_99_us", self.p9999)
            .number("max_us", self.max)
    }

    fn to_text(self) -> String {
        if self.samples == 0 {
            return "no samples".into();
        }
        let ms = |micros: f64| format!("{:.3}", micros / 1000.0);
        format!(
            "p50 {} | p90 {} | p99 {} | p99.9 {} | p99.99 {} | max {} ms ({} samples)",
            ms(self.p50),
            ms(self.p90),
            ms(self.p99),
            ms(self.p999),
            ms(self.p9999),
            ms(self.max),
            self.samples
        )
    }
}

#[derive(Debug)]
pub struct WorkloadReport {
    pub options: WorkloadOptions,
    /// The measured window.
    pub window: Duration,
    /// Counts over the window.
    pub totals: Totals,
    pub ack_latency: Histogram<u64>,
    pub e2e_latency: Histogram<u64>,
    /// `None` when the run had no producers or no consumers.
    pub verification: Option<Verification>,
    pub errors: Vec<String>,
}

impl WorkloadReport {
    fn per_second(&self, count: u64) -> f64 {
        count as f64 / self.window.as_secs_f64().max(1e-9)
    }

    pub fn produce_mb_per_second(&self) -> f64 {
        self.per_second(self.totals.produced_bytes) / 1e6
    }

    pub fn produce_records_per_second(&self) -> f64 {
        self.per_second(self.totals.produced_records)
    }

    pub fn consume_mb_per_second(&self) -> f64 {
        self.per_second(self.totals.consumed_bytes) / 1e6
    }

    pub fn consume_records_per_second(&self) -> f64 {
        self.per_second(self.totals.consumed_records)
    }

    pub fn ack(&self) -> Percentiles {
        Percentiles::of(&self.ack_latency)
    }

    pub fn end_to_end(&self) -> Percentiles {
        Percentiles::of(&self.e2e_latency)
    }

    pub fn to_text(&self) -> String {
        let options = &self.options;
        let mut text = format!(
            "workload: {} topic(s) × {} partitions, {} B records ({:.0}% random), acks={}, batch {} B, linger {:?}, compression {}, {} producer(s), {} consumer(s), rate {}\n",
            options.topics,
            options.partitions,
            options.record_bytes,
            options.random_fraction * 100.0,
            options.acks,
            options.batch_bytes,
            options.linger,
            options.compression,
            options.producers,
            options.consumers,
            if options.rate == 0 {
                "unthrottled".to_owned()
            } else {
                format!("{} rec/s", options.rate)
            },
        );
        text += &format!(
            "window {:.1} s: produce {:.1} MB/s ({:.0} rec/s), consume {:.1} MB/s ({:.0} rec/s), {} failed\n",
            self.window.as_secs_f64(),
            self.produce_mb_per_second(),
            self.produce_records_per_second(),
            self.consume_mb_per_second(),
            self.consume_records_per_second(),
            self.totals.failed_records,
        );
        text += &format!("produce→ack   {}\n", self.ack().to_text());
        text += &format!("end-to-end    {}\n", self.end_to_end().to_text());
        if let Some(verification) = &self.verification {
            text += &format!(
                "exactly once: {} ({} acknowledged, {} consumed, {} missing, {} duplicated, {} unacknowledged, checksums {})\n",
                if verification.exactly_once() {
                    "yes"
                } else {
                    "NO"
                },
                verification.acknowledged,
                verification.consumed,
                verification.missing,
                verification.duplicated,
                verification.unacknowledged,
                if verification.checksums_match {
                    "match"
                } else {
                    "DIFFER"
                },
            );
        }
        for error in &self.errors {
            text += &format!("error: {error}\n");
        }
        text
    }

    pub fn to_json_object(&self) -> JsonObject {
        let options = &self.options;
        let mut json = JsonObject::new()
            .object(
                "workload",
                JsonObject::new()
                    .integer("topics", options.topics as u64)
                    .integer("partitions", options.partitions as u64)
                    .integer("record_bytes", options.record_bytes as u64)
                    .number("random_fraction", options.random_fraction)
                    .string("acks", &options.acks.to_string())
                    .integer("batch_bytes", options.batch_bytes as u64)
                    .number("linger_ms", options.linger.as_secs_f64() * 1000.0)
                    .string("compression", &options.compression.to_string())
                    .integer("producers", options.producers as u64)
                    .integer("consumers", options.consumers as u64)
                    .integer("rate", options.rate),
            )
            .number("window_s", self.window.as_secs_f64())
            .number("produce_mb_per_s", self.produce_mb_per_second())
            .number("produce_records_per_s", self.produce_records_per_second())
            .number("consume_mb_per_s", self.consume_mb_per_second())
            .number("consume_records_per_s", self.consume_records_per_second())
            .integer("failed_records", self.totals.failed_records)
            .object("ack_latency", self.ack().to_json())
            .object("end_to_end_latency", self.end_to_end().to_json());
        if let Some(verification) = &self.verification {
            json = json.object(
                "verification",
                JsonObject::new()
                    .string("exactly_once", &verification.exactly_once().to_string())
                    .integer("acknowledged", verification.acknowledged)
                    .integer("consumed", verification.consumed)
                    .integer("missing", verification.missing)
                    .integer("duplicated", verification.duplicated)
                    .integer("unacknowledged", verification.unacknowledged),
            );
        }
        json
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::stats::latency_histogram;

    fn report() -> WorkloadReport {
        let mut ack = latency_histogram();
        for micros in 1..=1000u64 {
            ack.record(micros * 1000).unwrap();
        }
        WorkloadReport {
            options: WorkloadOptions::default(),
            window: Duration::from_secs(2),
            totals: Totals {
                produced_records: 2000,
                produced_bytes: 4_000_000,
                acked_records: 2000,
                consumed_records: 2000,
                consumed_bytes: 4_000_000,
                ..Totals::default()
            },
            ack_latency: ack,
            e2e_latency: latency_histogram(),
            verification: Some(Verification {
                acknowledged: 2000,
                consumed: 2000,
                checksums_match: true,
                ..Verification::default()
            }),
            errors: Vec::new(),
        }
    }

    #[test]
    fn rates_and_percentiles() {
        let report = report();
        assert_eq!(report.produce_mb_per_second(), 2.0);
        assert_eq!(report.produce_records_per_second(), 1000.0);
        let ack = report.ack();
        assert_eq!(ack.samples, 1000);
        assert!((ack.p50 - 500.0).abs() < 1.0, "{}", ack.p50);
        assert!((ack.p99 - 990.0).abs() < 2.0, "{}", ack.p99);
        assert!((ack.max - 1000.0).abs() < 1.0);
        assert!(report.to_text().contains("exactly once: yes"));
        assert!(report.to_text().contains("end-to-end    no samples"));
    }

    #[test]
    fn json_holds_every_figure() {
        let json = report().to_json_object().render();
        for key in [
            "\"produce_mb_per_s\": 2.000",
            "\"p99_99_us\"",
            "\"exactly_once\": \"true\"",
            "\"end_to_end_latency\"",
            "\"linger_ms\": 1.000",
        ] {
            assert!(json.contains(key), "{key} in {json}");
        }
    }
}
