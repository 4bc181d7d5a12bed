//! `meta.properties` in the data directory, as a Kafka KRaft broker writes
//! it: the cluster id is generated once and kept for the directory's life.

use std::path::Path;

use brook_engine::cluster::broker_config::parse_properties;

use crate::storage::StorageError;

const FILE: &str = "meta.properties";

/// Reads the cluster id from `meta.properties`, creating the file with a
/// fresh id (16 random bytes as hex: clients treat the id as opaque).
pub fn load_or_create_cluster_id(data_dir: &Path, broker_id: i32) -> Result<String, StorageError> {
    let path = data_dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let settings = parse_properties(&text);
            let id = settings
                .iter()
                .find(|(key, _)| key == "cluster.id")
                .map(|(_, value)| value.clone());
            id.ok_or_else(|| StorageError::Corrupt {
                path,
                reason: "no cluster.id".into(),
            })
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let id = new_cluster_id(&path)?;
            let text =
                format!("#Written by Brook\nversion=1\nnode.id={broker_id}\ncluster.id={id}\n");
            let temporary = path.with_extension("tmp");
            std::fs::write(&temporary, text)
                .map_err(|source| StorageError::io("writing", &temporary, source))?;
            std::fs::rename(&temporary, &path)
                .map_err(|source| StorageError::io("renaming", &temporary, source))?;
            Ok(id)
        }
        Err(error) => Err(StorageError::io("reading", &path, error)),
    }
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
        let first = load_or_create_cluster_id(dir.path(), 0).unwrap();
        assert_eq!(first.len(), 32);
        assert_eq!(load_or_create_cluster_id(dir.path(), 0).unwrap(), first);
    }
}
