//! The partition log's formats and decisions, without IO.
//!
//! A partition is a directory of segments; a segment is a `.log` of Kafka v2
//! record batches plus a sparse `.index` (offset → position) and `.timeindex`
//! (timestamp → offset), all named by the segment's base offset. This module
//! owns the byte layouts (exactly Kafka's, so Kafka's tools read our files and
//! we read theirs) and every rule that decides something about them: where a
//! lookup lands, when a segment rolls, what retention deletes, how much of a
//! torn segment survives recovery, which records compaction keeps.
//! `brook-shards` does the IO around them.

pub mod batch;
pub mod builder;
pub mod checkpoint;
pub mod client_batch;
pub mod compaction;
pub mod config;
pub mod control;
pub mod epoch_cache;
pub mod file_name;
pub mod index;
pub mod indexer;
pub mod placement;
pub mod progress;
pub mod records;
pub mod recovery;
pub mod retention;
pub mod roll;
pub mod segments;
