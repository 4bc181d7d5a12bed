//! When a broker tells clients that a new topic exists: only once every
//! live broker serves it, so that a client asking the brokers in turn never
//! hears "exists" from one and then "unknown" from another.
//!
//! Each broker applies the metadata log on its own schedule, so a topic
//! appears on the broker that fetched first some milliseconds before the
//! others (aiokafka consumers started on a just-created topic failed on it;
//! a round-robin Metadata loop over three Brook brokers saw 1.5% of its
//! answers contradict an earlier one). The active controller knows how far
//! each broker serves the log (every metadata fetch says so) and answers
//! each fetch with the offset every live broker serves
//! (`served_by_all`). A broker shows a topic once that offset has reached
//! the offset at which the topic appeared in its own view:
//!
//! - a topic it has not applied is [`Visibility::Unknown`];
//! - one it has applied whose appearance every live broker is not yet known
//!   to serve is [`Visibility::Pending`]: the broker holds the client's
//!   request until it is known (one metadata fetch, tens of ms) rather than
//!   answer "unknown" after another broker answered "exists";
//! - otherwise [`Visibility::Visible`].
//!
//! Why no contradiction: a broker shows topic T only once every live broker
//! serves an offset at or past T's appearance, so every live broker has T
//! applied by then; any of them asked later answers Visible, or holds the
//! request until it learns the same (what it knows only grows). A
//! broker's `appeared` offset is the end of the catch-up that brought the
//! topic, at or after the record that created it, which only delays it.
//! The rule is checked under the controller simulator
//! (`cluster::sim`), whose checker must catch the rule broken
//! ([`crate::cluster::sim::Bug::ShowAppliedTopics`]).

use std::collections::BTreeMap;

use crate::cluster::cluster_image::ClusterImage;
use crate::cluster::image::TopicId;

/// What a broker may tell a client of one topic now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    /// Every live broker serves it: list it.
    Visible,
    /// Applied here, not yet known to be served everywhere: wait.
    Pending,
    /// Not in this broker's view.
    Unknown,
}

/// One broker's record of when its topics appeared and how far every live
/// broker serves the metadata log. Lives on the broker side (shard 0) and
/// is published with the image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopicVisibility {
    /// The view's offset when each topic of the image first appeared in it.
    appeared: BTreeMap<TopicId, u64>,
    /// The highest `served_by_all` the controller has said (it only grows
    /// here: a new controller, or a broker that joins, may say less).
    served_by_all: u64,
}

impl TopicVisibility {
    /// The view moved to `image` (a catch-up applied): its new topics
    /// appeared at its offset; deleted ones are forgotten.
    pub fn follow(&mut self, image: &ClusterImage) {
        self.appeared.retain(|id, _| image.topics.contains_key(id));
        for id in image.topics.keys() {
            self.appeared.entry(*id).or_insert(image.offset);
        }
        debug_assert!(self.appeared.len() == image.topics.len());
    }

    /// The controller said every live broker serves `served_by_all`.
    pub fn learn(&mut self, served_by_all: u64) {
        self.served_by_all = self.served_by_all.max(served_by_all);
    }

    pub fn served_by_all(&self) -> u64 {
        self.served_by_all
    }

    /// What a client may be told of topic `id` now.
    pub fn of(&self, id: TopicId) -> Visibility {
        match self.appeared.get(&id) {
            None => Visibility::Unknown,
            Some(appeared) if *appeared <= self.served_by_all => Visibility::Visible,
            Some(_) => Visibility::Pending,
        }
    }

    /// Whether any topic of the view is [`Visibility::Pending`].
    pub fn any_pending_at_all(&self) -> bool {
        self.appeared
            .values()
            .any(|appeared| *appeared > self.served_by_all)
    }

    /// Whether any topic of `ids` is [`Visibility::Pending`].
    pub fn any_pending(&self, mut ids: impl Iterator<Item = TopicId>) -> bool {
        ids.any(|id| self.of(id) == Visibility::Pending)
    }
}

