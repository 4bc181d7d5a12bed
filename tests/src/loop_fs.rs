//! A real ext4 filesystem for one test: an image file, formatted and
//! loop-mounted (so the test needs root, as CI has), unmounted when
//! dropped. It can be filled (a full disk) or shut down (a failed disk:
//! every later IO on it answers EIO, as a dead drive does).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Linux's `EXT4_IOC_SHUTDOWN` (`_IOR('X', 125, __u32)`, the ioctl
/// `xfs_io -c shutdown` sends), and its flag that skips flushing the
/// journal: the disk is gone, nothing more reaches it.
const EXT4_IOC_SHUTDOWN: libc::c_ulong = 0x8004_587d;
const EXT4_GOING_FLAGS_NOLOGFLUSH: u32 = 2;

/// A mounted ext4 filesystem; unmounted (lazily) when dropped.
#[derive(Debug)]
pub struct LoopFilesystem {
    mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl LoopFilesystem {
    /// Makes and mounts an ext4 filesystem of `bytes`.
    pub fn new(bytes: u64) -> LoopFilesystem {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            root,
            "this test mounts a loop device and needs root (CI runs as root)"
        );
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("fs.img");
        std::fs::File::create(&image)
            .and_then(|file| file.set_len(bytes))
            .unwrap();
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image));
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).unwrap();
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mount));
        LoopFilesystem { mount, _dir: dir }
    }

    /// Where it is mounted.
    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// Fails the disk under it: from now on every read, write and sync of
    /// a file on it, and every lookup, answers EIO.
    pub fn shut_down(&self) {
        let mount = std::fs::File::open(&self.mount).unwrap();
        let flags = EXT4_GOING_FLAGS_NOLOGFLUSH;
        // SAFETY: the ioctl reads one u32 from a valid pointer, on a
        // descriptor this function owns.
        let done = unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(&mount),
                EXT4_IOC_SHUTDOWN,
                &flags as *const u32,
            )
        };
        assert_eq!(
            done,
            0,
            "shutting down {}: {}",
            self.mount.display(),
            std::io::Error::last_os_error()
        );
    }
}

impl Drop for LoopFilesystem {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

fn run(command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
