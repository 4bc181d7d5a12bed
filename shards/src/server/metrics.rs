//! Prometheus metrics (SPEC Q3), served in the text exposition format on
//! their own listener (`--metrics-listen`, default 127.0.0.1:9644).
//!
//! - [`BrokerMetrics`]: the process's registry and metric families, shared
//!   by every shard ([`ServerContext::metrics`](super::ServerContext)).
//! - [`ShardMetrics`]: a shard's own children of the hot-path families
//!   (requests, latency, connections, bytes), each carrying a `shard`
//!   label, so no two cores ever add to the same atomic. A child is made
//!   the first time a shard meets its API or topic; from then on the
//!   request path does no allocation or lock (an index, or a map lookup by
//!   `&str`, and relaxed atomic adds).
//! - Gauges of the broker's state (partitions, leaders, under-replicated,
//!   the controller) are set by shard 0 from its image once a second;
//!   every shard sets its own logs', replica fetchers', groups' (and their
//!   lag) and transactions' gauges at the same pace, off the request path.
//! - Error codes are counted per API from each response's
//!   [`ErrorCounts`]; leader elections as the metadata log is applied.
//! - [`serve`]: a thread answering `GET /metrics` (HTTP/1.1, parsed with
//!   httparse), away from the shards.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use crate::server::error_counts::ErrorCounts;
use crate::server::shard::Shard;
use brook_engine::cluster::cluster_image::LeaderElections;
use brook_engine::cluster::image::ShardId;
use brook_engine::group::state::GroupState;
use brook_engine::protocol::versions::SUPPORTED;
use brook_engine::types::{BrokerId, TopicPartition};
use kafka_protocol::messages::ApiKey;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Request latency buckets, seconds: 100 µs to 10 s.
const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];
/// The largest scrape request read (a GET with its headers).
const REQUEST_BYTES_MAX: usize = 16 << 10;
/// How long a scraper may take to send its request or read the answer.
const SCRAPE_IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Every metric family of the broker.
#[derive(Debug)]
pub struct BrokerMetrics {
    registry: Registry,
    requests: IntCounterVec,
    request_seconds: HistogramVec,
    connections_active: IntGaugeVec,
    connections: IntCounterVec,
    shard_jobs: IntCounterVec,
    fetch_expired: IntCounterVec,
    prepared_reads: IntCounterVec,
    produce_bytes: IntCounterVec,
    produce_records: IntCounterVec,
    fetch_bytes: IntCounterVec,
    replication_bytes_out: IntCounterVec,
    isr_shrinks: IntCounterVec,
    isr_expands: IntCounterVec,
    log_size: IntGaugeVec,
    log_segments: IntGaugeVec,
    pub partitions: IntGauge,
    pub leaders: IntGauge,
    pub under_replicated: IntGauge,
    pub under_min_isr: IntGauge,
    pub offline: IntGauge,
    pub controller_active: IntGauge,
    pub metadata_offset: IntGauge,
    request_errors: IntCounterVec,
    leader_elections: IntCounterVec,
    fetcher_lag: IntGaugeVec,
    producer_ids: IntGaugeVec,
    transactions: IntGaugeVec,
    groups: IntGaugeVec,
    group_lag: IntGaugeVec,
}

fn registered<M: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: prometheus::Result<M>,
) -> M {
    let metric = metric.expect("a valid metric definition");
    registry
        .register(Box::new(metric.clone()))
        .expect("each metric is registered once");
    metric
}