/// The offset every live broker of `image` serves, from what each said
/// (`served`): the least over registered, unfenced brokers, a broker not
/// heard from counting as serving nothing; the image's own offset when no
/// broker is live (nothing to wait for).
pub fn served_by_all(image: &ClusterImage, served: &BTreeMap<crate::types::BrokerId, u64>) -> u64 {
    image
        .brokers
        .values()
        .filter(|broker| !broker.fenced)
        .map(|broker| served.get(&broker.registration.id).copied().unwrap_or(0))
        .min()
        .unwrap_or(image.offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::records::MetadataRecord;
    use crate::types::BrokerId;

    fn with_topics(offset: u64, ids: &[u8]) -> ClusterImage {
        let mut image = ClusterImage::default();
        for (index, id) in ids.iter().enumerate() {
            let record = MetadataRecord::Topic {
                name: format!("topic-{id}"),
                id: TopicId([*id; 16]),
            };
            image.apply(index as u64 + 1, &[record]).unwrap();
        }
        image.offset = offset;
        image
    }

    #[test]
    fn a_topic_shows_once_every_live_broker_serves_where_it_appeared() {
        let mut visibility = TopicVisibility::default();
        let topic = TopicId([1; 16]);
        assert_eq!(visibility.of(topic), Visibility::Unknown);
        visibility.follow(&with_topics(7, &[1]));
        assert_eq!(visibility.of(topic), Visibility::Pending);
        visibility.learn(6);
        assert_eq!(visibility.of(topic), Visibility::Pending);
        visibility.learn(7);
        assert_eq!(visibility.of(topic), Visibility::Visible);
        // A new controller that has heard from no one yet says less: what
        // was shown stays shown.
        visibility.learn(0);
        assert_eq!(visibility.of(topic), Visibility::Visible);
        // A later catch-up does not move where a topic appeared.
        visibility.follow(&with_topics(9, &[1, 2]));
        assert_eq!(visibility.of(topic), Visibility::Visible);
        assert_eq!(visibility.of(TopicId([2; 16])), Visibility::Pending);
        assert!(visibility.any_pending([topic, TopicId([2; 16])].into_iter()));
        assert!(!visibility.any_pending([topic].into_iter()));
        assert!(visibility.any_pending_at_all());
        // Deleted: forgotten.
        visibility.follow(&with_topics(10, &[2]));
        assert_eq!(visibility.of(topic), Visibility::Unknown);
        visibility.learn(10);
        assert!(!visibility.any_pending_at_all());
    }

    #[test]
    fn every_live_broker_counts_and_one_not_heard_from_serves_nothing() {
        use crate::cluster::records::{BrokerRegistration, Endpoint};
        let mut image = ClusterImage::default();
        for id in 0..3 {
            let registration = BrokerRegistration {
                id: BrokerId(id),
                incarnation: [id as u8; 16],
                listeners: vec![Endpoint {
                    name: "PLAINTEXT".into(),
                    host: "localhost".into(),
                    port: 9092,
                }],
                rack: None,
            };
            image
                .apply(
                    id as u64 + 1,
                    &[MetadataRecord::RegisterBroker(registration)],
                )
                .unwrap();
        }
        // Registered brokers start fenced: none is live yet.
        assert_eq!(served_by_all(&image, &BTreeMap::new()), 3);
        for id in 0..3 {
            let epoch = image.brokers[&BrokerId(id)].epoch;
            let unfence = MetadataRecord::UnfenceBroker {
                id: BrokerId(id),
                epoch,
            };
            image.apply(image.offset + 1, &[unfence]).unwrap();
        }
        let mut served = BTreeMap::from([(BrokerId(0), 9), (BrokerId(1), 8)]);
        assert_eq!(served_by_all(&image, &served), 0, "broker 2 not heard");
        served.insert(BrokerId(2), 12);
        assert_eq!(served_by_all(&image, &served), 8);
        let epoch = image.brokers[&BrokerId(1)].epoch;
        let fence = MetadataRecord::FenceBroker {
            id: BrokerId(1),
            epoch,
        };
        image.apply(image.offset + 1, &[fence]).unwrap();
        assert_eq!(
            served_by_all(&image, &served),
            9,
            "a fenced broker is not waited for"
        );
    }
}
