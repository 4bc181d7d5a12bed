//! What a named workload found: its figures, each beside the same-run
//! reference it is judged against and the target from the performance bar,
//! as a table for people and JSON for scripts.

use std::fmt::Write;

use crate::ceiling::CeilingReport;
use crate::log::json::JsonObject;

/// What a figure must reach.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// value / reference ≥ this.
    RatioAtLeast(f64),
    /// value ≤ this (in the figure's unit).
    AtMost(f64),
}

/// One number a workload produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// JSON key, e.g. `produce_mb_per_s`.
    pub key: &'static str,
    /// What it is, for the table.
    pub label: String,
    pub value: f64,
    pub unit: &'static str,
    /// The same-run figure it is compared with: what it is and its value.
    pub reference: Option<(String, f64)>,
    pub target: Option<Target>,
}

impl Figure {
    pub fn new(
        key: &'static str,
        label: impl Into<String>,
        value: f64,
        unit: &'static str,
    ) -> Figure {
        Figure {
            key,
            label: label.into(),
            value,
            unit,
            reference: None,
            target: None,
        }
    }

    pub fn against(mut self, reference: impl Into<String>, value: f64) -> Figure {
        self.reference = Some((reference.into(), value));
        self
    }

    pub fn target(mut self, target: Target) -> Figure {
        self.target = Some(target);
        self
    }

    /// value / reference.
    pub fn ratio(&self) -> Option<f64> {
        self.reference
            .as_ref()
            .filter(|(_, reference)| *reference > 0.0)
            .map(|(_, reference)| self.value / reference)
    }

    /// Whether the target is met; `None` without a target (or without the
    /// reference a ratio target needs).
    pub fn met(&self) -> Option<bool> {
        match self.target? {
            Target::RatioAtLeast(fraction) => self.ratio().map(|ratio| ratio >= fraction),
            Target::AtMost(limit) => Some(self.value <= limit),
        }
    }

    fn target_text(&self) -> String {
        match self.target {
            Some(Target::RatioAtLeast(fraction)) => {
                format!("≥ {:.0}% of reference", fraction * 100.0)
            }
            Some(Target::AtMost(limit)) => format!("≤ {} {}", number(limit), self.unit),
            None => String::new(),
        }
    }

    fn to_json(&self) -> JsonObject {
        let mut json = JsonObject::new()
            .string("label", &self.label)
            .number("value", self.value)
            .string("unit", self.unit);
        if let Some((reference, value)) = &self.reference {
            json = json
                .string("reference", reference)
                .number("reference_value", *value)
                .number("ratio", self.ratio().unwrap_or(f64::NAN));
        }
        if self.target.is_some() {
            json = json.string("target", &self.target_text()).string(
                "met",
                match self.met() {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "unknown",
                },
            );
        }
        json
    }
}

/// One named workload's run.
#[derive(Clone, Debug)]
pub struct NamedRun {
    /// `throughput`, `latency`, …
    pub name: &'static str,
    /// How the broker and load generator were set up.
    pub setup: String,
    pub figures: Vec<Figure>,
    /// The workload reports behind the figures, as text.
    pub details: String,
    /// The same as JSON.
    pub details_json: JsonObject,
    /// Why the workload could not finish, if it could not.
    pub error: Option<String>,
}

impl NamedRun {
    /// A workload that could not finish: no figures, the error instead.
    pub fn failed(name: &'static str, error: &dyn std::fmt::Display) -> NamedRun {
        NamedRun {
            name,
            setup: String::new(),
            figures: Vec::new(),
            details: format!("FAILED: {error}\n"),
            details_json: JsonObject::new().string("error", &error.to_string()),
            error: Some(error.to_string()),
        }
    }

    pub fn is_failed(&self) -> bool {
        self.error.is_some()
    }
}

/// Everything one `brook bench run <named>` measured.
#[derive(Clone, Debug)]
pub struct NamedReport {
    /// The machine's limits, measured in the same run (absent when only an
    /// external broker was measured and `--no-ceiling` was given).
    pub ceiling: Option<CeilingReport>,
    pub runs: Vec<NamedRun>,
    /// The same workloads against Apache Kafka (`--kafka`), in order.
    pub kafka: Vec<NamedRun>,
}

/// Kafka figures compared with a Brook figure of another key: Kafka with
/// flush.messages=1 acknowledges after an fsync, as Brook always does.
const COMPARED_WITH: &[(&str, &str)] = &[("produce_flush_mb_per_s", "produce_mb_per_s")];

/// Figures that describe the run (the rate asked, what was read) rather
/// than how well a broker did.
const CONTEXT: &[&str] = &[
    "rate_records_per_s",
    "read_gib",
    "partitions",
    "retained_gib",
    "records_read",
    "records",
];

/// Whether more of `unit` is better (throughput, counts) or less (time,
/// memory).
fn more_is_better(unit: &str) -> bool {
    !matches!(unit, "ms" | "s" | "MiB")
}

impl NamedReport {
    /// Whether any workload failed to run.
    pub fn any_failed(&self) -> bool {
        self.runs.iter().chain(&self.kafka).any(NamedRun::is_failed)
    }