impl BrokerMetrics {
    pub fn new(broker_id: i32) -> BrokerMetrics {
        let labels = HashMap::from([("broker".to_owned(), broker_id.to_string())]);
        let registry =
            Registry::new_custom(Some("brook".to_owned()), Some(labels)).expect("a valid prefix");
        let counter = |name: &str, help: &str, labels: &[&str]| {
            registered(&registry, IntCounterVec::new(Opts::new(name, help), labels))
        };
        let gauge = |name: &str, help: &str| registered(&registry, IntGauge::new(name, help));
        let gauges = |name: &str, help: &str, labels: &[&str]| {
            registered(&registry, IntGaugeVec::new(Opts::new(name, help), labels))
        };
        BrokerMetrics {
            requests: counter(
                "requests_total",
                "Requests received, by API.",
                &["api", "shard"],
            ),
            request_seconds: registered(
                &registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "request_duration_seconds",
                        "From a request read to its response written (queue, handling, send), by API.",
                    )
                    .buckets(LATENCY_BUCKETS.to_vec()),
                    &["api", "shard"],
                ),
            ),
            connections_active: registered(
                &registry,
                IntGaugeVec::new(
                    Opts::new("connections_active", "Kafka client connections open."),
                    &["shard"],
                ),
            ),
            connections: counter(
                "connections_total",
                "Kafka client connections accepted.",
                &["shard"],
            ),
            shard_jobs: counter(
                "shard_jobs_sent_total",
                "Jobs a shard sent to another shard to run there (each a trip over the shard mesh and back), by the sending shard.",
                &["shard"],
            ),
            fetch_expired: counter(
                "fetch_waits_expired_total",
                "Fetches answered because their max_wait_ms ran out short of min_bytes (Kafka's DelayedFetchMetrics ExpiresPerSec), by fetcher: consumer or follower.",
                &["fetcher", "shard"],
            ),
            prepared_reads: counter(
                "fetch_prepared_reads_total",
                "Consumer reads of another shard's partition prepared one fetch ahead, by what became of them: used (the fetch needed no trip to that shard for it) or dropped (the log or its leader changed, the fetch asked otherwise, or it aged).",
                &["outcome", "shard"],
            ),
            produce_bytes: counter(
                "produce_bytes_total",
                "Record batch bytes appended by produce requests, by topic.",
                &["topic", "shard"],
            ),
            produce_records: counter(
                "produce_records_total",
                "Records appended by produce requests, by topic.",
                &["topic", "shard"],
            ),
            fetch_bytes: counter(
                "fetch_bytes_total",
                "Record bytes sent to consumers, by topic.",
                &["topic", "shard"],
            ),
            replication_bytes_out: counter(
                "replication_bytes_out_total",
                "Record bytes sent to follower replicas, by topic.",
                &["topic", "shard"],
            ),
            isr_shrinks: counter(
                "isr_shrinks_total",
                "ISR shrinks committed for partitions led here.",
                &["shard"],
            ),
            isr_expands: counter(
                "isr_expands_total",
                "ISR expansions committed for partitions led here.",
                &["shard"],
            ),
            log_size: registered(
                &registry,
                IntGaugeVec::new(
                    Opts::new("log_size_bytes", "A partition log's size on disk."),
                    &["topic", "partition"],
                ),
            ),
            log_segments: registered(
                &registry,
                IntGaugeVec::new(
                    Opts::new("log_segments", "A partition log's segment count."),
                    &["topic", "partition"],
                ),
            ),
            partitions: gauge("partitions", "Partitions this broker holds a replica of."),
            leaders: gauge("partition_leaders", "Partitions this broker leads."),
            under_replicated: gauge(
                "under_replicated_partitions",
                "Partitions led here whose ISR is smaller than their replica set.",
            ),
            under_min_isr: gauge(
                "under_min_isr_partitions",
                "Partitions led here whose ISR is below min.insync.replicas.",
            ),
            offline: gauge(
                "offline_partitions",
                "Partitions with no leader, in this broker's image.",
            ),
            controller_active: gauge(
                "controller_active",
                "1 if this node is the active controller.",
            ),
            metadata_offset: gauge(
                "metadata_log_offset",
                "The last metadata log offset this broker applied.",
            ),
            request_errors: counter(
                "request_errors_total",
                "Error codes in responses (each partition's, topic's or member's, and the \
                 response's own), by API and Kafka's error name.",
                &["api", "error", "shard"],
            ),
            leader_elections: counter(
                "leader_elections_total",
                "Partitions whose leader moved to a live broker, as this broker applied the \
                 metadata log (every broker counts the cluster's); unclean: the new leader was \
                 not in the ISR.",
                &["kind"],
            ),
            fetcher_lag: gauges(
                "replica_fetcher_lag_records",
                "A followed partition's leader high watermark past this replica's log end.",
                &["topic", "partition"],
            ),
            producer_ids: gauges(
                "producer_ids",
                "Producer ids the partitions of this shard keep state for.",
                &["shard"],
            ),
            transactions: gauges(
                "transactions",
                "Transactional ids coordinated here, by transaction state.",
                &["state", "shard"],
            ),
            groups: gauges(
                "groups",
                "Consumer groups coordinated here, by state.",
                &["state", "shard"],
            ),
            group_lag: gauges(
                "consumer_group_lag_records",
                "A group's committed offset behind its partition's high watermark (partitions \
                 with a replica on this broker).",
                &["group", "topic", "partition"],
            ),
            registry: {
                registry
                    .register(Box::new(crate::storage::SYNC_SECONDS.clone()))
                    .expect("registered once per registry");
                registry
                    .register(Box::new(crate::runtime::FORCED_WAKES.clone()))
                    .expect("registered once per registry");
                registry
            },
        }
    }

    /// The registry in the text exposition format.
    pub fn encode(&self) -> Vec<u8> {
        let mut text = Vec::new();
        if let Err(error) = TextEncoder::new().encode(&self.registry.gather(), &mut text) {
            tracing::error!(%error, "encoding the metrics failed");
        }
        text
    }
}

