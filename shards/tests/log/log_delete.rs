//! Deleting a partition (its topic was deleted): the directory is renamed
//! out of the way, then removed off the shard's thread; one a crash left
//! marked deleted is removed when the store opens next.

use brook_engine::log::config::LogConfig;
use brook_engine::types::{LeaderEpoch, TopicPartition};
use brook_shards::runtime::block_on;
use brook_shards::storage::Store;

use crate::common::*;

fn names(root: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with("doomed"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_deleted_partition_leaves_nothing_and_a_crash_mid_delete_is_finished_on_open() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_owned();
    block_on(async move {
        let (options, store) = open_store(&root, 0).await;
        let doomed = TopicPartition::new("doomed", 0);
        let log = store
            .open_partition(&doomed, LogConfig::default(), now_ms())
            .await
            .unwrap();
        log.append(&batch(100, 1000, now_ms()), LeaderEpoch(0), now_ms())
            .await
            .unwrap();
        assert_eq!(names(&root), vec!["doomed-0".to_owned()]);
        let log = store.remove_partition(&doomed).unwrap();
        log.delete().await.unwrap();
        assert_eq!(names(&root), Vec::<String>::new(), "nothing is left");
        store.close().await.unwrap();

        // A crash between the rename and the removal leaves the marked dir.
        let left = root.join("doomed-1.18b2a3c4d5e6f-delete");
        std::fs::create_dir(&left).unwrap();
        std::fs::write(left.join("00000000000000000000.log"), vec![0u8; 4096]).unwrap();
        let kept = root.join("doomed-delete-2");
        std::fs::create_dir(&kept).unwrap();
        let store = Store::open(options).await.unwrap();
        assert_eq!(
            names(&root),
            vec!["doomed-delete-2".to_owned()],
            "the marked directory is removed, a topic named so is not"
        );
        store.close().await.unwrap();
    });
}
