//! `meta.properties` in the data directory, as a Kafka KRaft broker writes
//! it: the cluster id is generated once and kept for the directory's life.

use std::path::Path;

use brook_engine::cluster::broker_config::parse_properties;

use crate::storage::StorageError;

const FILE: &str = "meta.properties";

/// Reads the cluster id from `meta.properties`, creating the file with
/// `wanted` (a cluster node's `cluster.id`) or a fresh id (16 random bytes
/// as hex: clients treat the id as opaque). A directory written for another
/// cluster is refused, as Kafka refuses it.
pub fn load_or_create_cluster_id(
    data_dir: &Path,
    broker_id: i32,
    wanted: Option<&str>,
) -> Result<String, StorageError> {
    let path = data_dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let settings = parse_properties(&text);
            let value = |name: &str| {
                settings
                    .iter()
                    .find(|(key, _)| key == name)
                    .map(|(_, value)| value.clone())
            };
            // As Kafka: a data directory belongs to one broker.
            if let Some(node) = value("node.id").filter(|node| *node != broker_id.to_string()) {
                return Err(StorageError::Corrupt {
                    path,
                    reason: format!("written by node.id {node}, this broker is {broker_id}"),
                });
            }
            let found = value("cluster.id").ok_or_else(|| StorageError::Corrupt {
                path: path.clone(),
                reason: "no cluster.id".into(),
            })?;
            match wanted {
                Some(wanted) if wanted != found => Err(StorageError::Corrupt {
                    path,
                    reason: format!(
                        "written for cluster.id {found}, this node is configured for {wanted}"
                    ),
                }),
                _ => Ok(found),
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let id = match wanted {
                Some(wanted) => wanted.to_owned(),
                None => new_cluster_id(&path)?,
            };
            let text =
                format!("#Written by Brook\nversion=1\nnode.id={broker_id}\ncluster.id={id}\n");
            write_durably(&path, text.as_bytes())?;
            Ok(id)
        }
        Err(error) => Err(StorageError::io("reading", &path, error)),
    }
}

/// Writes `contents` to `path` so that a crash leaves the old file or the
/// whole new one: a synced temporary file renamed over it, then the
/// directory synced (this runs before the shards' runtimes exist).
pub(crate) fn write_durably(path: &Path, contents: &[u8]) -> Result<(), StorageError> {
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::File::create(&temporary)
        .map_err(|source| StorageError::io("creating", &temporary, source))?;
    std::io::Write::write_all(&mut file, contents)
        .and_then(|()| file.sync_all())
        .map_err(|source| StorageError::io("writing", &temporary, source))?;
    std::fs::rename(&temporary, path)
        .map_err(|source| StorageError::io("renaming", &temporary, source))?;
    let directory = path.parent().unwrap_or(Path::new("."));
    std::fs::File::open(directory)
        .and_then(|directory| directory.sync_all())
        .map_err(|source| StorageError::io("syncing", directory, source))
}

fn new_cluster_id(path: &Path) -> Result<String, StorageError> {
    let mut random = [0u8; 16];
    let mut urandom = std::fs::File::open("/dev/urandom")
        .map_err(|source| StorageError::io("opening", path, source))?;
    std::io::Read::read_exact(&mut urandom, &mut random)
        .map_err(|source| StorageError::io("reading", path, source))?;
    Ok(random.iter().map(|byte| format!("{byte:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_id_is_created_once() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create_cluster_id(dir.path(), 0, None).unwrap();
        assert_eq!(first.len(), 32);
        assert_eq!(
            load_or_create_cluster_id(dir.path(), 0, None).unwrap(),
            first
        );
        assert!(matches!(
            load_or_create_cluster_id(dir.path(), 3, None),
            Err(StorageError::Corrupt { .. })
        ));
    }

    #[test]
    fn a_cluster_node_keeps_its_cluster_id_and_refuses_another() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            load_or_create_cluster_id(dir.path(), 1, Some("abc")).unwrap(),
            "abc"
        );
        assert_eq!(
            load_or_create_cluster_id(dir.path(), 1, Some("abc")).unwrap(),
            "abc"
        );
        let refused = load_or_create_cluster_id(dir.path(), 1, Some("xyz")).unwrap_err();
        assert!(refused.to_string().contains("cluster.id abc"), "{refused}");
    }
}
