//! Fetch limits and waiting, over raw requests (no client library lets a
//! test choose `min_bytes` and `max_bytes` this freely): the response byte
//! budget of KIP-74, `fetch.max.bytes`, and a `min_bytes` wait that sleeps
//! until an append instead of re-reading in a loop, and answers with the
//! read the woken shard made (counted in trips between shards); and the
//! socket buffers responses leave through.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use brook_tests::raw::{self, connect, exchange};
use brook_tests::scrape::{self, summed};
use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchRequest, FetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const TOPIC: &str = "limits";
/// Partitions of the topic: with two shards, they live on both.
const PARTITIONS: i32 = 4;

fn topic_name() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

fn create_topic(stream: &mut TcpStream) {
    raw::create_topic(stream, TOPIC, PARTITIONS);
}

/// One batch of `records` records of 100 bytes to `partition`; returns its
/// length.
fn produce(stream: &mut TcpStream, partition: i32, records: usize) -> usize {
    raw::produce_filler(stream, TOPIC, partition, records, 100).1
}

/// Fetches every partition from offset 0; returns each one's records length.
fn fetch(stream: &mut TcpStream, min_bytes: i32, max_wait_ms: i32, max_bytes: i32) -> Vec<usize> {
    let partitions = (0..PARTITIONS)
        .map(|partition| {
            FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)
        })
        .collect();
    let request = FetchRequest::default()
        .with_min_bytes(min_bytes)
        .with_max_wait_ms(max_wait_ms)
        .with_max_bytes(max_bytes)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(topic_name())
                .with_partitions(partitions),
        ]);
    let response: FetchResponse = exchange(stream, ApiKey::Fetch, 12, &request);
    response.responses[0]
        .partitions
        .iter()
        .map(|partition: &PartitionData| {
            assert_eq!(partition.error_code, 0);
            partition.records.as_ref().map_or(0, Bytes::len)
        })
        .collect()
}

#[test]
fn the_response_budget_serves_the_first_partition_whole_and_only_what_fits_after() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let mut stream = connect(&broker);
    create_topic(&mut stream);
    // Partition 0: one big batch; 1–3: two small ones each.
    let big = produce(&mut stream, 0, 20);
    let small = produce(&mut stream, 1, 2);
    for partition in 1..PARTITIONS {
        if partition > 1 {
            produce(&mut stream, partition, 2);
        }
        produce(&mut stream, partition, 2);
    }
    let everything = fetch(&mut stream, 1, 0, 1 << 20);
    assert_eq!(everything, vec![big, 2 * small, 2 * small, 2 * small]);
    // A budget smaller than partition 0's batch: that batch still comes
    // whole (the consumer must progress); nothing else fits.
    assert_eq!(fetch(&mut stream, 1, 0, 100), vec![big, 0, 0, 0]);
    // Room for the big batch and three small ones: whole batches, in
    // request order, cut at a batch boundary where the budget runs out.
    assert_eq!(
        fetch(&mut stream, 1, 0, (big + 3 * small) as i32),
        vec![big, 2 * small, small, 0]
    );
    // max_bytes 0 (or below) still serves one batch.
    assert_eq!(fetch(&mut stream, 1, 0, 0), vec![big, 0, 0, 0]);
    assert_eq!(fetch(&mut stream, 1, 0, -1), vec![big, 0, 0, 0]);
    drop(broker);

    // The broker's fetch.max.bytes caps what the request asks for.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.properties");
    std::fs::write(&config, format!("fetch.max.bytes={}\n", big + small)).unwrap();
    let broker = Broker::start(
        BROOK,
        &dir.path().join("data"),
        2,
        &["--config", config.to_str().unwrap()],
    );
    let mut stream = connect(&broker);
    create_topic(&mut stream);
    produce(&mut stream, 0, 20);
    produce(&mut stream, 1, 2);
    produce(&mut stream, 1, 2);
    produce(&mut stream, 2, 2);
    assert_eq!(fetch(&mut stream, 1, 0, i32::MAX), vec![big, small, 0, 0]);
}