/// One topic's counters on one shard.
#[derive(Debug)]
struct TopicCounters {
    produce_bytes: IntCounter,
    produce_records: IntCounter,
    fetch_bytes: IntCounter,
    replication_bytes_out: IntCounter,
}

/// A shard's children of the hot-path families (see the module doc).
#[derive(Debug)]
pub struct ShardMetrics {
    shard: String,
    /// By `ApiKey as usize`, each made at the API's first request (so an
    /// API never asked shows no series).
    requests: RefCell<Vec<Option<(IntCounter, Histogram)>>>,
    connections_active: IntGauge,
    connections: IntCounter,
    shard_jobs: IntCounter,
    /// Consumer's, then follower's.
    fetch_expired: [IntCounter; 2],
    prepared_reads_used: IntCounter,
    prepared_reads_dropped: IntCounter,
    isr_shrinks: IntCounter,
    isr_expands: IntCounter,
    topics: RefCell<HashMap<String, TopicCounters>>,
    /// By (API key, error code), each made at its first count.
    errors: RefCell<HashMap<(i16, i16), IntCounter>>,
    fetcher_lag: Cycled,
    transactions: Cycled,
    groups: Cycled,
    group_lag: Cycled,
    families: std::sync::Arc<BrokerMetrics>,
}

/// The series of a gauge family that a shard sets in full once a cycle:
/// those it set in the last cycle and not in this one are removed (a
/// partition no longer followed, a group gone).
#[derive(Debug, Default)]
struct Cycled(RefCell<HashSet<Vec<String>>>);

impl Cycled {
    fn set_all(&self, family: &IntGaugeVec, values: Vec<(Vec<String>, i64)>) {
        fn refs(labels: &[String]) -> Vec<&str> {
            labels.iter().map(String::as_str).collect()
        }
        let mut now = HashSet::with_capacity(values.len());
        for (labels, value) in values {
            family.with_label_values(&refs(&labels)).set(value);
            now.insert(labels);
        }
        let mut last = self.0.borrow_mut();
        for gone in last.difference(&now) {
            let _ = family.remove_label_values(&refs(gone));
        }
        *last = now;
    }
}

/// Kafka's name of an error code (`Errors.name()`:
/// NOT_LEADER_OR_FOLLOWER), from kafka-protocol's variant name; the
/// number for a code it does not know.
fn error_name(code: i16) -> String {
    match kafka_protocol::ResponseError::try_from_code(code) {
        None => "NONE".to_owned(),
        Some(kafka_protocol::ResponseError::Unknown(code)) => code.to_string(),
        Some(error) => {
            let camel = error.to_string();
            let mut name = String::with_capacity(camel.len() + 8);
            for (index, character) in camel.char_indices() {
                if character.is_ascii_uppercase() && index > 0 {
                    name.push('_');
                }
                name.push(character.to_ascii_uppercase());
            }
            name
        }
    }
}

