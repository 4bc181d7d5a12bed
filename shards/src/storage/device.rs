//! A work-around for glommio's device probe.
//!
//! The first time glommio opens a `DmaFile` on a block device it decides, once
//! per thread (its device map is thread-local), whether the device supports
//! polled IO, by reading one block at offset 0 of *that* file. On an empty file the read "succeeds" with
//! zero bytes, glommio concludes the device is pollable, and every later read on
//! the device fails with `EOPNOTSUPP` (seen on virtio disks, whose `io_poll` is 0).
//! Opening a non-empty file first lets the probe see the truth, so every entry
//! point to storage calls [`prepare_directory`] before opening anything else,
//! on every thread that does storage IO.

use std::cell::RefCell;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use glommio::io::OpenOptions;

use crate::storage::error::{StorageError, io_error};
use crate::storage::files::sync_directory;

const PROBE_FILE: &str = ".brook-io-probe";
const PROBE_BYTES: usize = 4096;

thread_local! {
    /// Devices whose glommio probe this thread has already run.
    static PROBED_DEVICES: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Creates `directory` if needed and makes sure glommio has probed its device
/// with a non-empty file.
pub async fn prepare_directory(directory: &Path) -> Result<(), StorageError> {
    create_directory_durably(directory).await?;
    let device = std::fs::metadata(directory)
        .map_err(io_error("inspecting", directory))?
        .dev();
    if PROBED_DEVICES.with_borrow(|probed| probed.contains(&device)) {
        return Ok(());
    }
    // One probe file per thread: shards probe the same directory concurrently.
    let thread: String = format!("{:?}", std::thread::current().id())
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let path = directory.join(format!("{PROBE_FILE}-{}-{thread}", std::process::id()));
    std::fs::write(&path, [0u8; PROBE_BYTES]).map_err(io_error("writing probe", &path))?;
    let file = OpenOptions::new()
        .read(true)
        .dma_open(crate::runtime::glommio_path(&path))
        .await
        .map_err(io_error("opening probe", &path))?;
    let probe = file
        .read_at(0, PROBE_BYTES)
        .await
        .map_err(io_error("reading probe", &path));
    let _ = file.close().await;
    let _ = std::fs::remove_file(&path);
    probe?;
    PROBED_DEVICES.with_borrow_mut(|probed| probed.push(device));
    Ok(())
}

/// Creates `directory` and any missing parents, then syncs the parent of
/// each directory created, so that a power loss cannot lose the new entries
/// (and with them files synced inside them, such as a new partition's first
/// acknowledged batches).
async fn create_directory_durably(directory: &Path) -> Result<(), StorageError> {
    let created: Vec<&Path> = directory
        .ancestors()
        .take_while(|ancestor| !ancestor.as_os_str().is_empty() && !ancestor.exists())
        .collect();
    std::fs::create_dir_all(directory).map_err(io_error("creating directory", directory))?;
    for created in created.iter().rev() {
        let parent = match created.parent() {
            Some(parent) if parent.as_os_str().is_empty() => Path::new("."),
            Some(parent) => parent,
            None => continue,
        };
        sync_directory(parent).await?;
    }
    Ok(())
}
