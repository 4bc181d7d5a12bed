//! The fetch loop: fetch, print, flush, commit (at-least-once) or fetch,
//! commit, print (at-most-once, `--commit-before`), until `-n` records,
//! `--idle-exit` without records, Ctrl-C / SIGTERM, or a closed output;
//! then a last commit.
//! Positions are the next offset to read per partition; with `-n` a round
//! is cut after the last record printed, so a commit never covers a record
//! that was not printed.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use crate::cli::progress::Progress;
use crate::cli::{CliError, Out, Session};
use crate::consume::Plan;
use crate::consume::assign::{Start, start_for_committed};
use crate::consume::decode::ConsumedRecord;
use crate::consume::fetch::{FETCH_WAIT_MAX, Fetched, Fetcher};
use crate::consume::group::Member;
use crate::consume::{position, signal};

/// Whether commits follow or precede printing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitWhen {
    /// At-least-once: a crash after printing prints those records again.
    AfterPrinting,
    /// At-most-once: a crash after committing loses those records.
    BeforePrinting,
}

/// One run of `brook consume`; lives on the command's executor.
#[derive(Debug)]
pub struct Consumer<'a> {
    plan: &'a Plan,
    session: Rc<Session>,
    fetcher: Fetcher,
    member: Option<&'a mut Member>,
    positions: BTreeMap<i32, i64>,
    /// Positions moved since the last commit.
    uncommitted: bool,
    printed: u64,
    last_record_at: Instant,
    out: Out,
    progress: Progress,
}

impl<'a> Consumer<'a> {
    pub fn new(
        plan: &'a Plan,
        session: Rc<Session>,
        fetcher: Fetcher,
        member: Option<&'a mut Member>,
    ) -> Consumer<'a> {
        Consumer {
            plan,
            session,
            fetcher,
            member,
            positions: BTreeMap::new(),
            uncommitted: false,
            printed: 0,
            last_record_at: Instant::now(),
            out: Out::new(),
            progress: Progress::new("records"),
        }
    }

    pub async fn run(mut self) -> Result<(), CliError> {
        self.positions = match self.member {
            Some(_) => self.join().await?,
            None => self.standalone_positions().await?,
        };
        while !self.done() {
            self.step().await?;
        }
        self.progress.finish();
        if self.uncommitted {
            self.commit(&self.positions.clone()).await?;
        }
        Ok(())
    }

    fn done(&self) -> bool {
        signal::stop_requested()
            || signal::output_closed()
            || self
                .plan
                .max_messages
                .is_some_and(|max| self.printed >= max)
            || self
                .plan
                .idle_exit
                .is_some_and(|idle| self.last_record_at.elapsed() >= idle)
    }

    /// `--partition`, or every partition, at the asked start.
    async fn standalone_positions(&self) -> Result<BTreeMap<i32, i64>, CliError> {
        let leaders = self.fetcher.leaders();
        let partitions: Vec<i32> = match self.plan.partition {
            Some(partition) => vec![partition],
            None => leaders.iter().map(|leader| leader.partition).collect(),
        };
        let starts = partitions
            .into_iter()
            .map(|partition| (partition, self.plan.start))
            .collect();
        position::resolve(
            &self.session,
            &self.plan.topic,
            leaders,
            &starts,
            self.plan.isolation,
        )
        .await
    }

    /// Joins the group: the assigned partitions at their committed offsets.
    async fn join(&mut self) -> Result<BTreeMap<i32, i64>, CliError> {
        let Some(member) = self.member.as_deref_mut() else {
            return Ok(BTreeMap::new());
        };
        let partitions = member.join().await?;
        let committed = member.committed(&partitions).await?;
        self.fetcher.update_leaders().await?;
        let starts: BTreeMap<i32, Start> = partitions
            .iter()
            .map(|partition| {
                let offset = committed.get(partition).copied().unwrap_or(-1);
                (*partition, start_for_committed(offset, self.plan.reset))
            })
            .collect();
        self.uncommitted = false;
        let leaders = self.fetcher.leaders();
        let positions = position::resolve(
            &self.session,
            &self.plan.topic,
            leaders,
            &starts,
            self.plan.isolation,
        )
        .await;
        // `--idle-exit` counts from when there is something to read: a
        // join (the group's rebalance delay included) is not idleness.
        self.last_record_at = Instant::now();
        positions
    }

    async fn step(&mut self) -> Result<(), CliError> {
        if self
            .member
            .as_ref()
            .is_some_and(|member| member.needs_rejoin())
        {
            if self.uncommitted {
                self.commit(&self.positions.clone()).await?;
            }
            self.positions = self.join().await?;
        }
        if self.positions.is_empty() {
            // A member with no partitions waits for the next rebalance.
            glommio::timer::sleep(FETCH_WAIT_MAX).await;
            return Ok(());
        }
        let round = self.fetcher.fetch(&self.positions).await?;
        self.reset(&round.out_of_range).await?;
        let room = self
            .plan
            .max_messages
            .map(|max| max.saturating_sub(self.printed));
        let (records, advanced) = take(round.fetched, room);
        if advanced.is_empty() {
            return Ok(());
        }
        let mut next = self.positions.clone();
        next.extend(advanced);
        if self.plan.commit == CommitWhen::BeforePrinting && !self.commit(&next).await? {
            // The generation ended: nothing committed, so nothing printed.
            return Ok(());
        }
        self.print(&records)?;
        self.positions = next;
        self.uncommitted = self.plan.commit == CommitWhen::AfterPrinting;
        if self.uncommitted {
            self.commit(&self.positions.clone()).await?;
        }
        Ok(())
    }

    /// Commits `positions` when in a group; whether it was committed.
    async fn commit(&mut self, positions: &BTreeMap<i32, i64>) -> Result<bool, CliError> {
        let committed = match self.member.as_deref_mut() {
            Some(member) => member.commit(positions).await?,
            None => true,
        };
        if committed && *positions == self.positions {
            self.uncommitted = false;
        }
        Ok(committed)
    }

    /// Out-of-range positions go to the log start or end (auto.offset.reset).
    async fn reset(&mut self, partitions: &[i32]) -> Result<(), CliError> {
        if partitions.is_empty() {
            return Ok(());
        }
        let starts = partitions
            .iter()
            .map(|partition| (*partition, self.plan.reset.start()))
            .collect();
        let leaders = self.fetcher.leaders();
        let offsets = position::resolve(
            &self.session,
            &self.plan.topic,
            leaders,
            &starts,
            self.plan.isolation,
        )
        .await?;
        self.progress.finish();
        for (partition, offset) in &offsets {
            let was = self.positions.get(partition).copied().unwrap_or(-1);
            eprintln!(
                "brook consume: offset {was} of {}-{partition} is out of range; \
                 reading from {offset}",
                self.plan.topic
            );
        }
        self.positions.extend(offsets);
        self.uncommitted = true;
        Ok(())
    }

    fn print(&mut self, records: &[ConsumedRecord]) -> Result<(), CliError> {
        if records.is_empty() {
            return Ok(());
        }
        let mut buffer = Vec::new();
        for record in records {
            self.plan
                .format
                .render(&self.plan.topic, record, &mut buffer);
        }
        // Clear the progress line so records never print onto it.
        self.progress.finish();
        self.out.bytes(&buffer)?;
        self.out.flush()?;
        self.printed += records.len() as u64;
        self.last_record_at = Instant::now();
        self.progress.update(self.printed, self.plan.max_messages);
        Ok(())
    }
}

