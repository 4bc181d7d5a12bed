//! The consumer's side of an incremental fetch session (KIP-227), as Kafka's
//! `FetchSessionHandler` keeps it: the first fetch names every partition
//! (epoch 0) and the broker answers with a session id; later fetches carry
//! only the partitions whose fetch offset moved, at the next epoch, and their
//! answers only the partitions with news. If the broker opens no session the
//! consumer keeps sending full fetches; if it loses the session
//! (`FETCH_SESSION_ID_NOT_FOUND`, `INVALID_FETCH_SESSION_EPOCH`) or the
//! broker refuses a fetch, the next fetch is full again.

use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::fetch_session::{INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest};

use crate::client::ClientError;
use crate::client::cluster::topic_name;

/// One partition the session fetches, by position in the caller's list.
#[derive(Debug)]
pub struct SessionEntry<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub fetch_offset: i64,
    /// KIP-320's epochs: the leader epoch the fetcher knows and that of its
    /// last fetched batch (a follower's divergence check); -1 for none.
    pub current_leader_epoch: i32,
    pub last_fetched_epoch: i32,
    /// A follower's log start offset (the leader's DeleteRecords waits for
    /// it); -1 for a consumer.
    pub log_start_offset: i64,
}

impl SessionEntry<'_> {
    /// What the broker's session must hold of this entry.
    fn sent(&self) -> Sent {
        (
            self.fetch_offset,
            self.current_leader_epoch,
            self.last_fetched_epoch,
            self.log_start_offset,
        )
    }
}

/// A partition's fetch offset, epochs and log start, as last sent.
type Sent = (i64, i32, i32, i64);

/// Fetch settings the session does not decide.
#[derive(Clone, Copy, Debug)]
pub struct FetchLimits {
    pub max_wait_ms: i32,
    pub max_bytes: i32,
    pub partition_max_bytes: i32,
}

#[derive(Debug)]
pub struct ClientSession {
    id: i32,
    /// The epoch of the next request; [`INITIAL_EPOCH`] means a full fetch.
    epoch: i32,
    /// What the broker's session holds for each partition.
    sent: Vec<Option<Sent>>,
}

impl ClientSession {
    /// A session of `partitions` partitions, not yet opened.
    pub fn new(partitions: usize) -> ClientSession {
        ClientSession {
            id: INVALID_SESSION_ID,
            epoch: INITIAL_EPOCH,
            sent: vec![None; partitions],
        }
    }

