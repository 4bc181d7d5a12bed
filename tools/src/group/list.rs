//! `brook group list [--state S,…]`: every group of the cluster. Each
//! broker answers ListGroups only for the groups it coordinates, so every
//! broker in Metadata is asked (as Kafka's admin client does) and the
//! answers are merged.

use std::collections::BTreeMap;

use kafka_protocol::messages::{ApiKey, ListGroupsRequest, ListGroupsResponse};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use super::protocol::LIST_GROUPS_VERSION;
use crate::cli::{CliError, Format, Out, Session, Table};

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only groups in these states (comma-separated, any case): Stable,
    /// Empty, PreparingRebalance, CompletingRebalance, Dead, Assigning,
    /// Reconciling.
    #[arg(long, value_delimiter = ',', value_parser = parse_state)]
    pub state: Vec<String>,
}

/// Group states as Kafka spells them (`ConsumerGroupState`/`GroupState`).
const STATES: [&str; 7] = [
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
    "Empty",
    "Assigning",
    "Reconciling",
];

/// A state name in any case → Kafka's spelling.
fn parse_state(text: &str) -> Result<String, String> {
    let text = text.trim();
    STATES
        .iter()
        .find(|state| state.eq_ignore_ascii_case(text))
        .map(|state| (*state).to_owned())
        .ok_or_else(|| format!("'{text}' is not a group state ({})", STATES.join(", ")))
}

/// One line of the output.
#[derive(Clone, Debug, Serialize)]
struct Listed {
    group: String,
    state: String,
    protocol_type: String,
}

pub async fn run(session: &Session, args: ListArgs, format: &Format) -> Result<(), CliError> {
    let metadata = session.metadata(Some(&[])).await?;
    let request = ListGroupsRequest::default().with_states_filter(
        args.state
            .iter()
            .map(|state| StrBytes::from_string(state.clone()))
            .collect(),
    );
    let mut groups: BTreeMap<String, Listed> = BTreeMap::new();
    for broker in &metadata.brokers {
        let address = Session::broker_address(&metadata, broker.node_id.0)?;
        let response: ListGroupsResponse = session
            .request(address, ApiKey::ListGroups, LIST_GROUPS_VERSION, &request)
            .await?;
        CliError::check(response.error_code, || {
            format!("listing the groups of broker {}", broker.node_id.0)
        })?;
        for listed in response.groups {
            let group = listed.group_id.to_string();
            groups.insert(
                group.clone(),
                Listed {
                    group,
                    state: listed.group_state.to_string(),
                    protocol_type: listed.protocol_type.to_string(),
                },
            );
        }
    }
    let mut out = Out::new();
    match format {
        Format::Json => {
            for listed in groups.values() {
                out.json(listed)?;
            }
        }
        _ => {
            let mut table = Table::new(&["GROUP", "STATE", "PROTOCOL-TYPE"]);
            for listed in groups.values() {
                table.row([&listed.group, &listed.state, &listed.protocol_type]);
            }
            out.table(&table)?;
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_taken_in_any_case_and_spelled_as_kafka_does() {
        for (text, expected) in [
            ("stable", Some("Stable")),
            ("EMPTY", Some("Empty")),
            (" preparingrebalance ", Some("PreparingRebalance")),
            ("CompletingRebalance", Some("CompletingRebalance")),
            ("dead", Some("Dead")),
            ("rebalancing", None),
            ("", None),
        ] {
            assert_eq!(parse_state(text).ok().as_deref(), expected, "{text:?}");
        }
    }
}
