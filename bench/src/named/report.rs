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
}

impl NamedReport {
    /// Whether any workload failed to run.
    pub fn any_failed(&self) -> bool {
        self.runs.iter().any(NamedRun::is_failed)
    }

    pub fn to_text(&self) -> String {
        let mut text = String::new();
        if let Some(ceiling) = &self.ceiling {
            text += &ceiling.to_text();
            text.push('\n');
        }
        for run in &self.runs {
            let _ = writeln!(text, "== {} ({})", run.name, run.setup);
            text += &run.details;
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
        text
    }

    pub fn to_json(&self) -> String {
        let mut json = JsonObject::new();
        if let Some(ceiling) = &self.ceiling {
            json = json.object("ceiling", ceiling.to_json_object());
        }
        for run in &self.runs {
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
        json.render()
    }
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
        };
        let text = report.to_text();
        assert!(text.contains("== throughput (broker on cpu 0)"), "{text}");
        assert!(text.contains("0.35×"), "{text}");
        assert!(text.contains("MISSED"), "{text}");
        let json = report.to_json();
        assert!(json.contains("\"produce_mb_per_s\": {"), "{json}");
        assert!(json.contains("\"ratio\": 0.350"), "{json}");
        assert!(json.contains("\"met\": \"no\""), "{json}");
        assert!(json.contains("\"records\": 5"), "{json}");
    }
}