    /// The next fetch: every partition if full, else those whose offset
    /// moved since the broker last heard of them. `entries` are the session's
    /// partitions, always in the same order and of the same length.
    pub fn request<'a>(
        &mut self,
        entries: impl Iterator<Item = SessionEntry<'a>>,
        limits: FetchLimits,
    ) -> FetchRequest {
        let full = self.epoch == INITIAL_EPOCH;
        let mut topics: Vec<FetchTopic> = Vec::new();
        for (entry, sent) in entries.zip(self.sent.iter_mut()) {
            if !full && *sent == Some(entry.sent()) {
                continue;
            }
            *sent = Some(entry.sent());
            let partition = FetchPartition::default()
                .with_partition(entry.partition)
                .with_fetch_offset(entry.fetch_offset)
                .with_current_leader_epoch(entry.current_leader_epoch)
                .with_last_fetched_epoch(entry.last_fetched_epoch)
                .with_log_start_offset(entry.log_start_offset)
                .with_partition_max_bytes(limits.partition_max_bytes);
            match topics.last_mut() {
                Some(topic) if topic.topic.as_str() == entry.topic => {
                    topic.partitions.push(partition)
                }
                _ => topics.push(
                    FetchTopic::default()
                        .with_topic(topic_name(entry.topic))
                        .with_partitions(vec![partition]),
                ),
            }
        }
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(limits.max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(limits.max_bytes)
            .with_session_id(self.id)
            .with_session_epoch(self.epoch)
            .with_topics(topics)
    }

    /// Takes the response's session fields: `Ok(false)` if the broker lost
    /// the session (the response carries no partitions; fetch again, full).
    pub fn on_response(&mut self, error_code: i16, session_id: i32) -> Result<bool, ClientError> {
        let error = ErrorCode(error_code);
        if error == ErrorCode::FETCH_SESSION_ID_NOT_FOUND
            || error == ErrorCode::INVALID_FETCH_SESSION_EPOCH
        {
            self.reset();
            return Ok(false);
        }
        if error.is_error() {
            // The broker applied none of the request: what `request` took
            // as sent is not in its session.
            self.reset();
            return Err(ClientError::Kafka {
                what: "fetching".to_owned(),
                code: error_code,
            });
        }
        if session_id == INVALID_SESSION_ID {
            // No session opened, or the broker closed it: full fetches.
            self.reset();
        } else if self.epoch == INITIAL_EPOCH {
            self.id = session_id;
            self.epoch = next_epoch(INITIAL_EPOCH);
        } else {
            self.epoch = next_epoch(self.epoch);
        }
        Ok(true)
    }

    fn reset(&mut self) {
        self.id = INVALID_SESSION_ID;
        self.epoch = INITIAL_EPOCH;
        self.sent.iter_mut().for_each(|sent| *sent = None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: FetchLimits = FetchLimits {
        max_wait_ms: 100,
        max_bytes: 1 << 20,
        partition_max_bytes: 1 << 10,
    };

    fn entries(offsets: &[i64]) -> impl Iterator<Item = SessionEntry<'static>> + '_ {
        offsets
            .iter()
            .enumerate()
            .map(|(partition, fetch_offset)| SessionEntry {
                topic: if partition < 2 { "a" } else { "b" },
                partition: partition as i32,
                fetch_offset: *fetch_offset,
                current_leader_epoch: -1,
                last_fetched_epoch: -1,
                log_start_offset: -1,
            })
    }

    fn named(request: &FetchRequest) -> Vec<(String, i32, i64)> {
        request
            .topics
            .iter()
            .flat_map(|topic| {
                topic.partitions.iter().map(|partition| {
                    (
                        topic.topic.to_string(),
                        partition.partition,
                        partition.fetch_offset,
                    )
                })
            })
            .collect()
    }

    #[test]
    fn after_a_full_fetch_only_moved_offsets_are_sent() {
        let mut session = ClientSession::new(3);
        let first = session.request(entries(&[0, 0, 0]), LIMITS);
        assert_eq!((first.session_id, first.session_epoch), (0, 0));
        assert_eq!(first.topics.len(), 2, "one entry per run of a topic");
        assert_eq!(named(&first).len(), 3);
        assert!(session.on_response(0, 42).unwrap());
        let second = session.request(entries(&[0, 5, 0]), LIMITS);
        assert_eq!((second.session_id, second.session_epoch), (42, 1));
        assert_eq!(named(&second), vec![("a".to_owned(), 1, 5)]);
        assert!(session.on_response(0, 42).unwrap());
        let third = session.request(entries(&[0, 5, 0]), LIMITS);
        assert_eq!((third.session_id, third.session_epoch), (42, 2));
        assert!(named(&third).is_empty());
    }

    #[test]
    fn a_lost_session_makes_the_next_fetch_full() {
        for lost in [
            ErrorCode::FETCH_SESSION_ID_NOT_FOUND,
            ErrorCode::INVALID_FETCH_SESSION_EPOCH,
        ] {
            let mut session = ClientSession::new(2);
            session.request(entries(&[0, 0]), LIMITS);
            session.on_response(0, 42).unwrap();
            session.request(entries(&[3, 0]), LIMITS);
            assert!(!session.on_response(lost.0, 0).unwrap());
            let next = session.request(entries(&[3, 0]), LIMITS);
            assert_eq!((next.session_id, next.session_epoch), (0, 0));
            assert_eq!(named(&next).len(), 2);
        }
    }

    #[test]
    fn without_a_session_every_fetch_is_full() {
        let mut session = ClientSession::new(2);
        session.request(entries(&[0, 0]), LIMITS);
        assert!(session.on_response(0, INVALID_SESSION_ID).unwrap());
        let next = session.request(entries(&[0, 0]), LIMITS);
        assert_eq!((next.session_id, next.session_epoch), (0, 0));
        assert_eq!(named(&next).len(), 2);
    }

    #[test]
    fn other_top_level_errors_fail_the_fetch_and_the_next_one_is_full() {
        let mut session = ClientSession::new(2);
        session.request(entries(&[0, 0]), LIMITS);
        session.on_response(0, 42).unwrap();
        // The broker refuses a fetch that moved partition 0: it applied
        // nothing, so the next fetch must not take 7 as known to it.
        session.request(entries(&[7, 0]), LIMITS);
        let error = session.on_response(ErrorCode::UNKNOWN_SERVER_ERROR.0, 0);
        assert!(matches!(error, Err(ClientError::Kafka { code: -1, .. })));
        let next = session.request(entries(&[7, 0]), LIMITS);
        assert_eq!((next.session_id, next.session_epoch), (0, 0));
        assert_eq!(named(&next).len(), 2);
    }
}
