//! A real `brook serve` process for a test: started on a free port in its own
//! data directory, killed or stopped on demand, killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a broker may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub struct Broker {
    binary: PathBuf,
    child: Option<Child>,
    data_dir: PathBuf,
    cores: usize,
    extra: Vec<String>,
    /// `127.0.0.1:<port>`.
    pub address: String,
}

impl Broker {
    /// Starts `binary serve` on a free port with `cores` shards in `data_dir`.
    pub fn start(binary: &str, data_dir: &Path, cores: usize, extra: &[&str]) -> Broker {
        let mut broker = Broker {
            binary: PathBuf::from(binary),
            child: None,
            data_dir: data_dir.to_owned(),
            cores,
            extra: extra.iter().map(|arg| (*arg).to_owned()).collect(),
            address: String::new(),
        };
        broker.launch("127.0.0.1:0");
        broker
    }

    fn launch(&mut self, listen: &str) {
        std::fs::create_dir_all(&self.data_dir).expect("creating the data directory");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data_dir.join("broker.log"))
            .expect("opening the broker log");
        let mut child = Command::new(&self.binary)
            .args([
                "serve",
                "--listen",
                listen,
                "--cores",
                &self.cores.to_string(),
            ])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting brook serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = sender.send(line);
            }
            for _ in lines {}
        });
        let line = receiver.recv_timeout(START_TIMEOUT).unwrap_or_else(|_| {
            let log = std::fs::read_to_string(self.data_dir.join("broker.log")).unwrap_or_default();
            panic!("brook serve did not start; its log:\n{log}")
        });
        let address = line
            .split_whitespace()
            .nth(3)
            .expect("brook listening on <address>")
            .to_owned();
        self.address = address;
        self.child = Some(child);
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and wait for a clean exit; returns whether it exited 0.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        // SAFETY: sending a signal to our own child process.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        child.wait().map(|status| status.success()).unwrap_or(false)
    }

    /// Starts the broker again on the same port and data directory.
    pub fn restart(&mut self) {
        let listen = self.address.clone();
        self.launch(&listen);
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// CPU time (user + system) the broker process has used so far.
    pub fn cpu_time(&self) -> Duration {
        let pid = self.child.as_ref().expect("a running broker").id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("reading stat");
        // Fields after the parenthesised command name; utime and stime are
        // the 14th and 15th of the whole line.
        let after_name = &stat[stat.rfind(')').expect("a stat line") + 2..];
        let fields: Vec<u64> = after_name
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(|field| field.parse().expect("a tick count"))
            .collect();
        // SAFETY: sysconf has no preconditions.
        let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        Duration::from_millis((fields[0] + fields[1]) * 1000 / ticks_per_second)
    }

    /// The broker's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir.join("broker.log")).unwrap_or_default()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
        // BROOK_E2E_LOGS=<dir> keeps every broker's log (the data directory
        // is usually a temporary one that is about to go).
        if let Some(dir) = std::env::var_os("BROOK_E2E_LOGS") {
            let name = format!(
                "broker-{}-{}.log",
                std::process::id(),
                self.address.replace([':', '.'], "_")
            );
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::copy(
                self.data_dir.join("broker.log"),
                std::path::Path::new(&dir).join(name),
            );
        }
    }
}