#[test]
fn a_fetch_short_of_min_bytes_sleeps_until_appends_meet_it() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let mut stream = connect(&broker);
    create_topic(&mut stream);
    let small = produce(&mut stream, 0, 2);
    produce(&mut stream, 1, 2);

    // Data is there but short of min_bytes: the fetch waits out max_wait_ms
    // and answers with what there is. Waiting means sleeping, which two
    // checks show without a bound that a busy machine could break:
    // - Trips between shards, counted: a pass over the partitions, the
    //   wait on the other shard, and a pass when the wait ends. A broker
    //   that re-read the partitions in a loop made 8,000 trips in the wait
    //   on an idle machine and 264 beside twelve spinning processes.
    // - CPU time against the wait's length: a sleeping broker uses 10 to
    //   30 ms of it waking for its timers, the same beside twelve spinning
    //   processes (it does the same work); one that polled without parking
    //   used 1 s of the 1.5 s alone. A fifth of the wait is ten times the
    //   first and fails the second unless the machine leaves it less than
    //   a fifth of a core (then the count above still fails a loop).
    let metrics = broker.metrics_address().expect("metrics served").to_owned();
    let before = shard_jobs(&metrics);
    assert_eq!(fetch(&mut stream, 0, 0, 1 << 20), vec![small, small, 0, 0]);
    let per_pass = shard_jobs(&metrics) - before;
    let before = shard_jobs(&metrics);
    let cpu_before = broker.cpu_time();
    let started = Instant::now();
    let lengths = fetch(&mut stream, 1 << 20, 1500, 1 << 20);
    let waited = started.elapsed();
    let cpu = broker.cpu_time() - cpu_before;
    let trips = shard_jobs(&metrics) - before;
    println!("waited {waited:?} using {cpu:?} of broker CPU and {trips} trips between shards");
    assert_eq!(lengths, vec![small, small, 0, 0]);
    assert!(
        waited >= Duration::from_millis(1400),
        "answered after {waited:?}"
    );
    assert_eq!(
        trips,
        3.0 * per_pass,
        "a pass, the wait, and a pass as it ends; more is a broker re-reading while it waits"
    );
    assert!(
        cpu < waited / 5,
        "the broker used {cpu:?} of CPU while the fetch waited {waited:?}"
    );

    // Appends on both shards while a fetch waits: it answers once they reach
    // min_bytes, not when its wait runs out (Kafka's DelayedFetchMetrics
    // count expirations; so does Brook). The first wait above expired.
    assert_eq!(expired_fetches(&metrics), 1.0, "the 1.5 s wait expired");
    let address = broker.address.clone();
    let appender = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(address).unwrap();
        (2..PARTITIONS)
            .map(|partition| {
                std::thread::sleep(Duration::from_millis(200));
                produce(&mut stream, partition, 2)
            })
            .sum::<usize>()
    });
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let lengths = fetch(&mut stream, (4 * small) as i32, 20_000, 1 << 20);
    assert_eq!(appender.join().unwrap(), 2 * small);
    assert_eq!(lengths, vec![small, small, small, small]);
    assert_eq!(
        expired_fetches(&metrics),
        1.0,
        "the fetch waited out its 20 s instead of answering the appends"
    );
}

/// Consumer fetches answered because their wait ran out, so far.
fn expired_fetches(metrics: &str) -> f64 {
    summed(
        &scrape::metrics(metrics),
        "brook_fetch_waits_expired_total",
        r#"fetcher="consumer""#,
    )
}

/// Jobs the broker's shards have sent one another so far.
fn shard_jobs(metrics: &str) -> f64 {
    summed(&scrape::metrics(metrics), "brook_shard_jobs_sent_total", "")
}

