//! Small-file helpers: opening segment files, atomic checkpoint writes, and
//! reading a whole (small) file through O_DIRECT.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use brook_engine::log::file_name::{SegmentFileKind, segment_file_name};
use brook_engine::types::Offset;
use glommio::io::{BufferedFile, Directory, DmaFile, OpenOptions};

use crate::runtime::glommio_path;
use crate::storage::appender::{PAGE_BYTES, align_down};
use crate::storage::error::{StorageError, io_error};

pub(crate) fn segment_path(dir: &Path, base_offset: Offset, kind: SegmentFileKind) -> PathBuf {
    dir.join(segment_file_name(base_offset, kind))
}

/// Opens (creating if asked) a file for O_DIRECT reads and writes.
pub(crate) async fn open_dma(path: &Path, create: bool) -> Result<Rc<DmaFile>, StorageError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .dma_open(glommio_path(path))
        .await
        .map_err(io_error("opening", path))?;
    Ok(Rc::new(file))
}

/// Creates an empty file, replacing any leftover of the same name.
pub(crate) async fn create_dma(path: &Path) -> Result<Rc<DmaFile>, StorageError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .dma_open(glommio_path(path))
        .await
        .map_err(io_error("creating", path))?;
    Ok(Rc::new(file))
}

/// How an appender reaches its file.
#[derive(Clone, Debug)]
pub(crate) enum FileAccess {
    /// Held open for the appender's life: a `.log`, written continuously.
    Open(Rc<DmaFile>),
    /// Opened for each write or sync and closed after: the active segment's
    /// index files, which take a page write every few MiB of log and a sync
    /// at roll and close. An idle partition then holds one descriptor (its
    /// `.log`), so tens of thousands of partitions fit under the open-file
    /// limit (Kafka likewise keeps no descriptor for an index, which it maps).
    OnDemand,
}

impl FileAccess {
    /// The open file, or `path` opened for this use; hand it to [`release`]
    /// when done.
    pub async fn get(&self, path: &Path) -> Result<Rc<DmaFile>, StorageError> {
        match self {
            FileAccess::Open(file) => Ok(file.clone()),
            FileAccess::OnDemand => open_dma(path, false).await,
        }
    }
}

/// Closes `file` now if this is its last holder (a file opened for one use);
/// a file held open elsewhere stays open.
pub(crate) async fn release(file: Rc<DmaFile>, path: &Path) -> Result<(), StorageError> {
    file.close_rc()
        .await
        .map(drop)
        .map_err(io_error("closing", path))
}

/// Trims a file to its logical length (its last page was written padded)
/// and syncs it; returns it open.
pub(crate) async fn trim_and_sync(
    (file, path, len): &(FileAccess, PathBuf, u64),
) -> Result<Rc<DmaFile>, StorageError> {
    let file = file.get(path).await?;
    file.truncate(*len)
        .await
        .map_err(io_error("trimming", path))?;
    file.fdatasync().await.map_err(io_error("syncing", path))?;
    Ok(file)
}

/// Creates an empty file (as [`create_dma`]) and closes it: it is opened
/// again on demand.
pub(crate) async fn create_closed(path: &Path) -> Result<(), StorageError> {
    release(create_dma(path).await?, path).await
}

/// Reads `len` bytes at `position` (O_DIRECT; alignment handled by glommio).
pub(crate) async fn read_exact(
    file: &DmaFile,
    path: &Path,
    position: u64,
    len: usize,
) -> Result<glommio::io::ReadResult, StorageError> {
    if len == 0 {
        return Ok(glommio::io::ReadResult::default());
    }
    let read = file
        .read_at(position, len)
        .await
        .map_err(io_error("reading", path))?;
    if read.len() != len {
        let short = std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("read {} of {len} bytes at {position}", read.len()),
        );
        return Err(StorageError::io("reading", path, short));
    }
    Ok(read)
}

/// The bytes of the partial last page of a `len`-byte file (what an appender
/// carries into its first write).
pub(crate) async fn read_partial_page(
    file: &DmaFile,
    path: &Path,
    len: u64,
) -> Result<Vec<u8>, StorageError> {
    let start = align_down(len);
    let count = (len - start) as usize;
    debug_assert!(count < PAGE_BYTES as usize);
    Ok(read_exact(file, path, start, count).await?.to_vec())
}

/// Replaces `path` with `contents` so that a crash leaves either the old or the
/// new file: write a temporary, fsync it, rename over, fsync the directory.
pub(crate) async fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), StorageError> {
    let temporary = path.with_extension("tmp");
    let mut file = BufferedFile::create(glommio_path(&temporary))
        .await
        .map_err(io_error("creating", &temporary))?;
    let written = file
        .write_at(contents.to_vec(), 0)
        .await
        .map_err(io_error("writing", &temporary))?;
    if written != contents.len() {
        let short = std::io::Error::new(std::io::ErrorKind::WriteZero, "short checkpoint write");
        return Err(StorageError::io("writing", &temporary, short));
    }
    file.fdatasync()
        .await
        .map_err(io_error("syncing", &temporary))?;
    file.rename(path)
        .await
        .map_err(io_error("renaming", &temporary))?;
    file.close().await.map_err(io_error("closing", path))?;
    sync_directory(path.parent().unwrap_or(Path::new("."))).await
}

/// Makes file creations, renames and deletions in `dir` durable.
pub(crate) async fn sync_directory(dir: &Path) -> Result<(), StorageError> {
    let directory = Directory::open(glommio_path(dir))
        .await
        .map_err(io_error("opening directory", dir))?;
    directory
        .sync()
        .await
        .map_err(io_error("syncing directory", dir))?;
    #[cfg(test)]
    SYNCED_DIRECTORIES.with_borrow_mut(|synced| synced.push(dir.to_owned()));
    directory
        .close()
        .await
        .map_err(io_error("closing directory", dir))
}

#[cfg(test)]
thread_local! {
    /// Directories this thread synced: a power loss cannot be simulated
    /// here, so tests check that the syncs are issued.
    pub(crate) static SYNCED_DIRECTORIES: std::cell::RefCell<Vec<PathBuf>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Reads a small text file; `None` if it does not exist.
pub(crate) fn read_optional_text(path: &Path) -> Result<Option<String>, StorageError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(StorageError::io("reading", path, error)),
    }
}