impl ShardMetrics {
    pub fn new(families: std::sync::Arc<BrokerMetrics>, shard: u16) -> ShardMetrics {
        let shard = shard.to_string();
        let slots = SUPPORTED
            .iter()
            .map(|supported| supported.api_key as usize + 1)
            .max()
            .unwrap_or(0);
        ShardMetrics {
            connections_active: families.connections_active.with_label_values(&[&shard]),
            connections: families.connections.with_label_values(&[&shard]),
            shard_jobs: families.shard_jobs.with_label_values(&[&shard]),
            fetch_expired: ["consumer", "follower"]
                .map(|fetcher| families.fetch_expired.with_label_values(&[fetcher, &shard])),
            prepared_reads_used: families.prepared_reads.with_label_values(&["used", &shard]),
            prepared_reads_dropped: families
                .prepared_reads
                .with_label_values(&["dropped", &shard]),
            isr_shrinks: families.isr_shrinks.with_label_values(&[&shard]),
            isr_expands: families.isr_expands.with_label_values(&[&shard]),
            requests: RefCell::new(vec![None; slots]),
            topics: RefCell::new(HashMap::new()),
            errors: RefCell::new(HashMap::new()),
            fetcher_lag: Cycled::default(),
            transactions: Cycled::default(),
            groups: Cycled::default(),
            group_lag: Cycled::default(),
            families,
            shard,
        }
    }

    /// A request of `api` was answered `elapsed` after it was read, with
    /// `errors` in its response.
    pub fn request_done(&self, api: ApiKey, elapsed: Duration, errors: &ErrorCounts) {
        for (code, count) in errors.iter() {
            let mut counters = self.errors.borrow_mut();
            let counter = counters.entry((api as i16, code)).or_insert_with(|| {
                self.families.request_errors.with_label_values(&[
                    &format!("{api:?}"),
                    &error_name(code),
                    &self.shard,
                ])
            });
            counter.inc_by(u64::from(count));
        }
        let mut requests = self.requests.borrow_mut();
        let Some(slot) = requests.get_mut(api as usize) else {
            return;
        };
        let (count, seconds) = slot.get_or_insert_with(|| {
            // Kafka's request name (`Produce`, `Fetch`, …), as its
            // `RequestMetrics` MBeans name it.
            let api = format!("{api:?}");
            (
                self.families
                    .requests
                    .with_label_values(&[&api, &self.shard]),
                self.families
                    .request_seconds
                    .with_label_values(&[&api, &self.shard]),
            )
        });
        count.inc();
        seconds.observe(elapsed.as_secs_f64());
    }

    /// Leader elections in metadata this broker applied.
    pub fn leader_elections(&self, elections: LeaderElections) {
        for (kind, count) in [("clean", elections.clean), ("unclean", elections.unclean)] {
            // Both series exist from the first apply, so a rate of 0 shows.
            self.families
                .leader_elections
                .with_label_values(&[kind])
                .inc_by(count);
        }
    }

    pub fn connection_opened(&self) {
        self.connections.inc();
        self.connections_active.inc();
    }

    /// This shard sent a job to another shard.
    pub fn shard_job_sent(&self) {
        self.shard_jobs.inc();
    }

    /// A fetch (a follower's: `to_replica`) waited out its max_wait_ms
    /// short of min_bytes.
    pub fn fetch_expired(&self, to_replica: bool) {
        self.fetch_expired[usize::from(to_replica)].inc();
    }

    /// `count` reads prepared one fetch ahead were used (`true`) or
    /// dropped.
    pub fn prepared_reads(&self, used: bool, count: usize) {
        let counter = match used {
            true => &self.prepared_reads_used,
            false => &self.prepared_reads_dropped,
        };
        counter.inc_by(count as u64);
    }

    pub fn connection_closed(&self) {
        self.connections_active.dec();
    }