#[test]
fn a_waiting_fetch_is_answered_with_the_read_made_where_it_woke() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let metrics = broker.metrics_address().expect("metrics served").to_owned();
    let mut stream = connect(&broker);
    create_topic(&mut stream);
    let mut appender = connect(&broker);

    // What one append to partition 0 costs in trips between shards, on
    // this connection (the second: the first may learn things once).
    produce(&mut appender, 0, 2);
    let before = shard_jobs(&metrics);
    let small = produce(&mut appender, 0, 2);
    let per_append = shard_jobs(&metrics) - before;
    // What one pass over the topic's partitions costs: one trip to the
    // shard that is not the connection's (the partitions live on both).
    let before = shard_jobs(&metrics);
    assert_eq!(fetch(&mut stream, 0, 0, 1 << 20)[0], 2 * small);
    let per_pass = shard_jobs(&metrics) - before;
    assert_eq!(per_pass, 1.0, "a pass asks the other shard once");

    // A fetch short of min_bytes waits on both shards (one trip more),
    // until an append to partition 0 reaches it. The shard that owns
    // partition 0 reads it as its wait ends, and the fetch answers with
    // that read: no second pass over the shards after the wake.
    let before = shard_jobs(&metrics);
    let waiting =
        std::thread::spawn(move || fetch(&mut stream, (3 * small) as i32, 20_000, 1 << 20));
    let deadline = Instant::now() + Duration::from_secs(20);
    while shard_jobs(&metrics) - before < 2.0 * per_pass {
        assert!(
            Instant::now() < deadline,
            "the fetch never waited on the other shard"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    produce(&mut appender, 0, 2);
    let lengths = waiting.join().unwrap();
    assert_eq!(lengths[0], 3 * small);
    let trips = shard_jobs(&metrics) - before;
    assert_eq!(
        trips,
        per_pass + per_pass + per_append,
        "the first pass, the wait, and the append; a pass after the wake would be one more"
    );
}

/// The broker's end of `client` as `ss` reports it: the kernel's send and
/// receive buffer sizes (`tb` and `rb` of `skmem`; the kernel keeps twice
/// what SO_SNDBUF or SO_RCVBUF asked).
fn broker_buffers(broker: &Broker, client: &TcpStream) -> (u64, u64) {
    let port = broker.address.rsplit(':').next().unwrap();
    let client_port = client.local_addr().unwrap().port();
    let filter = format!("( sport = :{port} and dport = :{client_port} )");
    let output = std::process::Command::new("ss")
        .args(["-tmnH", "state", "established", &filter])
        .output()
        .expect("running ss (iproute2)");
    let text = String::from_utf8_lossy(&output.stdout);
    let field = |name: &str| -> u64 {
        let start = text
            .find(&format!(",{name}"))
            .unwrap_or_else(|| panic!("no {name} in ss's output: {text}"))
            + name.len()
            + 1;
        let digits: String = text[start..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap()
    };
    (field("tb"), field("rb"))
}

/// Connects to `broker` and waits for an answer, so that the broker has
/// accepted the connection and set it up.
fn answered_connection(broker: &Broker) -> TcpStream {
    let mut stream = connect(broker);
    let _: ApiVersionsResponse = exchange(
        &mut stream,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    );
    stream
}

/// Responses leave through a send buffer of Kafka's
/// `socket.send.buffer.bytes` (100 KiB) unless set otherwise. Left to the
/// kernel's autotuning (megabytes), a kcat read of 2 GB saw 50-60 TCP
/// retransmissions of reordered segments per run on a 2-core host; with
/// Kafka's size, none.
#[test]
fn connections_get_kafkas_socket_buffer_sizes_or_the_ones_set() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 1, &[]);
    let client = answered_connection(&broker);
    let (send, _) = broker_buffers(&broker, &client);
    assert_eq!(send, 2 * 102_400, "Kafka's socket.send.buffer.bytes");
    drop(broker);

    let dir = tempfile::tempdir().unwrap();
    let set = [
        "--set",
        "socket.send.buffer.bytes=60000",
        "--set",
        "socket.receive.buffer.bytes=50000",
    ];
    let broker = Broker::start(BROOK, dir.path(), 1, &set);
    let client = answered_connection(&broker);
    assert_eq!(broker_buffers(&broker, &client), (120_000, 100_000));
}
