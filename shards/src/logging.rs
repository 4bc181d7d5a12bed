//! Where a Brook process's log lines go: stderr, filtered by `RUST_LOG`
//! (default `info`), coloured only on a terminal. The broker and the bench
//! binary both start with it.

/// Installs the process's log subscriber; call once, first thing in `main`.
pub fn init_stderr() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // A log line that cannot be written (stderr on a full disk) is
        // dropped: reporting it would be a second write to stderr, and
        // `eprintln!` panics when that fails too. Logging must never stop
        // the broker.
        .log_internal_errors(false)
        .init();
}
