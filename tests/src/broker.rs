//! A real `brook serve` process for a test (the load generator's
//! [`BrokerProcess`], with failures as panics): started on a free port in
//! its own data directory, killed or stopped on demand, killed when dropped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use brook_launch::{BrokerLaunch, BrokerProcess};

#[derive(Debug)]
pub struct Broker {
    process: BrokerProcess,
    /// `127.0.0.1:<port>`.
    pub address: String,
}

impl Broker {
    /// Starts `binary serve` on a free port with `cores` shards in `data_dir`.
    pub fn start(binary: &str, data_dir: &Path, cores: usize, extra: &[&str]) -> Broker {
        let launch = BrokerLaunch {
            binary: PathBuf::from(binary),
            data_dir: data_dir.to_owned(),
            cores,
            cpus: Vec::new(),
            extra: extra.iter().map(|arg| (*arg).to_owned()).collect(),
            namespace: None,
            listen: None,
        };
        Broker::launch(launch)
    }

    /// Starts a broker as `launch` says.
    pub fn launch(launch: BrokerLaunch) -> Broker {
        let process = BrokerProcess::start(launch).unwrap_or_else(|error| panic!("{error}"));
        Broker {
            address: process.address.clone(),
            process,
        }
    }

    /// The broker's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid().expect("the broker is running")
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, …) to the broker process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on a child process this test started.
        assert_eq!(unsafe { libc::kill(self.pid() as i32, signal) }, 0);
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// SIGTERM, and wait for a clean exit; returns whether it exited 0.
    pub fn stop(&mut self) -> bool {
        self.process.stop()
    }

    /// SIGTERM, and wait up to `timeout`: whether it exited 0, or `None`
    /// if it had to be killed.
    pub fn stop_within(&mut self, timeout: Duration) -> Option<bool> {
        self.process.stop_within(timeout)
    }

    /// Starts the broker again on the same port and data directory.
    pub fn restart(&mut self) {
        self.process
            .restart()
            .unwrap_or_else(|error| panic!("{error}"));
    }

    /// Starts the broker again at once, as a supervisor does after a
    /// crash: one try, and a failure to start panics (no waiting for the
    /// port here; the broker must take it).
    pub fn restart_at_once(&mut self) {
        self.process
            .restart_once()
            .unwrap_or_else(|error| panic!("an immediate restart failed: {error}"));
    }

    pub fn data_dir(&self) -> &Path {
        self.process.data_dir()
    }

    /// Where it serves Prometheus metrics (a free port, new at each
    /// start), if it does.
    pub fn metrics_address(&self) -> Option<&str> {
        self.process.metrics_address.as_deref()
    }

    /// CPU time (user + system) the broker process has used so far.
    pub fn cpu_time(&self) -> Duration {
        self.process.cpu_time().expect("a running broker")
    }

    /// The broker's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.process.log_path()).unwrap_or_default()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.process.kill();
        // BROOK_E2E_LOGS=<dir> keeps every broker's log (the data directory
        // is usually a temporary one that is about to go).
        if let Some(dir) = std::env::var_os("BROOK_E2E_LOGS") {
            let name = format!(
                "broker-{}-{}.log",
                std::process::id(),
                self.address.replace([':', '.'], "_")
            );
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::copy(self.process.log_path(), Path::new(&dir).join(name));
        }
    }
}