    /// The controller committed a smaller or larger ISR for a partition this
    /// shard leads (in the same leader epoch).
    pub fn isr_changed(&self, before: usize, after: usize) {
        if after < before {
            self.isr_shrinks.inc();
        } else if after > before {
            self.isr_expands.inc();
        }
    }

    pub fn produced(&self, topic: &str, bytes: usize, records: u64) {
        self.with_topic(topic, |counters| {
            counters.produce_bytes.inc_by(bytes as u64);
            counters.produce_records.inc_by(records);
        });
    }

    /// Record bytes sent from `topic`, to a follower or to a consumer.
    pub fn fetched(&self, topic: &str, bytes: u64, to_replica: bool) {
        if bytes == 0 {
            return;
        }
        self.with_topic(topic, |counters| {
            if to_replica {
                counters.replication_bytes_out.inc_by(bytes);
            } else {
                counters.fetch_bytes.inc_by(bytes);
            }
        });
    }

    fn with_topic(&self, topic: &str, count: impl FnOnce(&TopicCounters)) {
        if let Some(counters) = self.topics.borrow().get(topic) {
            count(counters);
            return;
        }
        let labels = [topic, self.shard.as_str()];
        let families = &self.families;
        let counters = TopicCounters {
            produce_bytes: families.produce_bytes.with_label_values(&labels),
            produce_records: families.produce_records.with_label_values(&labels),
            fetch_bytes: families.fetch_bytes.with_label_values(&labels),
            replication_bytes_out: families.replication_bytes_out.with_label_values(&labels),
        };
        count(&counters);
        self.topics.borrow_mut().insert(topic.to_owned(), counters);
    }

    /// A partition log of this shard was deleted: its series go.
    pub fn forget_partition(&self, topic_partition: &TopicPartition) {
        let partition = topic_partition.partition.0.to_string();
        let labels = [topic_partition.topic.as_str(), partition.as_str()];
        let _ = self.families.log_size.remove_label_values(&labels);
        let _ = self.families.log_segments.remove_label_values(&labels);
        self.forget_topic(&topic_partition.topic);
    }

    /// A topic was deleted: its series go.
    pub fn forget_topic(&self, topic: &str) {
        if self.topics.borrow_mut().remove(topic).is_none() {
            return;
        }
        let labels = [topic, self.shard.as_str()];
        let families = &self.families;
        for family in [
            &families.produce_bytes,
            &families.produce_records,
            &families.fetch_bytes,
            &families.replication_bytes_out,
        ] {
            let _ = family.remove_label_values(&labels);
        }
    }
}

/// Binds the metrics listener (port 0: a free one), before the shards
/// start, so a taken port fails the start.
pub fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(address)
}

/// Answers scrapes on `listener` from a thread of its own until the
/// process ends. One scrape at a time: Prometheus scrapes a target
/// serially, and the answer is built in well under a millisecond.
pub fn serve(listener: TcpListener, metrics: std::sync::Arc<BrokerMetrics>) {
    let spawned = std::thread::Builder::new()
        .name("brook-metrics".to_owned())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(stream) => {
                        if let Err(error) = answer(stream, &metrics) {
                            tracing::debug!(%error, "a metrics scrape failed");
                        }
                    }
                    Err(error) => tracing::debug!(%error, "accepting a metrics scrape failed"),
                }
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "the metrics listener cannot start");
    }
}

