//! Small-file helpers: opening segment files, atomic checkpoint writes, and
//! reading a whole (small) file through O_DIRECT.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use brook_engine::log::file_name::{SegmentFileKind, segment_file_name};
use brook_engine::types::Offset;
use glommio::io::{BufferedFile, Directory, DmaFile, OpenOptions};

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
        .dma_open(path)
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
        .dma_open(path)
        .await
        .map_err(io_error("creating", path))?;
    Ok(Rc::new(file))
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
    let mut file = BufferedFile::create(&temporary)
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
    let directory = Directory::open(dir)
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
