//! README's table of the broker settings Brook reads: each by its Kafka
//! name, with Brook's default, whether `kafka-configs` can change it while
//! the broker runs, and what it does. Built from the code that reads the
//! settings, so the table cannot drift from it: a test compares README's
//! copy with [`markdown`].

use crate::cluster::broker_config::{BrokerConfig, NO_EFFECT};
use crate::cluster::broker_describe::{BrokerIdentity, brook_values, kafka_default};
use crate::cluster::broker_dynamic::{Kind, kind};
use crate::cluster::topic_config::{TOPIC_CONFIGS, effective_value};
use crate::cluster::{endpoints, node_config};
use crate::log::config::LogConfig;

/// Where Brook's defaults differ from what `brook_values` says of an
/// unconfigured broker (they depend on how it was started).
const STARTED_DEFAULTS: &[(&str, &str)] = &[
    ("listeners", "PLAINTEXT://127.0.0.1:9092"),
    ("advertised.listeners", "the client listener's address"),
    ("log.dirs", "./brook-data"),
    ("log.dir", "./brook-data"),
];

/// One row: name, default, dynamic, what it does.
fn row(name: &str, note: String) -> String {
    let default = STARTED_DEFAULTS
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, default)| (*default).to_owned())
        .or_else(|| brook_default(name))
        .filter(|default| !default.is_empty())
        .map_or("(none)".to_owned(), |default| format!("`{default}`"));
    let dynamic = match kind(name) {
        Kind::Applied => "yes",
        Kind::NoEffect => "kept, no effect",
        Kind::NotServed => "no (Kafka: yes)",
        Kind::ReadOnly | Kind::Custom => "no",
    };
    format!("| `{name}` | {default} | {dynamic} | {note} |\n")
}

/// Brook's default of `name`: what an unconfigured broker runs with.
fn brook_default(name: &str) -> Option<String> {
    let identity = BrokerIdentity::default();
    let brook = brook_values(&BrokerConfig::default(), &identity)
        .into_iter()
        .find(|(known, _, _)| *known == name)
        .and_then(|(_, _, value)| value);
    brook
        .or_else(|| {
            let topic = TOPIC_CONFIGS
                .iter()
                .find(|topic| topic.broker_name() == Some(name))?;
            effective_value(&LogConfig::default(), topic.topic)
        })
        .or_else(|| kafka_default(name))
}

/// The table, header included.
pub fn markdown() -> String {
    let mut rows: Vec<(String, String)> = Vec::new();
    let identity = BrokerIdentity::default();
    for (name, _, _) in brook_values(&BrokerConfig::default(), &identity) {
        rows.push((name.to_owned(), String::new()));
    }
    for topic in TOPIC_CONFIGS {
        for name in topic.broker {
            let note = format!("default of the topic config `{}`", topic.topic);
            rows.push(((*name).to_owned(), note));
        }
    }
    for name in node_config::SETTINGS.iter().chain(endpoints::SETTINGS) {
        rows.push(((*name).to_owned(), String::new()));
    }
    for (name, reason) in NO_EFFECT {
        rows.push(((*name).to_owned(), format!("accepted, no effect: {reason}")));
    }
    rows.sort();
    // A name listed twice keeps its first row: the one with a note sorts
    // after the bare one, so keep the longest.
    let mut table = String::from(
        "| Kafka name | Brook's default | `kafka-configs` changes it live | Note |\n|---|---|---|---|\n",
    );
    let mut index = 0;
    while index < rows.len() {
        let name = &rows[index].0;
        let last = rows[index..]
            .iter()
            .take_while(|(other, _)| other == name)
            .count();
        let note = rows[index..index + last]
            .iter()
            .map(|(_, note)| note.clone())
            .max_by_key(String::len)
            .unwrap_or_default();
        table.push_str(&row(name, note));
        index += last;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    /// README's "Settings" table is this table: set
    /// `BROOK_UPDATE_README=1` to write it there after changing a setting.
    #[test]
    fn readme_lists_every_setting_as_the_code_reads_it() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
        let readme = std::fs::read_to_string(path).unwrap();
        let (start, end) = ("<!-- settings-table -->\n", "<!-- /settings-table -->");
        let from = readme.find(start).expect("README's table start marker") + start.len();
        let to = readme.find(end).expect("README's table end marker");
        let table = markdown();
        if std::env::var_os("BROOK_UPDATE_README").is_some() {
            let updated = format!("{}{table}{}", &readme[..from], &readme[to..]);
            std::fs::write(path, updated).unwrap();
            return;
        }
        assert!(
            readme[from..to] == table,
            "README's settings table is out of date; run this test with BROOK_UPDATE_README=1"
        );
    }

    #[test]
    fn rows_say_default_and_dynamic() {
        let table = markdown();
        for row in [
            "| `log.retention.ms` | `604800000` | yes | default of the topic config `retention.ms` |",
            "| `num.partitions` | `1` | no |  |",
            "| `log.dirs` | `./brook-data` | no |  |",
            "| `controller.quorum.voters` | (none) | no |  |",
        ] {
            assert!(table.contains(row), "{row} in\n{table}");
        }
        let threads = table
            .lines()
            .find(|line| line.starts_with("| `num.io.threads`"))
            .unwrap();
        assert!(
            threads.contains("kept, no effect | accepted, no effect: "),
            "{threads}"
        );
    }
}