/// Reads one HTTP/1.1 request and answers it; the connection then closes.
fn answer(mut stream: TcpStream, metrics: &BrokerMetrics) -> std::io::Result<()> {
    stream.set_read_timeout(Some(SCRAPE_IO_TIMEOUT))?;
    stream.set_write_timeout(Some(SCRAPE_IO_TIMEOUT))?;
    let mut buffer = vec![0u8; REQUEST_BYTES_MAX];
    let mut filled = 0;
    let route = loop {
        let read = stream.read(&mut buffer[filled..])?;
        if read == 0 {
            return Ok(());
        }
        filled += read;
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buffer[..filled]) {
            Ok(httparse::Status::Complete(_)) => break route(request.method, request.path),
            Ok(httparse::Status::Partial) if filled < buffer.len() => continue,
            Ok(httparse::Status::Partial) => break Route::TooLarge,
            Err(_) => break Route::Bad,
        }
    };
    let (status, body) = match route {
        Route::Metrics => ("200 OK", metrics.encode()),
        Route::NotFound => ("404 Not Found", b"try /metrics\n".to_vec()),
        Route::NotAllowed => ("405 Method Not Allowed", Vec::new()),
        Route::TooLarge => ("431 Request Header Fields Too Large", Vec::new()),
        Route::Bad => ("400 Bad Request", Vec::new()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        prometheus::TEXT_FORMAT,
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(&body)?;
    stream.flush()
}

/// How often shard 0 sets the state gauges from its image.
const STATE_GAUGES_INTERVAL: Duration = Duration::from_secs(1);

/// The broker's state as gauges, every [`STATE_GAUGES_INTERVAL`] until
/// the shard stops: each shard sets its own logs' size and segment count;
/// shard 0 also the partition counts and the controller's, from its image.
pub async fn run_state_gauges(shard: std::rc::Rc<Shard>) {
    while !shard.is_stopping() {
        if shard.id.0 == 0 {
            set_state_gauges(&shard);
        }
        set_log_gauges(&shard);
        set_coordinator_gauges(&shard);
        set_group_lag(&shard).await;
        glommio::timer::sleep(STATE_GAUGES_INTERVAL).await;
    }
}

/// Counts of `names` as (labels: name and shard, count) series.
fn counted_by_name(names: Vec<&'static str>, shard: &str) -> Vec<(Vec<String>, i64)> {
    let mut counts: HashMap<&'static str, i64> = HashMap::new();
    for name in names {
        *counts.entry(name).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(name, count)| (vec![name.to_owned(), shard.to_owned()], count))
        .collect()
}

/// This shard's replica fetcher lags, and its coordinators' groups and
/// transactions by state.
fn set_coordinator_gauges(shard: &Shard) {
    let metrics = &shard.metrics;
    let families = &shard.context.metrics;
    let lags = shard
        .replication
        .fetcher_lags()
        .into_iter()
        .map(|(topic_partition, lag)| {
            let labels = vec![
                topic_partition.topic.clone(),
                topic_partition.partition.0.to_string(),
            ];
            (labels, i64::try_from(lag).unwrap_or(i64::MAX))
        })
        .collect();
    metrics.fetcher_lag.set_all(&families.fetcher_lag, lags);
    let states = shard
        .transactions
        .each_loaded(|coordinator| {
            coordinator
                .transactions()
                .map(|transaction| transaction.state.name())
                .collect::<Vec<_>>()
        })
        .into_iter()
        .flatten()
        .collect();
    let states = counted_by_name(states, &metrics.shard);
    metrics.transactions.set_all(&families.transactions, states);
    let states = shard
        .groups
        .each_loaded(|coordinator| {
            coordinator
                .groups
                .values()
                .filter(|group| !group.is(GroupState::Dead))
                .map(|group| group.state.name())
                .collect::<Vec<_>>()
        })
        .into_iter()
        .flatten()
        .collect();
    let states = counted_by_name(states, &metrics.shard);
    metrics.groups.set_all(&families.groups, states);
}

/// Each committed offset of a group coordinated on this shard, behind
/// its partition's high watermark, where this broker holds the partition
/// (on whichever shard owns it).
async fn set_group_lag(shard: &std::rc::Rc<Shard>) {
    let committed: Vec<(String, TopicPartition, i64)> = shard
        .groups
        .each_loaded(|coordinator| {
            coordinator
                .groups
                .values()
                .flat_map(|group| {
                    group.offsets.iter().map(|(topic_partition, committed)| {
                        (
                            group.group_id.clone(),
                            topic_partition.clone(),
                            committed.offset,
                        )
                    })
                })
                .collect::<Vec<_>>()
        })
        .into_iter()
        .flatten()
        .collect();
    let image = shard.local_image();
    let mut by_owner: HashMap<ShardId, Vec<TopicPartition>> = HashMap::new();
    for (_, topic_partition, _) in &committed {
        if let Some(owner) = image.owner(topic_partition) {
            by_owner
                .entry(owner)
                .or_default()
                .push(topic_partition.clone());
        }
    }
    let mut high_watermarks: HashMap<TopicPartition, i64> = HashMap::new();
    for (owner, partitions) in by_owner {
        let read = shard
            .on_shard(owner, move |owner| async move {
                partitions
                    .into_iter()
                    .filter_map(|topic_partition| {
                        let log = owner.log(&topic_partition)?;
                        Some((topic_partition, log.high_watermark().0))
                    })
                    .collect::<Vec<_>>()
            })
            .await;
        high_watermarks.extend(read.unwrap_or_default());
    }
    let lags = committed
        .into_iter()
        .filter_map(|(group, topic_partition, offset)| {
            let high_watermark = high_watermarks.get(&topic_partition)?;
            let labels = vec![
                group,
                topic_partition.topic.clone(),
                topic_partition.partition.0.to_string(),
            ];
            Some((labels, (high_watermark - offset).max(0)))
        })
        .collect();
    shard
        .metrics
        .group_lag
        .set_all(&shard.context.metrics.group_lag, lags);
}

fn set_log_gauges(shard: &Shard) {
    let metrics = &shard.context.metrics;
    let mut producer_ids = 0;
    for (topic_partition, log) in shard.store.partitions() {
        producer_ids += log.producer_count();
        let partition = topic_partition.partition.0.to_string();
        let labels = [topic_partition.topic.as_str(), partition.as_str()];
        let size = i64::try_from(log.size_bytes()).unwrap_or(i64::MAX);
        metrics.log_size.with_label_values(&labels).set(size);
        let segments = i64::try_from(log.segment_count()).unwrap_or(i64::MAX);
        metrics
            .log_segments
            .with_label_values(&labels)
            .set(segments);
    }
    metrics
        .producer_ids
        .with_label_values(&[&shard.metrics.shard])
        .set(i64::try_from(producer_ids).unwrap_or(i64::MAX));
}

fn set_state_gauges(shard: &Shard) {
    let metrics = &shard.context.metrics;
    let Some(view) = shard.cluster_view() else {
        // One node: it holds and leads every partition and is its own
        // controller.
        let partitions = shard.local_image().partitions().count() as i64;
        metrics.partitions.set(partitions);
        metrics.leaders.set(partitions);
        metrics.controller_active.set(1);
        return;
    };
    let local = BrokerId(shard.context.broker_id);
    let (mut partitions, mut leaders, mut under_replicated, mut under_min_isr, mut offline) =
        (0, 0, 0, 0, 0);
    for topic in view.image.topics.values() {
        let min_insync = shard
            .topic_log_config(&topic.name)
            .replication
            .min_insync_replicas as usize;
        for registration in &topic.partitions {
            if registration.leader == BrokerId::NONE {
                offline += 1;
            }
            if registration.replicas.contains(&local) {
                partitions += 1;
            }
            if registration.leader != local {
                continue;
            }
            leaders += 1;
            if registration.isr.len() < registration.replicas.len() {
                under_replicated += 1;
            }
            if registration.isr.len() < min_insync.min(registration.replicas.len()) {
                under_min_isr += 1;
            }
        }
    }
    metrics.partitions.set(partitions);
    metrics.leaders.set(leaders);
    metrics.under_replicated.set(under_replicated);
    metrics.under_min_isr.set(under_min_isr);
    metrics.offline.set(offline);
    metrics
        .controller_active
        .set(i64::from(view.controller == Some(local)));
    metrics
        .metadata_offset
        .set(i64::try_from(view.image.offset).unwrap_or(i64::MAX));
}

#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    NotFound,
    NotAllowed,
    TooLarge,
    Bad,
}

