//! The simulated brokers (registration, heartbeats, metadata catch-up) and
//! admin client (CreateTopics), and the controller's side of their requests.

use std::collections::BTreeMap;

use rand::Rng;

use super::{Bug, Checked, Event, HEARTBEAT_INTERVAL_MS, Payload, Simulation};
use crate::cluster::controller::{HeartbeatRequest, TopicDefaults, TopicRequest, create_topic};
use crate::cluster::image::TopicId;
use crate::cluster::quorum::{
    ControllerNode, Fetched, MetadataFetch, QuorumError, Registered, apply_catchup,
};
use crate::cluster::records::{BrokerRegistration, Endpoint};
use crate::cluster::visibility::Visibility;
use crate::protocol::errors::ErrorCode;
use crate::types::{BrokerId, TopicPartition};

impl Simulation {
    pub(super) fn registration(&self, node: usize) -> BrokerRegistration {
        let mut incarnation = [0u8; 16];
        incarnation[..8].copy_from_slice(&(node as u64).to_be_bytes());
        incarnation[8..].copy_from_slice(&self.nodes[node].incarnation.to_be_bytes());
        BrokerRegistration {
            id: BrokerId(node as i32),
            incarnation,
            listeners: vec![Endpoint {
                name: "PLAINTEXT".into(),
                host: format!("127.0.0.{}", node + 1),
                port: 9092,
            }],
            rack: None,
        }
    }

    /// The broker side: register until registered, then heartbeat; fetch
    /// the metadata log all along.
    pub(super) fn broker_timer(&mut self, node: usize) {
        let target = self.nodes[node]
            .controller_hint
            .map(|hint| hint.0 as usize)
            .unwrap_or_else(|| self.rng.gen_range(0..self.config.voters));
        let payload = match self.nodes[node].epoch {
            None => Payload::Register(self.registration(node)),
            Some(epoch) => Payload::Heartbeat {
                epoch,
                applied: self.nodes[node].image.offset,
                want_shut_down: self.nodes[node].shutting_down.is_some(),
                offline: match self.config.bug {
                    Some(Bug::HideOfflineDirs) => Vec::new(),
                    _ => self.nodes[node].offline.clone(),
                },
            },
        };
        self.send(node, target, payload);
        self.maybe_alter_partition(node, target);
        let fetch_from = self.rng.gen_range(0..self.config.voters);
        let offset = self.nodes[node].image.offset;
        let fetch = MetadataFetch {
            offset,
            // A simulated broker serves what it applied at once.
            served: offset,
            served_by_all: self.nodes[node].visibility.served_by_all(),
        };
        self.send(node, fetch_from, Payload::Fetch(fetch));
        let interval = if self.nodes[node].epoch.is_some() {
            HEARTBEAT_INTERVAL_MS / 4
        } else {
            300
        };
        self.schedule(interval, Event::BrokerTimer(node));
        // Forget the hint now and then, as a client's metadata refresh does.
        if self.rng.gen_bool(0.1) {
            self.nodes[node].controller_hint = None;
        }
    }

    pub(super) fn leader_hint(&self, node: usize) -> Option<BrokerId> {
        self.nodes[node]
            .controller
            .as_ref()
            .and_then(ControllerNode::leader)
    }

    pub(super) fn on_register(
        &mut self,
        from: usize,
        to: usize,
        registration: BrokerRegistration,
    ) -> Checked {
        let now = self.now_ms;
        let hint = self.leader_hint(to);
        let Some(controller) = self.nodes[to].controller.as_mut() else {
            return Ok(());
        };
        let broker = registration.id;
        let answer = match controller.register(registration, now) {
            Err(_) => Some(Err(ErrorCode::NOT_CONTROLLER)),
            Ok(Err(refusal)) => Some(Err(refusal.error)),
            Ok(Ok(Registered::Already { epoch })) => Some(Ok(epoch)),
            Ok(Ok(Registered::Proposed(proposal))) => {
                self.nodes[to]
                    .waiting
                    .push((proposal.index, proposal.term, from));
                self.nodes[to]
                    .heard
                    .insert((broker, proposal.index as i64), now);
                None
            }
        };
        if let Some(answer) = answer {
            self.send(to, from, Payload::Registered(answer, hint));
        }
        self.note_leadership(to);
        self.drain(to)
    }

    pub(super) fn on_heartbeat(
        &mut self,
        from: usize,
        to: usize,
        epoch: i64,
        applied: u64,
        want_shut_down: bool,
        offline: Vec<TopicPartition>,
    ) -> Checked {
        let now = self.now_ms;
        let hint = self.leader_hint(to);
        let Some(controller) = self.nodes[to].controller.as_mut() else {
            return Ok(());
        };
        let request = HeartbeatRequest {
            broker: BrokerId(from as i32),
            epoch,
            applied_offset: applied,
            want_shut_down,
            offline,
        };
        let (answer, should_shut_down) = match controller.heartbeat(request, now) {
            Err(_) => (ErrorCode::NOT_CONTROLLER, false),
            Ok(outcome) => (outcome.error, outcome.should_shut_down),
        };
        self.note_leadership(to);
        if should_shut_down {
            self.check_shut_down(to, BrokerId(from as i32))?;
        }
        if answer == ErrorCode::NONE {
            self.nodes[to]
                .heard
                .insert((BrokerId(from as i32), epoch), now);
        }
        self.send(
            to,
            from,
            Payload::HeartbeatAnswer(answer, hint, should_shut_down),
        );
        self.drain(to)
    }

