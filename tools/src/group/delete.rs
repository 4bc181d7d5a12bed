//! `brook group delete G…`: DeleteGroups to each group's coordinator. Only
//! a group with no members can be deleted (NON_EMPTY_GROUP otherwise), and
//! one that does not exist is GROUP_ID_NOT_FOUND. Every group is tried;
//! each gets a line (deleted, or its error), and any failure makes the
//! command fail with that error.

use kafka_protocol::messages::{ApiKey, DeleteGroupsRequest, DeleteGroupsResponse, GroupId};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use super::protocol::{self, DELETE_GROUPS_VERSION};
use crate::cli::{CliError, Format, KafkaCode, Out, Session, Table};

#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// Groups to delete.
    #[arg(required = true, value_name = "GROUP")]
    pub groups: Vec<String>,
}

/// One line of `--format json`.
#[derive(Debug, Serialize)]
struct Deleted<'a> {
    group: &'a str,
    /// Kafka's error name and code, or `None` when the group was deleted.
    error: Option<String>,
}

pub async fn run(session: &Session, args: DeleteArgs, format: &Format) -> Result<(), CliError> {
    let mut outcomes = Vec::with_capacity(args.groups.len());
    for group in &args.groups {
        outcomes.push(delete(session, group).await?);
    }
    let mut out = Out::new();
    let mut table = Table::new(&["GROUP", "RESULT"]);
    for (group, code) in args.groups.iter().zip(&outcomes) {
        let error = (*code != 0).then(|| KafkaCode(*code).to_string());
        match format {
            Format::Json => out.json(&Deleted { group, error })?,
            _ => table.row([group.clone(), error.unwrap_or_else(|| "deleted".to_owned())]),
        }
    }
    if !table.is_empty() {
        out.table(&table)?;
    }
    out.flush()?;
    failure(&args.groups, &outcomes)
}

/// DeleteGroups for `group` at its coordinator: its error code.
async fn delete(session: &Session, group: &str) -> Result<i16, CliError> {
    let coordinator = protocol::coordinator(session, group).await?;
    let request = DeleteGroupsRequest::default()
        .with_groups_names(vec![GroupId(StrBytes::from_string(group.to_owned()))]);
    let response: DeleteGroupsResponse = session
        .request(
            coordinator,
            ApiKey::DeleteGroups,
            DELETE_GROUPS_VERSION,
            &request,
        )
        .await?;
    response
        .results
        .iter()
        .find(|result| result.group_id.as_str() == group)
        .map(|result| result.error_code)
        .ok_or_else(|| CliError::Failed(format!("DeleteGroups gave no answer for {group}")))
}

/// The command's outcome: the first failure, naming how many others failed.
fn failure(groups: &[String], codes: &[i16]) -> Result<(), CliError> {
    let mut failed = groups.iter().zip(codes).filter(|(_, code)| **code != 0);
    let Some((group, code)) = failed.next() else {
        return Ok(());
    };
    let others = failed.count();
    let what = match others {
        0 => format!("deleting group {group}"),
        others => format!("deleting group {group} (and {others} more that failed)"),
    };
    Err(CliError::Kafka { what, code: *code })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_the_error() {
        let groups: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        assert!(failure(&groups, &[0, 0, 0]).is_ok());
        assert_eq!(
            failure(&groups, &[0, 68, 0]).unwrap_err().to_string(),
            "deleting group b: NON_EMPTY_GROUP (68)"
        );
        assert_eq!(
            failure(&groups, &[69, 68, 0]).unwrap_err().to_string(),
            "deleting group a (and 1 more that failed): GROUP_ID_NOT_FOUND (69)"
        );
    }
}
