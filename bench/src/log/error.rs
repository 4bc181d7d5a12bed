//! Why a benchmark run stopped: one line for the user, with the operation
//! and path when a file was involved.

use std::path::{Path, PathBuf};

use brook_shards::storage::StorageError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum BenchError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("starting a glommio executor on cpu {cpu}: {reason}")]
    Executor { cpu: usize, reason: String },
    #[error("invalid {name}: {reason}")]
    InvalidOption { name: &'static str, reason: String },
    #[error("{0}")]
    Client(String),
    #[error("broker: {0}")]
    Broker(String),
}

impl From<brook_launch::LaunchError> for BenchError {
    fn from(error: brook_launch::LaunchError) -> BenchError {
        match error {
            brook_launch::LaunchError::Io { op, path, source } => {
                BenchError::Io { op, path, source }
            }
            brook_launch::LaunchError::Broker(reason) => BenchError::Broker(reason),
        }
    }
}

/// `map_err` helper: `.map_err(io_error("writing", &path))`.
pub(crate) fn io_error<'a, E: Into<std::io::Error>>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(E) -> BenchError + 'a {
    move |source| BenchError::Io {
        op,
        path: path.to_owned(),
        source: source.into(),
    }
}
