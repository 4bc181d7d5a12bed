//! The dev cluster's nodes as child processes: each started so that it
//! dies with this command, even a SIGKILLed one; its output copied to ours
//! line by line with its id; its exit collected as soon as it happens.
//!
//! A node's process stays unreaped until [`Nodes::reap`] has seen it exit,
//! so its pid cannot be reused before: a signal sent to a running node's
//! pid reaches that node and nothing else.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;

use super::signals;

/// A node that has exited.
#[derive(Clone, Copy, Debug)]
pub struct Exit {
    pub id: usize,
    pub pid: u32,
    pub status: ExitStatus,
}

impl Exit {
    /// Whether SIGKILL ended it.
    pub fn killed(&self) -> bool {
        use std::os::unix::process::ExitStatusExt;
        self.status.signal() == Some(libc::SIGKILL)
    }
}

#[derive(Debug)]
struct Node {
    id: usize,
    process: Child,
    exited: bool,
}

/// Every node started so far. Dropping it kills and reaps those still
/// running, so no return path (or panic) of the command leaves one behind.
#[derive(Debug)]
pub struct Nodes {
    nodes: Vec<Node>,
    /// Nodes `0..voters` are the controller quorum.
    voters: usize,
    /// The threads copying the nodes' output.
    copiers: Vec<JoinHandle<()>>,
}

impl Nodes {
    pub fn new(voters: usize) -> Nodes {
        Nodes {
            nodes: Vec::new(),
            voters,
            copiers: Vec::new(),
        }
    }

    /// Starts node `id` as `binary arguments…`; returns its pid. Must be
    /// called from the main thread: a node dies when the thread that
    /// started it exits (`PR_SET_PDEATHSIG` follows the thread).
    pub fn start(
        &mut self,
        id: usize,
        binary: &Path,
        arguments: &[String],
    ) -> std::io::Result<u32> {
        let parent = std::process::id() as libc::pid_t;
        let mut command = Command::new(binary);
        command
            .args(arguments)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: `die_with` runs between fork and exec and makes only
        // async-signal-safe calls, without allocating.
        unsafe {
            command.pre_exec(move || die_with(parent));
        }
        let mut process = command.spawn()?;
        self.copiers.extend(copy_lines(id, process.stdout.take()));
        self.copiers.extend(copy_lines(id, process.stderr.take()));
        let pid = process.id();
        self.nodes.push(Node {
            id,
            process,
            exited: false,
        });
        Ok(pid)
    }

    /// The ids of the nodes not yet seen to exit.
    pub fn running(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .filter(|node| !node.exited)
            .map(|node| node.id)
            .collect()
    }

    /// The nodes that have exited since the last call (without waiting).
    pub fn reap(&mut self) -> Vec<Exit> {
        let mut exits = Vec::new();
        for node in self.nodes.iter_mut().filter(|node| !node.exited) {
            // An error (no such child) cannot happen for a child not yet
            // reaped; the node is then left to the final kill and wait.
            if let Ok(Some(status)) = node.process.try_wait() {
                node.exited = true;
                exits.push(Exit {
                    id: node.id,
                    pid: node.process.id(),
                    status,
                });
            }
        }
        exits
    }

    /// Sends `signal` to every running node at once.
    pub fn signal_running(&self, signal: libc::c_int) {
        for node in self.nodes.iter().filter(|node| !node.exited) {
            // SAFETY: kill(2) on a child not yet reaped, so its pid is
            // still its own.
            unsafe {
                libc::kill(node.process.id() as libc::pid_t, signal);
            }
        }
    }

    /// SIGKILL to every running node, then waits for each: a killed
    /// process always ends, so this returns once none runs.
    pub fn kill_and_wait(&mut self) -> Vec<Exit> {
        self.signal_running(libc::SIGKILL);
        let mut exits = Vec::new();
        for node in self.nodes.iter_mut().filter(|node| !node.exited) {
            node.exited = true;
            if let Ok(status) = node.process.wait() {
                exits.push(Exit {
                    id: node.id,
                    pid: node.process.id(),
                    status,
                });
            }
        }
        exits
    }

    /// Whether a majority of the voters has exited: no controller can be
    /// elected, so no running node's controlled shutdown can be granted.
    pub fn quorum_lost(&self) -> bool {
        let voters_running = self
            .nodes
            .iter()
            .filter(|node| node.id < self.voters && !node.exited)
            .count();
        majority_gone(self.voters, voters_running)
    }

    /// Waits until the nodes' last lines are copied (they end when the
    /// nodes' pipes close, so once every node has exited).
    pub fn finish_output(&mut self) {
        debug_assert!(self.running().is_empty());
        for copier in self.copiers.drain(..) {
            let _ = copier.join();
        }
    }
}

/// Whether `voters_running` of `voters` falls short of a majority.
fn majority_gone(voters: usize, voters_running: usize) -> bool {
    debug_assert!(voters_running <= voters);
    voters_running < voters / 2 + 1
}

impl Drop for Nodes {
    fn drop(&mut self) {
        self.kill_and_wait();
    }
}

/// Runs in a node between fork and exec: the kernel is to SIGKILL it when
/// this command's main thread exits, however it exits (kill -9 included).
/// If the command died before the request, the node has another parent
/// already and does not start.
fn die_with(parent: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: prctl and getppid are async-signal-safe; valid arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() != parent {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    signals::unblock_child_exits()
}

/// Copies a node's output lines to our standard output, each prefixed
/// with its id, until the node closes it. It keeps reading when our output
/// fails (closed by `| head`): a node whose pipe filled up would block.
fn copy_lines(id: usize, output: Option<impl Read + Send + 'static>) -> Option<JoinHandle<()>> {
    let output = output?;
    let copier = std::thread::Builder::new()
        .name(format!("node-{id}-output"))
        .spawn(move || {
            let mut reader = BufReader::new(output);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let text = String::from_utf8_lossy(&line);
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "[node {id}] {}", text.trim_end_matches('\n'));
            }
        });
    copier.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quorum_is_gone_once_a_majority_of_the_voters_is() {
        // (voters, voters running, gone)
        let rows = [
            (3, 3, false),
            (3, 2, false),
            (3, 1, true),
            (3, 0, true),
            (2, 2, false),
            (2, 1, true),
            (1, 1, false),
            (1, 0, true),
        ];
        for (voters, running, gone) in rows {
            assert_eq!(
                majority_gone(voters, running),
                gone,
                "{running} of {voters}"
            );
        }
    }
}
