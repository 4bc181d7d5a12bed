//! DescribeTopicPartitions' pages (KIP-966): topics in name order, their
//! partitions up to a limit per response, and a cursor where the next page
//! starts. Kafka's rules (`DescribeTopicPartitionsRequestHandler`,
//! `KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse`): the
//! request names topics (or none, for all), a cursor topic must be among
//! those named, and the limit is the request's, at most the broker's
//! `max.request.partition.size.limit` and at least 1.

use std::collections::BTreeSet;
use std::ops::Range;

use crate::cluster::image::{LocalImage, validate_topic_name};

/// Kafka's `max.request.partition.size.limit` default.
pub const PARTITIONS_PER_RESPONSE_MAX: usize = 2000;

/// Where a page starts: this partition of this topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub topic: String,
    pub partition: i32,
}

/// One topic of a page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageTopic {
    /// A topic that exists, with the partitions this page carries.
    Found {
        name: String,
        partitions: Range<usize>,
    },
    /// A named topic that does not exist; `invalid` if its name is not a
    /// legal topic name.
    Missing { name: String, invalid: bool },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    pub topics: Vec<PageTopic>,
    pub next: Option<Cursor>,
}

/// The page a request asks for, or why the request is invalid (Kafka's
/// INVALID_REQUEST messages).
pub fn page(
    image: &LocalImage,
    requested: &[String],
    cursor: Option<&Cursor>,
    limit: i32,
) -> Result<Page, String> {
    let all = requested.is_empty();
    let from = cursor.map_or("", |cursor| cursor.topic.as_str());
    let names: BTreeSet<&str> = if all {
        image.topics.keys().map(String::as_str).collect()
    } else {
        requested.iter().map(String::as_str).collect()
    };
    let names: Vec<&str> = names.into_iter().filter(|name| *name >= from).collect();
    if let Some(cursor) = cursor {
        if !all && !names.contains(&cursor.topic.as_str()) {
            return Err(format!(
                "DescribeTopicPartitionsRequest topic list should contain the cursor topic: {}",
                cursor.topic
            ));
        }
        if cursor.partition < 0 {
            return Err(format!(
                "DescribeTopicPartitionsRequest cursor partition must be valid: {cursor:?}"
            ));
        }
    }
    let mut remaining = (limit.max(1) as usize).min(PARTITIONS_PER_RESPONSE_MAX);
    let mut page = Page::default();
    for name in names {
        if remaining == 0 {
            page.next = Some(Cursor {
                topic: name.to_owned(),
                partition: 0,
            });
            break;
        }
        let Some(topic) = image.topic(name) else {
            if !all {
                page.topics.push(PageTopic::Missing {
                    name: name.to_owned(),
                    invalid: validate_topic_name(name).is_err(),
                });
            }
            continue;
        };
        let count = topic.partitions.len();
        let start = match cursor {
            Some(cursor) if cursor.topic == name => cursor.partition as usize,
            _ => 0,
        };
        let end = count.min(start.saturating_add(remaining));
        page.topics.push(PageTopic::Found {
            name: name.to_owned(),
            partitions: start.min(end)..end,
        });
        if end < count {
            page.next = Some(Cursor {
                topic: name.to_owned(),
                partition: end as i32,
            });
            break;
        }
        remaining -= end.saturating_sub(start);
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::image::{ShardId, TopicId, TopicMetadata};

    fn image(topics: &[(&str, usize)]) -> LocalImage {
        let mut image = LocalImage::default();
        for (name, partitions) in topics {
            image.topics.insert(
                (*name).to_owned(),
                TopicMetadata {
                    name: (*name).to_owned(),
                    id: TopicId([1; 16]),
                    partitions: vec![Some(ShardId(0)); *partitions],
                    configs: Default::default(),
                },
            );
        }
        image
    }

    fn found(name: &str, partitions: Range<usize>) -> PageTopic {
        PageTopic::Found {
            name: name.into(),
            partitions,
        }
    }

    fn cursor(topic: &str, partition: i32) -> Cursor {
        Cursor {
            topic: topic.into(),
            partition,
        }
    }

    #[test]
    fn pages_walk_topics_in_name_order_within_the_limit() {
        let image = image(&[("b", 3), ("a", 2), ("c", 1)]);
        let first = page(&image, &[], None, 4).unwrap();
        assert_eq!(first.topics, vec![found("a", 0..2), found("b", 0..2)]);
        assert_eq!(first.next, Some(cursor("b", 2)));
        let second = page(&image, &[], first.next.as_ref(), 4).unwrap();
        assert_eq!(second.topics, vec![found("b", 2..3), found("c", 0..1)]);
        assert_eq!(second.next, None);
        // A limit met exactly at a topic's end points at the next topic.
        let exact = page(&image, &[], None, 2).unwrap();
        assert_eq!(exact.topics, vec![found("a", 0..2)]);
        assert_eq!(exact.next, Some(cursor("b", 0)));
        // The limit is at least 1 and at most the broker's.
        assert_eq!(
            page(&image, &[], None, 0).unwrap().topics,
            vec![found("a", 0..1)]
        );
        assert_eq!(page(&image, &[], None, i32::MAX).unwrap().next, None);
    }

    #[test]
    fn named_topics_report_the_missing_and_check_the_cursor() {
        let image = image(&[("a", 1)]);
        let named = ["z".to_owned(), "a".to_owned(), "bad name".to_owned()];
        let answer = page(&image, &named, None, 10).unwrap();
        assert_eq!(
            answer.topics,
            vec![
                found("a", 0..1),
                PageTopic::Missing {
                    name: "bad name".into(),
                    invalid: true
                },
                PageTopic::Missing {
                    name: "z".into(),
                    invalid: false
                },
            ]
        );
        assert!(page(&image, &named, Some(&cursor("q", 0)), 10).is_err());
        assert!(page(&image, &named, Some(&cursor("a", -1)), 10).is_err());
        // A cursor past a topic's last partition gives it no partitions.
        let past = page(&image, &named, Some(&cursor("a", 5)), 10).unwrap();
        assert_eq!(past.topics[0], found("a", 1..1));
    }
}