    pub fn to_text(&self) -> String {
        let mut text = String::new();
        if let Some(ceiling) = &self.ceiling {
            text += &ceiling.to_text();
            text.push('\n');
        }
        for run in &self.runs {
            run_text(&mut text, run, "");
        }
        for run in &self.kafka {
            run_text(&mut text, run, " on Apache Kafka");
        }
        if !self.kafka.is_empty() {
            text += "== Brook and Apache Kafka, this run\n";
            text += &self.comparison();
        }
        text
    }

    /// Every figure measured on both brokers, as a Markdown table: each
    /// broker's value, Brook's over Kafka's, and which one did better.
    pub fn comparison(&self) -> String {
        let mut table = String::from(
            "| workload | figure | Brook | Apache Kafka | Brook ÷ Kafka | better |\n\
             | --- | --- | --- | --- | --- | --- |\n",
        );
        for kafka in &self.kafka {
            let brook = self.runs.iter().find(|run| run.name == kafka.name);
            if kafka.is_failed() || brook.is_none_or(NamedRun::is_failed) {
                let failed = |run: Option<&NamedRun>| {
                    run.and_then(|run| run.error.clone())
                        .map_or("ran".to_owned(), |error| {
                            // One table cell: a broker's log excerpt has
                            // lines and may have pipes.
                            let error = error.split_whitespace().collect::<Vec<_>>().join(" ");
                            format!("FAILED: {}", error.replace('|', "\\|"))
                        })
                };
                let _ = writeln!(
                    table,
                    "| {} | — | {} | {} | — | — |",
                    kafka.name,
                    failed(brook),
                    failed(Some(kafka))
                );
                continue;
            }
            let brook = brook.expect("checked above");
            for figure in &kafka.figures {
                let key = COMPARED_WITH
                    .iter()
                    .find(|(kafka_key, _)| *kafka_key == figure.key)
                    .map_or(figure.key, |(_, brook_key)| brook_key);
                let Some(ours) = brook.figures.iter().find(|ours| ours.key == key) else {
                    continue;
                };
                let ratio = ours.value / figure.value;
                let better = if CONTEXT.contains(&figure.key) || !ratio.is_finite() {
                    "—"
                } else if ours.value == figure.value {
                    "same"
                } else if (ours.value > figure.value) == more_is_better(figure.unit) {
                    "Brook"
                } else {
                    "Kafka"
                };
                let unit = |value: f64| format!("{} {}", number(value), figure.unit);
                let _ = writeln!(
                    table,
                    "| {} | {} | {} | {} | {} | {better} |",
                    kafka.name,
                    figure.label,
                    unit(ours.value).trim_end(),
                    unit(figure.value).trim_end(),
                    if ratio.is_finite() {
                        // Two significant digits below 0.1 (4.84 ms against
                        // 1,203 ms is 0.0040, not 0.00).
                        let decimals = 1i32.saturating_sub(ratio.log10().floor() as i32);
                        format!("{ratio:.*}", decimals.clamp(2, 6) as usize)
                    } else {
                        "—".into()
                    },
                );
            }
        }
        table
    }

    pub fn to_json(&self) -> String {
        let mut json = JsonObject::new();
        if let Some(ceiling) = &self.ceiling {
            json = json.object("ceiling", ceiling.to_json_object());
        }
        json = runs_json(json, &self.runs);
        if !self.kafka.is_empty() {
            json = json.object("kafka", runs_json(JsonObject::new(), &self.kafka));
        }
        json.render()
    }
}

/// One run's section of the text report.
fn run_text(text: &mut String, run: &NamedRun, on: &str) {
    let _ = match run.setup.is_empty() {
        true => writeln!(text, "== {}{on}", run.name),
        false => writeln!(text, "== {}{on} ({})", run.name, run.setup),
    };
    *text += &run.details;
    for figure in &run.figures {
        let _ = write!(
            text,
            "  {:<38} {:>12} {:<6}",
            figure.label,
            number(figure.value),
            figure.unit
        );
        if let Some((reference, value)) = &figure.reference {
            let _ = write!(
                text,
                " | {reference} {} → {:.2}×",
                number(*value),
                figure.ratio().unwrap_or(f64::NAN)
            );
        }
        if figure.target.is_some() {
            let verdict = match figure.met() {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "unknown",
            };
            let _ = write!(text, " | target {}: {verdict}", figure.target_text());
        }
        text.push('\n');
    }
    text.push('\n');
}

/// `runs` added to `json`, one object each.
fn runs_json(mut json: JsonObject, runs: &[NamedRun]) -> JsonObject {
    for run in runs {
        let mut figures = JsonObject::new();
        for figure in &run.figures {
            figures = figures.object(figure.key, figure.to_json());
        }
        json = json.object(
            run.name,
            JsonObject::new()
                .string("setup", &run.setup)
                .object("figures", figures)
                .object("workloads", run.details_json.clone()),
        );
    }
    json
}

