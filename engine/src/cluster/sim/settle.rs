//! The end of a run: every fault healed, then the checks that the cluster
//! settled (one controller, every broker caught up, registered and
//! unfenced) and that fencing works end to end.

use std::cmp::Reverse;

use super::{Checked, Event, SESSION_TIMEOUT_MS, Simulation, Violation};
use crate::cluster::quorum::ControllerNode;
use crate::types::BrokerId;

impl Simulation {
    pub(super) fn heal_everything(&mut self) {
        self.faults = false;
        self.partition = None;
        // Drop the pending faults and topic requests; restart and resume all.
        let pending: Vec<u64> = self
            .events
            .iter()
            .filter(|(_, event)| {
                matches!(
                    event,
                    Event::Crash(_)
                        | Event::ShutDown(..)
                        | Event::ShutdownTimeout(..)
                        | Event::Pause(..)
                        | Event::Partition(..)
                        | Event::CreateTopic
                        | Event::Fault
                        | Event::DirFails
                )
            })
            .map(|(sequence, _)| *sequence)
            .collect();
        for sequence in pending {
            self.events.remove(&sequence);
        }
        self.queue
            .retain(|Reverse((_, sequence))| self.events.contains_key(sequence));
        for node in 0..self.nodes.len() {
            self.nodes[node].shutting_down = None;
            if !self.nodes[node].up {
                self.schedule(0, Event::Restart(node));
            }
            if self.nodes[node].paused {
                self.schedule(0, Event::Resume(node));
            }
        }
    }

    fn active_controller(&self) -> Result<usize, Violation> {
        let leaders: Vec<usize> = (0..self.config.voters)
            .filter(|node| {
                self.nodes[*node]
                    .controller
                    .as_ref()
                    .is_some_and(ControllerNode::is_leader)
            })
            .collect();
        match leaders.as_slice() {
            [leader] => Ok(*leader),
            _ => Err(self.violation(format!(
                "after healing, {} active controllers",
                leaders.len()
            ))),
        }
    }

    pub(super) fn check_settled(&self) -> Checked {
        let leader = self.active_controller()?;
        let image = self.nodes[leader]
            .controller
            .as_ref()
            .expect("leader runs")
            .image();
        for (index, node) in self.nodes.iter().enumerate() {
            if node.image.digest() != image.digest() {
                return Err(self.violation(format!(
                    "after healing, broker {index} holds offset {} and the controller {}",
                    node.image.offset, image.offset
                )));
            }
            let registered = image.brokers.get(&node.id);
            if registered.is_none_or(|broker| broker.fenced || Some(broker.epoch) != node.epoch) {
                return Err(self.violation(format!(
                    "after healing, broker {index} is not registered and unfenced"
                )));
            }
            for topic_partition in &node.offline {
                let Some(partition) = image
                    .topic_by_name(&topic_partition.topic)
                    .and_then(|topic| topic.partitions.get(topic_partition.partition.0 as usize))
                else {
                    continue;
                };
                let in_isr = partition.isr.contains(&node.id) && partition.isr.len() > 1;
                if partition.leader == node.id || in_isr {
                    return Err(self.violation(format!(
                        "after healing, broker {index}'s replica of {topic_partition} is in a \
                         failed log directory, yet the partition is {partition:?}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Stops the last broker past its session: it must be fenced; resumed,
    /// it must be unfenced. (Not when that broker is the one voter: nothing
    /// runs to fence it, as a one-node Brook that is stopped is fenced by
    /// no one.)
    pub(super) fn check_fencing_end_to_end(&mut self) -> Checked {
        let node = self.nodes.len() - 1;
        if self.config.voters == 1 && node == 0 {
            return Ok(());
        }
        let start = self.now_ms;
        self.schedule(0, Event::Pause(node, SESSION_TIMEOUT_MS + 4_000));
        self.run_until(start + SESSION_TIMEOUT_MS + 3_000)?;
        let leader = self.active_controller()?;
        let fenced = |sim: &Simulation| {
            let image = sim.nodes[leader]
                .controller
                .as_ref()
                .expect("leader runs")
                .image();
            image
                .brokers
                .get(&BrokerId(node as i32))
                .is_none_or(|broker| broker.fenced)
        };
        if !fenced(self) {
            return Err(self.violation(format!(
                "broker {node}, stopped past its session, is not fenced"
            )));
        }
        self.run_until(start + SESSION_TIMEOUT_MS + 12_000)?;
        if fenced(self) {
            return Err(self.violation(format!("broker {node}, back for 8 s, is still fenced")));
        }
        Ok(())
    }
}
