//! What a result depends on besides the code: when, which kernel, which
//! directory on which filesystem and device, which CPU. Printed at the top of
//! every report so a number can be reproduced or explained later.
//!
//! Also the one process limit the benchmark may have to raise: open files.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::log::error::BenchError;

const SECONDS_PER_DAY: u64 = 86_400;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Environment {
    /// `YYYY-MM-DD HH:MM:SS UTC` when the run started.
    pub started_utc: String,
    /// `uname -r`.
    pub kernel: String,
    pub dir: PathBuf,
    /// Filesystem type of `dir` (`ext4`, `xfs`, …), or `unknown`.
    pub filesystem: String,
    /// The device (mount source) holding `dir`, or `unknown`.
    pub device: String,
    pub cpu: usize,
}

/// Describes the machine for a run in `dir` (which must exist) on `cpu`.
pub fn describe(dir: &Path, cpu: usize) -> Environment {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "unknown".to_owned(), |text| text.trim().to_owned());
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    let mount = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|mountinfo| mount_of(&mountinfo, &dir));
    let (filesystem, device) =
        mount.unwrap_or_else(|| ("unknown".to_owned(), "unknown".to_owned()));
    Environment {
        started_utc: utc_date_time(seconds),
        kernel,
        dir,
        filesystem,
        device,
        cpu,
    }
}

/// `YYYY-MM-DD HH:MM:SS UTC` for seconds since the Unix epoch.
pub fn utc_date_time(unix_seconds: u64) -> String {
    let days = (unix_seconds / SECONDS_PER_DAY) as i64;
    let (year, month, day) = civil_from_days(days);
    let in_day = unix_seconds % SECONDS_PER_DAY;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        in_day / 3600,
        in_day / 60 % 60,
        in_day % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The filesystem type and source of the mount holding `path`, from the text
/// of `/proc/self/mountinfo` (the deepest mount point that contains `path`).
fn mount_of(mountinfo: &str, path: &Path) -> Option<(String, String)> {
    let mut best: Option<(usize, String, String)> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(separator) = fields.iter().position(|field| *field == "-") else {
            continue;
        };
        let (Some(mount_point), Some(filesystem), Some(source)) = (
            fields.get(4),
            fields.get(separator + 1),
            fields.get(separator + 2),
        ) else {
            continue;
        };
        let depth = Path::new(mount_point).components().count();
        let deeper = best
            .as_ref()
            .is_none_or(|(best_depth, ..)| depth >= *best_depth);
        if path.starts_with(mount_point) && deeper {
            best = Some((depth, (*filesystem).to_owned(), (*source).to_owned()));
        }
    }
    best.map(|(_, filesystem, source)| (filesystem, source))
}

/// Raises the soft open-files limit towards `wanted` (never above the hard
/// limit) and returns the soft limit now in force.
pub fn raise_open_files_limit(wanted: u64) -> Result<u64, BenchError> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit for the call's duration.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(limit_error("reading"));
    }
    if limit.rlim_cur >= wanted {
        return Ok(limit.rlim_cur);
    }
    let raised = libc::rlimit {
        rlim_cur: wanted.min(limit.rlim_max),
        rlim_max: limit.rlim_max,
    };
    // SAFETY: `raised` is a valid rlimit that outlives the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(limit_error("raising"));
    }
    Ok(raised.rlim_cur)
}

fn limit_error(op: &'static str) -> BenchError {
    BenchError::Io {
        op,
        path: PathBuf::from("RLIMIT_NOFILE"),
        source: std::io::Error::last_os_error(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_gregorian() {
        let rows = [
            (0, "1970-01-01 00:00:00 UTC"),
            (11_016 * SECONDS_PER_DAY + 1, "2000-02-29 00:00:01 UTC"),
            (20_786 * SECONDS_PER_DAY + 70_000, "2026-11-29 19:26:40 UTC"),
            (20_819 * SECONDS_PER_DAY - 1, "2026-12-31 23:59:59 UTC"),
        ];
        for (seconds, expected) in rows {
            assert_eq!(utc_date_time(seconds), expected, "{seconds}");
        }
    }

    #[test]
    fn the_deepest_mount_holding_the_path_wins() {
        let mountinfo = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 27 0:40 / /work/scratch rw shared:5 - tmpfs tmpfs rw
";
        let mount = |path: &str| mount_of(mountinfo, Path::new(path));
        assert_eq!(
            mount("/work/bench-tmp"),
            Some(("ext4".into(), "/dev/vda".into()))
        );
        assert_eq!(
            mount("/work/scratch/x"),
            Some(("tmpfs".into(), "tmpfs".into()))
        );
        assert_eq!(
            mount("/work/scratchy"),
            Some(("ext4".into(), "/dev/vda".into()))
        );
    }
}
