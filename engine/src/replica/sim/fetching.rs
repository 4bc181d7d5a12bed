//! The followers' fetchers in the simulation: a fetch answered by the
//! leader at once (records, a diverging epoch, out of range or a refusal,
//! as the broker's leader answers), delivered now or held back and
//! delivered late; the follower then does what the broker's fetcher does
//! ([`crate::replica::follower::step_for`]), which drops an answer that no
//! longer applies.

use rand::Rng;

use super::{Answer, Entry, InFlight, ReplicaBug, ReplicaViolation, Sim, now};
use crate::protocol::errors::ErrorCode;
use crate::replica::divergence::{diverging_epoch, truncation_for};
use crate::replica::follower::{FollowerStep, PartitionAnswer, step_for};
use crate::replica::replication::{FetchAsked, FollowerFetch, Role};
use crate::types::{LeaderEpoch, Offset};

impl Sim {
    /// One round of a follower's fetcher: the leader's divergence check,
    /// then its record of the fetch, then the copy, synced before the next.
    /// A follower fetches from the leader, which answers at once; the
    /// answer arrives now or, sometimes, later (after anything else may
    /// have happened to the follower): at its next fetch from that leader
    /// or at any step.
    pub(super) fn fetch(&mut self, follower: usize) -> Result<(), ReplicaViolation> {
        let Some(leader) = self.leader_index() else {
            return Ok(());
        };
        let Some(replication) = self.nodes[follower].replication.as_ref() else {
            return Ok(());
        };
        let leader_epoch = replication.leader_epoch();
        if follower == leader || !self.nodes[follower].alive || replication.role() != Role::Follower
        {
            return Ok(());
        }
        if self.cut.is_some_and(|cut| cut == follower || cut == leader) {
            return Ok(());
        }
        // One fetcher per leader: nothing new until its answer is back,
        // which arrives now.
        if let Some(index) = self
            .in_flight
            .iter()
            .position(|flight| flight.follower == follower && flight.leader == leader)
        {
            let flight = self.in_flight.swap_remove(index);
            return self.deliver(flight);
        }
        let now = now(self.step);
        // The fetcher waits until what it last appended counts as held.
        let fetch_offset = self.nodes[follower].end();
        if self.nodes[follower].counted(self.config.bug) < fetch_offset {
            return self.disk_work(follower);
        }
        let last_epoch = self.nodes[follower]
            .epochs
            .latest_epoch()
            .unwrap_or(LeaderEpoch::NONE);
        let asked = FetchAsked {
            leader: self.nodes[leader].id,
            leader_epoch,
            fetch_offset,
        };
        let (leader_end, leader_epochs) = {
            let node = &self.nodes[leader];
            (node.end(), node.epochs.clone())
        };
        let answered = |error: ErrorCode, diverging_epoch| PartitionAnswer {
            error,
            high_watermark: Offset(-1),
            log_start_offset: Offset(0),
            diverging_epoch,
        };
        let mut answer = match diverging_epoch(
            &leader_epochs,
            Offset(0),
            leader_end,
            fetch_offset,
            last_epoch,
        ) {
            Err(error) => Answer {
                partition: answered(error, None),
                entries: Vec::new(),
            },
            Ok(Some(diverged)) => Answer {
                partition: answered(ErrorCode::NONE, Some(diverged)),
                entries: Vec::new(),
            },
            Ok(None) => {
                let replica = self.nodes[follower].id;
                let fetched = self.nodes[leader]
                    .replication
                    .as_mut()
                    .expect("a live leader")
                    .follower_fetched(FollowerFetch {
                        replica,
                        fetch_offset,
                        log_start_offset: Offset(0),
                        eligible: true,
                        now_ms: now,
                    });
                match fetched {
                    Err(error) => Answer {
                        partition: answered(error, None),
                        entries: Vec::new(),
                    },
                    Ok(actions) => {
                        self.apply(leader, actions)?;
                        let count = self.rng.gen_range(0..=4usize);
                        let entries: Vec<Entry> = self.nodes[leader]
                            .log
                            .iter()
                            .skip(fetch_offset.0 as usize)
                            .take(count)
                            .copied()
                            .collect();
                        Answer {
                            partition: answered(ErrorCode::NONE, None),
                            entries,
                        }
                    }
                }
            }
        };
        // Every answer carries the leader's HW as it is once the fetch is
        // recorded.
        answer.partition.high_watermark = self.nodes[leader].progress.high_watermark();
        let flight = InFlight {
            follower,
            leader,
            asked,
            answer,
        };
        if self.rng.gen_bool(0.9) {
            self.deliver(flight)
        } else {
            self.in_flight.push(flight);
            Ok(())
        }
    }

    /// A fetch answer held back arrives, unless the network between its
    /// follower and leader is cut.
    pub(super) fn deliver_late(&mut self) -> Result<(), ReplicaViolation> {
        if self.in_flight.is_empty() {
            return Ok(());
        }
        let index = self.rng.gen_range(0..self.in_flight.len());
        let flight = &self.in_flight[index];
        if self
            .cut
            .is_some_and(|cut| cut == flight.follower || cut == flight.leader)
        {
            return Ok(());
        }
        let flight = self.in_flight.swap_remove(index);
        self.deliver(flight)
    }

    /// The follower does with a fetch answer what the broker's fetcher
    /// does ([`step_for`]): nothing, if it no longer applies
    /// ([`PartitionReplication::takes_answer`]).
    fn deliver(&mut self, flight: InFlight) -> Result<(), ReplicaViolation> {
        let follower = flight.follower;
        let node = &self.nodes[follower];
        let Some(replication) = node.replication.as_ref() else {
            return Ok(());
        };
        let mut applies = replication.takes_answer(&flight.asked, node.end());
        if !applies {
            self.report.stale_answers += 1;
            applies = self.config.bug == Some(ReplicaBug::TakeStaleFetchAnswers);
        }
        let Answer { partition, entries } = flight.answer;
        match step_for(applies, &partition, node.end()) {
            FollowerStep::Drop | FollowerStep::Pause(_) => {}
            FollowerStep::TruncateTo(offset) => self.truncate_follower(follower, offset),
            // The simulated logs all start at 0, which a leader never
            // deletes: its log start is never past a follower's end.
            FollowerStep::StartAt(offset) => self.truncate_follower(follower, offset),
            FollowerStep::TruncateByEpoch(diverged) => {
                let node = &self.nodes[follower];
                let truncation = truncation_for(&node.epochs, node.end(), diverged);
                self.truncate_follower(follower, truncation.offset);
            }
            FollowerStep::Append {
                leader_high_watermark,
                ..
            } => {
                let now = now(self.step);
                let bug = self.config.bug;
                let node = &mut self.nodes[follower];
                // The log refuses records that do not start at its end.
                if entries.is_empty() || node.end() == flight.asked.fetch_offset {
                    for entry in entries {
                        node.append(entry, now);
                    }
                }
                let end = node.end();
                let counted = node.counted(bug);
                let Some(replication) = node.replication.as_mut() else {
                    return Ok(());
                };
                replication.appended(end);
                let mut actions = replication.counted(counted, now);
                actions.extend(replication.leader_high_watermark_is(leader_high_watermark));
                self.apply(follower, actions)?;
            }
        }
        Ok(())
    }

    fn truncate_follower(&mut self, follower: usize, offset: Offset) {
        let node = &mut self.nodes[follower];
        if offset >= node.end() {
            return;
        }
        self.report.truncations += 1;
        node.truncate(offset.0.max(0) as usize);
        let end = node.end();
        if let Some(replication) = node.replication.as_mut() {
            replication.truncated(end);
        }
    }
}
