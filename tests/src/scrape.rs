//! Reading a broker's Prometheus metrics as a scraper does: one HTTP/1.1
//! request, and samples summed out of the text format.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// One HTTP/1.1 request to `address` (`request_line` is `METHOD PATH`):
/// the status code and the body, or `None` if nothing answered.
pub fn http(address: &str, request_line: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "{request_line} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// `GET /metrics` from `address`; panics if it does not answer 200.
pub fn metrics(address: &str) -> String {
    match http(address, "GET /metrics") {
        Some((200, text)) => text,
        other => panic!("{address} /metrics: {other:?}"),
    }
}

/// The sum of `metric`'s samples whose line contains `matching` (`""`:
/// all of them, e.g. over every shard).
pub fn summed(text: &str, metric: &str, matching: &str) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(&format!("{metric}{{")) && line.contains(matching))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Scrapes `address` until `holds` says yes of the text, for up to
/// `timeout`; panics naming `what` (and the last text) otherwise.
pub fn wait_for(address: &str, timeout: Duration, what: &str, holds: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + timeout;
    loop {
        let text = metrics(address);
        if holds(&text) {
            return;
        }
        assert!(Instant::now() < deadline, "{what} never showed:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