    pub(super) fn on_fetched(&mut self, node: usize, fetched: &Fetched) -> Checked {
        self.nodes[node].visibility.learn(fetched.served_by_all);
        let mut image = self.nodes[node].image.clone();
        let before = image.offset;
        match apply_catchup(&mut image, &fetched.catchup) {
            Ok(_) => {}
            // A stale answer (to a request sent before a restart, or
            // overtaken by a later one) is dropped.
            Err(QuorumError::NotNext { .. }) => return Ok(()),
            Err(error) => {
                return Err(self.violation(format!("broker {node} cannot apply the log: {error}")));
            }
        }
        if image.offset != before {
            self.check_digest(node, &image)?;
            self.check_partitions(node, &image)?;
        }
        self.nodes[node].visibility.follow(&image);
        self.nodes[node].image = image;
        Ok(())
    }

    /// A client asks a random broker which topics exist: a live broker
    /// must know every topic a live broker showed before (it shows it, or
    /// holds the answer until it may), and what it shows counts as shown
    /// from then on. Brokers not live (down, paused, not registered or
    /// fenced at their epoch in the active controller's committed image)
    /// are not asked: Kafka's rule is about live brokers, and a fenced
    /// broker is not counted in `served_by_all`.
    pub(super) fn ask_topics(&mut self) -> Checked {
        let next = self.asks.gen_range(20..200);
        self.schedule(next, Event::AskTopics);
        let node = self.asks.gen_range(0..self.nodes.len());
        if !self.is_live_broker(node) {
            return Ok(());
        }
        let state = &self.nodes[node];
        if let Some(lost) = self
            .shown
            .iter()
            .find(|topic| state.visibility.of(**topic) == Visibility::Unknown)
        {
            return Err(self.violation(format!(
                "broker {node} (view at {}) told a client topic {lost:?} is unknown after a live broker showed it",
                state.image.offset
            )));
        }
        let shows_applied = self.config.bug == Some(Bug::ShowAppliedTopics);
        let visible: Vec<TopicId> = state
            .image
            .topics
            .keys()
            .copied()
            .filter(|topic| match state.visibility.of(*topic) {
                Visibility::Visible => true,
                Visibility::Pending => shows_applied,
                Visibility::Unknown => false,
            })
            .collect();
        self.report.topics_shown += visible
            .iter()
            .filter(|topic| !self.shown.contains(topic))
            .count() as u64;
        self.shown.extend(visible);
        Ok(())
    }

    /// Up, running, and registered unfenced at its current epoch in the
    /// committed image of the active controller of the highest term.
    fn is_live_broker(&self, node: usize) -> bool {
        let state = &self.nodes[node];
        let Some(epoch) = state.epoch.filter(|_| state.up && !state.paused) else {
            return false;
        };
        let leader = self
            .nodes
            .iter()
            .filter_map(|node| node.controller.as_ref())
            .filter(|controller| controller.is_leader())
            .max_by_key(|controller| controller.term());
        leader.is_some_and(|leader| {
            leader
                .image()
                .brokers
                .get(&state.id)
                .is_some_and(|broker| !broker.fenced && broker.epoch == epoch)
        })
    }

    pub(super) fn create_topic(&mut self) {
        self.topics_asked += 1;
        let name = format!("topic-{}", self.topics_asked);
        // The admin client lives on the last node's machine and goes where
        // its broker last heard the controller is.
        let from = self.nodes.len() - 1;
        let target = match self.nodes[from].controller_hint {
            Some(hint) => hint.0 as usize,
            None => self.rng.gen_range(0..self.config.voters),
        };
        self.send(from, target, Payload::CreateTopic(name));
        let next = self.rng.gen_range(200..1_500);
        self.schedule(next, Event::CreateTopic);
    }

    pub(super) fn on_create_topic(&mut self, to: usize, name: String) -> Checked {
        let Some(controller) = self.nodes[to].controller.as_mut() else {
            return Ok(());
        };
        let live = controller.image().live_brokers().count().max(1);
        let replication_factor = (self.topics_asked as usize % 3 + 1).min(live) as i16;
        let request = TopicRequest {
            name,
            partitions: (self.topics_asked % 4 + 1) as i32,
            replication_factor,
            configs: BTreeMap::new(),
            assignments: Vec::new(),
            id: None,
        };
        // The id is the request's own: a duplicated request carries it too.
        let number: u64 = request.name["topic-".len()..].parse().unwrap_or(0);
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&number.to_be_bytes());
        id[8..].copy_from_slice(&self.config.seed.to_be_bytes());
        let defaults = TopicDefaults {
            partitions: 1,
            replication_factor: 1,
            log: Default::default(),
        };
        if let Ok(Ok(_)) =
            controller.propose_with(|image| create_topic(image, &request, &defaults, TopicId(id)))
        {
            self.report.topics += 1;
        }
        self.drain(to)
    }
}