/// The records of a round to print, at most `room` of them (`None`: all),
/// and the positions after them: a partition printed whole moves to its
/// next offset, one cut short to after its last record printed, and one
/// not reached does not move.
pub fn take(fetched: Vec<Fetched>, room: Option<u64>) -> (Vec<ConsumedRecord>, BTreeMap<i32, i64>) {
    let mut room = room.unwrap_or(u64::MAX);
    let mut records = Vec::new();
    let mut positions = BTreeMap::new();
    for mut partition in fetched {
        if room == 0 {
            break;
        }
        let fits = (partition.records.len() as u64).min(room);
        room -= fits;
        if fits < partition.records.len() as u64 {
            partition.records.truncate(fits as usize);
            if let Some(last) = partition.records.last() {
                positions.insert(partition.partition, last.offset + 1);
            }
        } else {
            positions.insert(partition.partition, partition.next_offset);
        }
        records.append(&mut partition.records);
    }
    (records, positions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetched(partition: i32, offsets: &[i64], next_offset: i64) -> Fetched {
        Fetched {
            partition,
            records: offsets
                .iter()
                .map(|offset| ConsumedRecord {
                    partition,
                    offset: *offset,
                    timestamp: 0,
                    key: None,
                    value: None,
                    headers: Vec::new(),
                })
                .collect(),
            next_offset,
        }
    }

    fn offsets(records: &[ConsumedRecord]) -> Vec<(i32, i64)> {
        records.iter().map(|r| (r.partition, r.offset)).collect()
    }

    fn round() -> Vec<Fetched> {
        // Partition 0 ends with a control batch (next offset 4, not 3).
        vec![
            fetched(0, &[1, 2], 4),
            fetched(1, &[], 9),
            fetched(2, &[5, 6, 7], 8),
        ]
    }

    #[test]
    fn without_a_limit_every_record_prints_and_every_partition_moves() {
        let (records, positions) = take(round(), None);
        assert_eq!(offsets(&records), [(0, 1), (0, 2), (2, 5), (2, 6), (2, 7)]);
        assert_eq!(positions, BTreeMap::from([(0, 4), (1, 9), (2, 8)]));
    }

    #[test]
    fn a_limit_cuts_the_round_after_the_last_record_printed() {
        let (records, positions) = take(round(), Some(3));
        assert_eq!(offsets(&records), [(0, 1), (0, 2), (2, 5)]);
        assert_eq!(positions, BTreeMap::from([(0, 4), (1, 9), (2, 6)]));
        // Room for exactly partition 0: the others are not reached.
        let (records, positions) = take(round(), Some(2));
        assert_eq!(records.len(), 2);
        assert_eq!(positions, BTreeMap::from([(0, 4)]));
        let (records, positions) = take(round(), Some(0));
        assert!(records.is_empty() && positions.is_empty());
    }
}