/// A figure for the table: no more decimals than it deserves.
fn number(value: f64) -> String {
    if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_judged_against_the_reference() {
        let throughput = Figure::new("produce_mb_per_s", "produce", 700.0, "MB/s")
            .against("ceiling", 1000.0)
            .target(Target::RatioAtLeast(0.7));
        assert_eq!(throughput.ratio(), Some(0.7));
        assert_eq!(throughput.met(), Some(true));
        let slow = Figure {
            value: 500.0,
            ..throughput.clone()
        };
        assert_eq!(slow.met(), Some(false));
        let latency = Figure::new("p99_ms", "p99", 1.2, "ms").target(Target::AtMost(1.0));
        assert_eq!(latency.met(), Some(false));
        assert_eq!(latency.ratio(), None);
        let unreferenced = Figure::new("x", "x", 1.0, "MB/s").target(Target::RatioAtLeast(0.5));
        assert_eq!(unreferenced.met(), None);
    }

    #[test]
    fn the_report_renders_as_text_and_json() {
        let report = NamedReport {
            ceiling: None,
            runs: vec![NamedRun {
                name: "throughput",
                setup: "broker on cpu 0".into(),
                figures: vec![
                    Figure::new("produce_mb_per_s", "produce", 350.0, "MB/s")
                        .against("min(disk write, loopback TCP)", 1000.0)
                        .target(Target::RatioAtLeast(0.7)),
                ],
                details: "workload: …\n".into(),
                details_json: JsonObject::new().integer("records", 5),
                error: None,
            }],
            kafka: Vec::new(),
        };
        let text = report.to_text();
        assert!(text.contains("== throughput (broker on cpu 0)"), "{text}");
        assert!(text.contains("0.35×"), "{text}");
        assert!(text.contains("MISSED"), "{text}");
        assert!(!text.contains("Apache Kafka"), "{text}");
        let json = report.to_json();
        assert!(json.contains("\"produce_mb_per_s\": {"), "{json}");
        assert!(json.contains("\"ratio\": 0.350"), "{json}");
        assert!(json.contains("\"met\": \"no\""), "{json}");
        assert!(json.contains("\"records\": 5"), "{json}");
    }

    fn run(name: &'static str, figures: Vec<Figure>) -> NamedRun {
        NamedRun {
            name,
            setup: String::new(),
            figures,
            details: String::new(),
            details_json: JsonObject::new(),
            error: None,
        }
    }

    #[test]
    fn the_comparison_pairs_each_kafka_figure_with_brooks() {
        let report = NamedReport {
            ceiling: None,
            runs: vec![
                run(
                    "throughput",
                    vec![Figure::new("produce_mb_per_s", "produce", 900.0, "MB/s")],
                ),
                run(
                    "latency",
                    vec![
                        Figure::new("produce_p99_ms", "p99", 2.0, "ms"),
                        Figure::new("produce_p999_ms", "p99.9", 4.84, "ms"),
                        Figure::new("disk_alone_p99_ms", "disk alone", 1.0, "ms"),
                        Figure::new("rate_records_per_s", "rate", 1000.0, "rec/s"),
                    ],
                ),
                NamedRun::failed("recovery", &"no disk:\n| a log | line"),
            ],
            kafka: vec![
                run(
                    "throughput",
                    vec![
                        Figure::new("produce_mb_per_s", "produce", 300.0, "MB/s"),
                        Figure::new("produce_flush_mb_per_s", "flush", 1800.0, "MB/s"),
                    ],
                ),
                run(
                    "latency",
                    vec![
                        Figure::new("produce_p99_ms", "p99", 8.0, "ms"),
                        Figure::new("produce_p999_ms", "p99.9", 1203.0, "ms"),
                        Figure::new("rate_records_per_s", "rate", 1000.0, "rec/s"),
                    ],
                ),
                run(
                    "recovery",
                    vec![Figure::new("served_s", "served", 3.0, "s")],
                ),
            ],
        };
        let table = report.comparison();
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(
            rows,
            [
                "| throughput | produce | 900 MB/s | 300 MB/s | 3.00 | Brook |",
                // Kafka with an fsync per append is set beside Brook's
                // (always durable) throughput.
                "| throughput | flush | 900 MB/s | 1800 MB/s | 0.50 | Kafka |",
                // Less is better in milliseconds; Brook-only figures are left out.
                "| latency | p99 | 2.00 ms | 8.00 ms | 0.25 | Brook |",
                // Two significant digits, however small.
                "| latency | p99.9 | 4.84 ms | 1203 ms | 0.0040 | Brook |",
                "| latency | rate | 1000 rec/s | 1000 rec/s | 1.00 | — |",
                // A failure's lines and pipes stay inside its cell.
                "| recovery | — | FAILED: no disk: \\| a log \\| line | ran | — | — |",
            ],
            "{table}"
        );
        assert!(report.any_failed());
        let text = report.to_text();
        // A run with no setup (these, a failed start) shows no empty "()".
        assert!(text.contains("== throughput on Apache Kafka\n"), "{text}");
        assert!(!text.contains("()"), "{text}");
        assert!(
            text.contains("== Brook and Apache Kafka, this run"),
            "{text}"
        );
        let json = report.to_json();
        assert!(json.contains("\"kafka\": {"), "{json}");
    }
}
