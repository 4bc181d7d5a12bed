//! Helpers shared by the end-to-end tests and the processes they drive.

pub mod broker;
pub mod clients;
pub mod cluster;
pub mod deliveries;
pub mod groups;
pub mod java;
pub mod kafka;
pub mod librdkafka;
pub mod load;
pub mod loop_fs;
pub mod netns;
pub mod raw;
pub mod scrape;

pub mod crash {
    //! The kill -9 test's appender process and its checker agree on these.

    pub const TOPIC: &str = "crash";
    pub const PARTITION: i32 = 0;

    /// The value of record `index` of the batch `id`: the id, then filler
    /// whose length varies with `sequence` (up to ~12 KiB) so batches of many
    /// sizes cross page and segment boundaries.
    pub fn record_value(id: &str, index: usize, sequence: u64) -> Vec<u8> {
        let mut value = format!("{id}/{index}/").into_bytes();
        let filler = ((sequence * 7919 + index as u64 * 104_729) % 3000) as usize;
        value.extend((0..filler).map(|i| (i % 251) as u8));
        value
    }
}