fn route(method: Option<&str>, path: Option<&str>) -> Route {
    let path = path.map(|path| path.split('?').next().unwrap_or(path));
    match (method, path) {
        (Some("GET" | "HEAD"), Some("/metrics")) => Route::Metrics,
        (Some(_), Some("/metrics")) => Route::NotAllowed,
        (Some(_), Some(_)) => Route::NotFound,
        _ => Route::Bad,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_are_kafkas() {
        assert_eq!(error_name(6), "NOT_LEADER_OR_FOLLOWER");
        assert_eq!(error_name(20), "NOT_ENOUGH_REPLICAS_AFTER_APPEND");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(9999), "9999");
    }

    #[test]
    fn a_cycled_gauge_drops_the_series_not_set_again() {
        let families = BrokerMetrics::new(7);
        let cycled = Cycled::default();
        let series = |group: &str, lag| (vec![group.to_owned(), "t".into(), "0".into()], lag);
        cycled.set_all(&families.group_lag, vec![series("a", 3), series("b", 4)]);
        cycled.set_all(&families.group_lag, vec![series("b", 1)]);
        let text = String::from_utf8(families.encode()).unwrap();
        assert!(!text.contains(r#"group="a""#), "{text}");
        assert!(
            text.contains(
                r#"brook_consumer_group_lag_records{group="b",partition="0",topic="t",broker="7"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn shard_children_count_into_the_families_and_deleted_topics_go() {
        let families = std::sync::Arc::new(BrokerMetrics::new(7));
        let shard = ShardMetrics::new(families.clone(), 1);
        let mut errors = ErrorCounts::default();
        for code in [6, 0, 6, 19] {
            errors.add(code);
        }
        shard.request_done(ApiKey::Produce, Duration::from_millis(3), &errors);
        shard.produced("orders", 1000, 10);
        shard.produced("orders", 500, 5);
        shard.fetched("orders", 700, false);
        shard.fetched("orders", 900, true);
        let text = String::from_utf8(families.encode()).unwrap();
        assert!(
            text.contains(r#"brook_requests_total{api="Produce",shard="1",broker="7"} 1"#),
            "{text}"
        );
        assert!(text.contains(
            r#"brook_request_errors_total{api="Produce",error="NOT_LEADER_OR_FOLLOWER",shard="1",broker="7"} 2"#
        ), "{text}");
        assert!(text.contains(
            r#"brook_request_errors_total{api="Produce",error="NOT_ENOUGH_REPLICAS",shard="1",broker="7"} 1"#
        ));
        assert!(
            text.contains(r#"brook_produce_bytes_total{shard="1",topic="orders",broker="7"} 1500"#)
        );
        assert!(
            text.contains(r#"brook_produce_records_total{shard="1",topic="orders",broker="7"} 15"#)
        );
        assert!(
            text.contains(r#"brook_fetch_bytes_total{shard="1",topic="orders",broker="7"} 700"#)
        );
        assert!(text.contains(
            r#"brook_replication_bytes_out_total{shard="1",topic="orders",broker="7"} 900"#
        ));
        assert!(text.contains(
            r#"brook_request_duration_seconds_bucket{api="Produce",shard="1",broker="7",le="0.005"} 1"#
        ));
        shard.isr_changed(3, 2);
        shard.isr_changed(2, 3);
        shard.isr_changed(2, 3);
        shard.isr_changed(3, 3);
        let text = String::from_utf8(families.encode()).unwrap();
        assert!(text.contains(r#"brook_isr_shrinks_total{shard="1",broker="7"} 1"#));
        assert!(text.contains(r#"brook_isr_expands_total{shard="1",broker="7"} 2"#));
        families
            .log_size
            .with_label_values(&["orders", "0"])
            .set(4096);
        shard.forget_partition(&TopicPartition {
            topic: "orders".to_owned(),
            partition: brook_engine::types::PartitionId(0),
        });
        let text = String::from_utf8(families.encode()).unwrap();
        assert!(!text.contains(r#"topic="orders""#), "{text}");
    }

    #[test]
    fn only_get_of_metrics_is_served() {
        assert_eq!(route(Some("GET"), Some("/metrics")), Route::Metrics);
        assert_eq!(route(Some("GET"), Some("/metrics?x=1")), Route::Metrics);
        assert_eq!(route(Some("POST"), Some("/metrics")), Route::NotAllowed);
        assert_eq!(route(Some("GET"), Some("/")), Route::NotFound);
        assert_eq!(route(None, None), Route::Bad);
    }
}
