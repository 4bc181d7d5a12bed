//! The process the crash test kills: appends batches to one partition log
//! from several concurrent tasks, waits for each to be durable, and only then
//! prints `ack <base> <last> <id>`. Run as `crash_appender <data-dir> <run>`.

use std::io::Write;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::log::config::LogConfig;
use brook_engine::types::{LeaderEpoch, TimestampMs, TopicPartition};
use brook_shards::runtime::block_on;
use brook_shards::storage::{Store, StoreOptions};
use brook_tests::crash::{PARTITION, TOPIC, record_value};

const APPENDERS: u64 = 4;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(root), Some(run)) = (
        args.next(),
        args.next().and_then(|run| run.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: crash_appender <data-dir> <run>");
        std::process::exit(2);
    };
    block_on(async move {
        let store = Rc::new(
            Store::open(StoreOptions::in_dir(PathBuf::from(root), 0).unwrap())
                .await
                .expect("opening the store"),
        );
        let config = LogConfig {
            segment_bytes: 256 << 10,
            ..LogConfig::default()
        };
        let topic_partition = TopicPartition::new(TOPIC, PARTITION);
        let log = store
            .open_partition(&topic_partition, config, now_ms())
            .await
            .expect("opening the log");
        let checkpoints = glommio::spawn_local({
            let store = store.clone();
            async move {
                loop {
                    glommio::timer::sleep(Duration::from_millis(30)).await;
                    store.checkpoint().await.expect("checkpointing");
                }
            }
        });
        let appenders: Vec<_> = (0..APPENDERS)
            .map(|task| {
                let log = log.clone();
                glommio::spawn_local(async move {
                    for sequence in 0u64.. {
                        let id = format!("{run}-{task}-{sequence}");
                        let count = 1 + (sequence % 5) as usize;
                        let records: Vec<NewRecord> = (0..count)
                            .map(|index| {
                                NewRecord::value(
                                    record_value(&id, index, sequence),
                                    TimestampMs(now_ms()),
                                )
                            })
                            .collect();
                        let bytes = encode_batch(&records, &BatchOptions::default());
                        let info = log
                            .append(&bytes, LeaderEpoch(0), now_ms())
                            .await
                            .expect("appending");
                        log.wait_durable(info.log_end_offset)
                            .await
                            .expect("syncing");
                        let mut stdout = std::io::stdout().lock();
                        writeln!(
                            stdout,
                            "ack {} {} {id}",
                            info.base_offset.0, info.last_offset.0
                        )
                        .expect("printing");
                        stdout.flush().expect("flushing");
                    }
                })
            })
            .collect();
        for appender in appenders {
            appender.await;
        }
        checkpoints.await;
    });
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
