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
//!   the controller) are set by shard 0 from its image once a second.
//! - [`serve`]: a thread answering `GET /metrics` (HTTP/1.1, parsed with
//!   httparse), away from the shards.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use crate::server::shard::Shard;
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
            registry: {
                registry
                    .register(Box::new(crate::storage::SYNC_SECONDS.clone()))
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
    isr_shrinks: IntCounter,
    isr_expands: IntCounter,
    topics: RefCell<HashMap<String, TopicCounters>>,
    families: std::sync::Arc<BrokerMetrics>,
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
            isr_shrinks: families.isr_shrinks.with_label_values(&[&shard]),
            isr_expands: families.isr_expands.with_label_values(&[&shard]),
            requests: RefCell::new(vec![None; slots]),
            topics: RefCell::new(HashMap::new()),
            families,
            shard,
        }
    }

    /// A request of `api` was answered `elapsed` after it was read.
    pub fn request_done(&self, api: ApiKey, elapsed: Duration) {
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

    pub fn connection_opened(&self) {
        self.connections.inc();
        self.connections_active.inc();
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
        glommio::timer::sleep(STATE_GAUGES_INTERVAL).await;
    }
}

fn set_log_gauges(shard: &Shard) {
    let metrics = &shard.context.metrics;
    for (topic_partition, log) in shard.store.partitions() {
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
}

fn set_state_gauges(shard: &Shard) {
    let metrics = &shard.context.metrics;
    let Some(view) = shard.cluster_view() else {
        // One node: it holds and leads every partition and is its own
        // controller.
        let partitions = shard.image().partitions().count() as i64;
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
    fn shard_children_count_into_the_families_and_deleted_topics_go() {
        let families = std::sync::Arc::new(BrokerMetrics::new(7));
        let shard = ShardMetrics::new(families.clone(), 1);
        shard.request_done(ApiKey::Produce, Duration::from_millis(3));
        shard.produced("orders", 1000, 10);
        shard.produced("orders", 500, 5);
        shard.fetched("orders", 700, false);
        shard.fetched("orders", 900, true);
        let text = String::from_utf8(families.encode()).unwrap();
        assert!(
            text.contains(r#"brook_requests_total{api="Produce",shard="1",broker="7"} 1"#),
            "{text}"
        );
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
