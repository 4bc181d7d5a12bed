//! The few Java library behaviours that Kafka's assignors depend on for their
//! results: `String.compareTo` (UTF-16 code units, not bytes), `String.hashCode`,
//! `TopicPartition.hashCode`, and the iteration order of `java.util.HashMap` /
//! `HashSet`.
//!
//! Kafka's group leader keeps the members' subscriptions in a `HashMap`, and a
//! few of its decisions are "the first member this map yields" (which member
//! keeps `maxQuota` owned partitions, which claim wins a tie of generations) or
//! "the first element of this `HashSet`" (which partition the sticky assignor
//! moves back). Reproducing those orders is what makes our assignments equal to
//! a Java leader's rather than merely as balanced.
//!
//! A `HashMap` built by inserting keys (never removing) iterates its buckets in
//! index order, and each bucket in insertion order: a resize splits a bucket in
//! two but keeps the relative order. The one case not reproduced is a bucket of
//! nine or more colliding keys, where Java turns the bucket into a tree (or
//! resizes early); member ids and topic partitions that collide that often do
//! not occur in practice.

use std::cmp::Ordering;

/// `java.util.HashMap`'s default capacity (`new HashMap<>()`).
const HASH_MAP_CAPACITY_DEFAULT: usize = 16;

/// Orders two strings as Java's `String.compareTo` does: by UTF-16 code units.
/// It differs from Rust's byte order only when one string has a character above
/// U+FFFF where the other has one in U+E000..=U+FFFF.
pub(crate) fn compare_strings(left: &str, right: &str) -> Ordering {
    left.encode_utf16().cmp(right.encode_utf16())
}

/// Java's `String.hashCode`: `s[0]*31^(n-1) + ... + s[n-1]` over UTF-16 code
/// units, wrapping.
pub(crate) fn string_hash(text: &str) -> i32 {
    text.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// Kafka's `TopicPartition.hashCode`: `31 * (31 + partition) + topic.hashCode()`.
pub(crate) fn topic_partition_hash(topic: &str, partition: i32) -> i32 {
    31i32
        .wrapping_mul(31i32.wrapping_add(partition))
        .wrapping_add(string_hash(topic))
}

/// The capacity a default `HashMap` has grown to once it has held `size_max`
/// entries: it doubles when an insertion takes the size past three quarters.
fn hash_map_capacity(size_max: usize) -> usize {
    let mut capacity = HASH_MAP_CAPACITY_DEFAULT;
    while size_max > capacity / 4 * 3 {
        capacity *= 2;
    }
    capacity
}

/// The bucket a key with `hash` falls in: `HashMap.hash` spreads the high bits
/// into the low ones before masking.
fn bucket(hash: i32, capacity: usize) -> usize {
    let bits = hash as u32;
    let spread = bits ^ (bits >> 16);
    spread as usize & (capacity - 1)
}

/// The order in which a default `HashMap` iterates keys that were inserted (all
/// distinct, none removed) in the order of `hashes`: returns indices into
/// `hashes`.
pub(crate) fn hash_map_order(hashes: &[i32]) -> Vec<usize> {
    let capacity = hash_map_capacity(hashes.len());
    let mut order: Vec<usize> = (0..hashes.len()).collect();
    // A stable sort by bucket keeps insertion order within a bucket.
    order.sort_by_key(|&index| bucket(hashes[index], capacity));
    order
}

/// A `java.util.HashSet` created with `new HashSet<>()`, reduced to what the
/// sticky assignor asks of it: membership, and which element `iterator().next()`
/// yields.
#[derive(Debug, Clone)]
pub(crate) struct JavaHashSet<T> {
    /// Elements with their hash and insertion sequence number.
    entries: Vec<(T, i32, u64)>,
    /// The largest size the set has had: capacity grows with it and never shrinks.
    size_max: usize,
    /// Sequence number for the next insertion.
    next_sequence: u64,
}

impl<T> Default for JavaHashSet<T> {
    fn default() -> Self {
        JavaHashSet {
            entries: Vec::new(),
            size_max: 0,
            next_sequence: 0,
        }
    }
}

impl<T: PartialEq + Clone> JavaHashSet<T> {
    /// Adds `element` unless present (a present element keeps its place).
    pub(crate) fn insert(&mut self, element: T, hash: i32) {
        if self
            .entries
            .iter()
            .any(|(existing, _, _)| *existing == element)
        {
            return;
        }
        self.entries.push((element, hash, self.next_sequence));
        self.next_sequence += 1;
        self.size_max = self.size_max.max(self.entries.len());
    }

    pub(crate) fn remove(&mut self, element: &T) {
        self.entries.retain(|(existing, _, _)| existing != element);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The element Java's `iterator().next()` returns: lowest bucket first, and
    /// within a bucket the earliest inserted.
    pub(crate) fn first(&self) -> Option<T> {
        let capacity = hash_map_capacity(self.size_max);
        self.entries
            .iter()
            .min_by_key(|(_, hash, sequence)| (bucket(*hash, capacity), *sequence))
            .map(|(element, _, _)| element.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_hash_matches_java() {
        // Values from Java's String.hashCode.
        let rows: [(&str, i32); 5] = [
            ("", 0),
            ("t0", 3644),
            ("hello", 99_162_322),
            ("consumer-1-0f3a", 332_829_975),
            ("\u{1F600}", 1_772_899),
        ];
        for (text, expected) in rows {
            assert_eq!(string_hash(text), expected, "{text:?}");
        }
    }

    #[test]
    fn compare_strings_uses_utf16_code_units() {
        assert_eq!(compare_strings("a", "b"), Ordering::Less);
        assert_eq!(compare_strings("ab", "a"), Ordering::Greater);
        // U+FF01 is 0xFF01 in UTF-16; U+1F600 starts with the surrogate 0xD83D.
        assert_eq!(compare_strings("\u{1F600}", "\u{FF01}"), Ordering::Less);
        assert_eq!("\u{1F600}".cmp("\u{FF01}"), Ordering::Greater);
    }

    #[test]
    fn hash_map_order_follows_buckets_then_insertion() {
        // "t1" (3645) lands in bucket 13, "t0" (3644) in 12: t0 first whatever
        // the insertion order.
        let hashes = [string_hash("t1"), string_hash("t0")];
        assert_eq!(hash_map_order(&hashes), vec![1, 0]);
        // Equal hashes keep insertion order.
        assert_eq!(hash_map_order(&[7, 7, 3]), vec![2, 0, 1]);
        // Thirteen keys make the table grow to 32 buckets.
        assert_eq!(hash_map_capacity(12), 16);
        assert_eq!(hash_map_capacity(13), 32);
        let hashes: Vec<i32> = (0..13).map(|index| 31 - index).collect();
        let order = hash_map_order(&hashes);
        assert_eq!(order[0], 12, "hash 19 is bucket 19 of 32, the lowest");
    }

    #[test]
    fn java_hash_set_first_is_lowest_bucket_then_oldest() {
        let mut set = JavaHashSet::default();
        set.insert("b", 18);
        set.insert("a", 2);
        set.insert("c", 2);
        assert_eq!(set.first(), Some("b"), "18 & 15 = bucket 2, inserted first");
        set.remove(&"b");
        assert_eq!(set.first(), Some("a"));
        set.insert("b", 18);
        assert_eq!(
            set.first(),
            Some("a"),
            "re-inserted b goes to the end of its bucket"
        );
        set.remove(&"a");
        set.remove(&"b");
        set.remove(&"c");
        assert!(set.is_empty());
        assert_eq!(set.first(), None);
    }
}
