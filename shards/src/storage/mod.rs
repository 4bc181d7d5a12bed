//! The partition log on io_uring (glommio `DmaFile`, O_DIRECT).
//!
//! Formats and decisions come from [`brook_engine::log`]; this module does the
//! IO around them: appending through DMA-aligned tail buffers, writing and
//! syncing with group commit, reading through the sparse indexes, recovering
//! after a crash, deleting old segments, compacting logs, and checkpointing
//! per shard.

mod appender;
mod bytes;
mod clean_log;
mod cleaned_segment;
mod cleaner;
mod device;
mod error;
mod files;
mod follower;
mod log_dirs;
mod log_table;
mod open;
mod partition_admin;
mod partition_log;
mod pool;
mod producers;
mod read;
mod segment;
mod state;
mod store;
mod transactions;
mod waiters;
mod writer;

pub use appender::PAGE_BYTES;
pub use bytes::LogBytes;
pub use clean_log::CleanOutcome;
pub use cleaner::{CLEANER_MAP_BYTES_MIN, CleanerSchedule};
pub use device::prepare_directory;
pub use error::StorageError;
pub(crate) use files::write_atomically as write_file_atomically;
pub use follower::LogCut;
pub use log_dirs::{LogDirReport, LogDirs};
pub use open::EPOCH_CHECKPOINT_FILE;
pub use partition_log::{PartitionLog, RecoveryHints, UNWRITTEN_BYTES_MAX};
pub use read::{FileRange, LogData, ReadOptions, ReadOutcome, read_ahead_span};
pub use state::{AppendInfo, LogStats, ReadVersion};
pub use store::{MaintenanceSchedule, Store, StoreOptions};
pub use transactions::{ABORTED_TRANSACTIONS_PER_FETCH_MAX, ActiveProducer};
pub use writer::SYNC_SECONDS;
