//! `brook bench run catchup | many-partitions | recovery | scaling`: the
//! storage engine's workloads, driven by Brook's own load generator against
//! one broker (pinned, beside the same-run ceiling).

use std::time::{Duration, Instant};

use super::report::{Figure, NamedRun, Target};
use super::{Bench, BenchError, drop_page_cache, end_offsets, with_cluster};
use crate::log::json::JsonObject;
use crate::workload::client_error;
use crate::workload::options::WorkloadOptions;
use brook_shards::client::cluster::resolve;

/// Partitions the many-partitions workload creates per request (a
/// CreateTopics, then CreatePartitions), on both brokers: Kafka's controller
/// refuses one operation of more than `max.records.per.user.op` (10,000)
/// metadata records with POLICY_VIOLATION, and a topic of 10,000 partitions
/// is 10,001 of them.
const CREATE_STEP: i32 = 5_000;

impl Bench<'_> {
    pub(in crate::named) fn catchup(&mut self) -> Result<NamedRun, BenchError> {
        let broker = self.broker("catchup", 1, true)?;
        let topic = "catchup";
        // Segments small enough that most of the data is in sealed segments,
        // which Fetch sends with sendfile; the active one is read too.
        let configs = vec![("segment.bytes".to_owned(), (64u64 << 20).to_string())];
        (self.progress)(&format!(
            "catchup: writing {} bytes",
            self.options.catchup_bytes
        ));
        let fill = WorkloadOptions {
            record_bytes: 4096,
            warmup: Duration::ZERO,
            duration: Duration::from_secs(3600),
            bytes_limit: self.options.catchup_bytes,
            topic_configs: configs,
            ..self.throughput_workload(broker.address(), topic)
        };
        let written = self.workload(fill)?;
        let reader = WorkloadOptions {
            producers: 0,
            consumers: 1,
            from_beginning: true,
            // Everything written, bar what the writers' limit overshot.
            bytes_limit: written.totals.produced_bytes,
            drain_timeout: Duration::ZERO,
            ..self.throughput_workload(broker.address(), topic)
        };
        let reader = WorkloadOptions {
            warmup: Duration::ZERO,
            duration: Duration::from_secs(3600),
            ..reader
        };
        let dropped = !self.options.no_drop_caches && drop_page_cache();
        (self.progress)(&format!(
            "catchup: cold read (page cache dropped: {dropped})"
        ));
        let cold = self.workload(reader.clone())?;
        (self.progress)("catchup: hot read");
        let hot = self.workload(reader)?;
        let mut cold_figure = Figure::new(
            "cold_mb_per_s",
            if dropped {
                "cold read (page cache dropped)"
            } else {
                "read (page cache NOT dropped)"
            },
            cold.consume_mb_per_second(),
            "MB/s",
        )
        .target(Target::RatioAtLeast(0.8));
        let mut hot_figure = Figure::new(
            "hot_mb_per_s",
            "hot read",
            hot.consume_mb_per_second(),
            "MB/s",
        )
        .target(Target::RatioAtLeast(0.7));
        if let Some(ceiling) = self.ceiling {
            cold_figure = cold_figure.against(
                "disk O_DIRECT read",
                ceiling.direct_read.megabytes_per_second(),
            );
            hot_figure = hot_figure.against(
                "loopback TCP",
                ceiling.tcp.throughput.megabytes_per_second(),
            );
        }
        let read_bytes = Figure::new(
            "read_gib",
            "read per pass",
            cold.totals.consumed_bytes as f64 / f64::from(1u32 << 30),
            "GiB",
        );
        Ok(NamedRun {
            name: "catchup",
            setup: self.setup(
                "--cores 1",
                "segment.bytes=64MiB, 4 KiB records, 1 consumer",
            ),
            figures: vec![cold_figure, hot_figure, read_bytes],
            details: format!(
                "write:\n{}cold read:\n{}hot read:\n{}",
                written.to_text(),
                cold.to_text(),
                hot.to_text()
            ),
            details_json: JsonObject::new()
                .object("write", written.to_json_object())
                .object("cold", cold.to_json_object())
                .object("hot", hot.to_json_object()),
            error: None,
        })
    }

    pub(in crate::named) fn many_partitions(&mut self) -> Result<NamedRun, BenchError> {
        let mut broker = self.broker("many-partitions", 1, true)?;
        let open_files = broker
            .process()
            .and_then(|process| process.open_file_limit());
        // One open file per idle partition (its active segment's log: index
        // files are opened for each write), and room for sockets, files open
        // for one write and the broker's own files.
        let allowed = open_files.map(|limit| limit.saturating_sub(2000) as i32);
        let partitions = match allowed {
            Some(allowed) if allowed < self.options.partitions => {
                (self.progress)(&format!(
                    "many-partitions: the broker may open {} files, enough for {allowed} partitions, not {}",
                    open_files.unwrap_or_default(),
                    self.options.partitions
                ));
                allowed
            }
            _ => self.options.partitions,
        };
        let address = resolve(&broker.address()).map_err(client_error)?;
        let topic = "many-partitions-0".to_owned();
        (self.progress)(&format!(
            "many-partitions: creating {partitions} partitions"
        ));
        let started = Instant::now();
        let create_topic = topic.clone();
        with_cluster(address, move |cluster| async move {
            let first = partitions.min(CREATE_STEP);
            cluster
                .create_topics(std::slice::from_ref(&create_topic), first, 1, &[])
                .await?;
            let mut created = first;
            while created < partitions {
                created = (created + CREATE_STEP).min(partitions);
                cluster.create_partitions(&create_topic, created).await?;
            }
            Ok(())
        })?;
        // Until every partition serves: Brook answers CreateTopics once
        // its partitions are open, Kafka before its broker has created them
        // (9,000 took it minutes on one core).
        end_offsets(address, &topic)?;
        let created_in = started.elapsed();
        std::thread::sleep(Duration::from_secs(2));
        let idle_rss = broker.process().and_then(|process| process.rss_bytes());
        let options = WorkloadOptions {
            topic: "many-partitions".into(),
            partitions,
            rate: 20_000,
            producers: 1,
            consumers: 1,
            // A few records per batch: the sticky partitioner moves on after
            // each, so every partition is written within a few seconds.
            batch_bytes: 4 << 10,
            warmup: Duration::from_secs(1),
            duration: self.options.duration.min(Duration::from_secs(10)),
            ..self.throughput_workload(broker.address(), "many-partitions")
        };
        let report = self.workload(options)?;
        let busy_rss = broker.process().and_then(|process| process.rss_bytes());
        let offsets_topic = topic.clone();
        let written = with_cluster(address, move |cluster| async move {
            let leaders = cluster.leaders(&offsets_topic).await?;
            let ends = cluster.offsets(&offsets_topic, &leaders, -1).await?;
            Ok(ends.values().filter(|end| **end > 0).count())
        })?;
        let exactly_once = report
            .verification
            .as_ref()
            .is_some_and(|v| v.exactly_once());
        let mib = |bytes: Option<u64>| {
            bytes.map_or(f64::NAN, |bytes| bytes as f64 / f64::from(1u32 << 20))
        };
        let figures = vec![
            Figure::new(
                "idle_rss_mib",
                format!("RSS with {partitions} idle partitions"),
                mib(idle_rss),
                "MiB",
            )
            .target(Target::AtMost(1024.0)),
            Figure::new(
                "busy_rss_mib",
                "RSS after producing to all",
                mib(busy_rss),
                "MiB",
            )
            .target(Target::AtMost(1024.0)),
            Figure::new(
                "create_s",
                "CreateTopics → every partition serves",
                created_in.as_secs_f64(),
                "s",
            ),
            Figure::new("partitions", "partitions", f64::from(partitions), "")
                .against("asked for", f64::from(self.options.partitions))
                .target(Target::RatioAtLeast(1.0)),
            Figure::new(
                "partitions_written",
                "partitions written",
                written as f64,
                "",
            )
            .against("partitions", f64::from(partitions))
            .target(Target::RatioAtLeast(1.0)),
            Figure::new(
                "exactly_once",
                "every acknowledged record consumed once",
                if exactly_once { 1.0 } else { 0.0 },
                "",
            )
            .target(Target::RatioAtLeast(1.0))
            .against("yes", 1.0),
        ];
        Ok(NamedRun {
            name: "many-partitions",
            setup: self.setup(
                "--cores 1",
                "20,000 rec/s round-robin, 1 producer, 1 consumer",
            ),
            figures,
            details: report.to_text(),
            details_json: JsonObject::new().object("produce_consume", report.to_json_object()),
            error: None,
        })
    }

    pub(in crate::named) fn recovery(&mut self) -> Result<NamedRun, BenchError> {
        self.own_broker_needed("recovery")?;
        let mut broker = self.broker("recovery", 1, true)?;
        let address = resolve(&broker.address()).map_err(client_error)?;
        let topic = "recovery-0".to_owned();
        (self.progress)(&format!(
            "recovery: writing {} bytes over 100 partitions",
            self.options.recovery_bytes
        ));
        let fill = WorkloadOptions {
            topic: "recovery".into(),
            partitions: 100,
            record_bytes: 4096,
            warmup: Duration::ZERO,
            duration: Duration::from_secs(3600),
            bytes_limit: self.options.recovery_bytes,
            ..self.throughput_workload(broker.address(), "recovery")
        };
        let written = self.workload(fill)?;
        let before = end_offsets(address, &topic)?;
        let process = broker.process().expect("own broker");
        process.kill();
        (self.progress)("recovery: killed (-9); restarting");
        let started = Instant::now();
        process.restart()?;
        let listening = started.elapsed();
        let after = end_offsets(address, &topic)?;
        let served = started.elapsed();
        let kept: i64 = after
            .iter()
            .zip(&before)
            .map(|(after, before)| (*after).min(*before))
            .sum();
        let acknowledged: i64 = before.iter().sum();
        let figures = vec![
            Figure::new(
                "served_s",
                "restart → Metadata + latest offsets",
                served.as_secs_f64(),
                "s",
            )
            .target(Target::AtMost(5.0)),
            Figure::new(
                "listening_s",
                "restart → listening",
                listening.as_secs_f64(),
                "s",
            ),
            Figure::new(
                "retained_gib",
                "retained at the kill",
                written.totals.produced_bytes as f64 / f64::from(1u32 << 30),
                "GiB",
            ),
            Figure::new(
                "records_kept",
                "acknowledged records still there",
                kept as f64,
                "",
            )
            .against("acknowledged", acknowledged as f64)
            .target(Target::RatioAtLeast(1.0)),
        ];
        Ok(NamedRun {
            name: "recovery",
            setup: self.setup("--cores 1", "100 partitions, 4 KiB records, kill -9"),
            figures,
            details: written.to_text(),
            details_json: JsonObject::new().object("write", written.to_json_object()),
            error: None,
        })
    }

    pub(in crate::named) fn scaling(&mut self) -> Result<NamedRun, BenchError> {
        self.own_broker_needed("scaling")?;
        let mut figures = Vec::new();
        let mut details = String::new();
        let mut details_json = JsonObject::new();
        let mut first = None;
        for (cores, key, json_key) in [
            (1, "cores_1_mb_per_s", "cores_1"),
            (2, "cores_2_mb_per_s", "cores_2"),
        ] {
            let broker = self.broker(&format!("scaling-{cores}"), cores, false)?;
            let options = WorkloadOptions {
                cpus: Vec::new(),
                ..self.throughput_workload(broker.address(), "scaling")
            };
            let report = self.workload(options)?;
            let mut figure = Figure::new(
                key,
                format!("produce with --cores {cores}"),
                report.produce_mb_per_second(),
                "MB/s",
            );
            match first {
                None => first = Some(report.produce_mb_per_second()),
                Some(one_core) => figure = figure.against("--cores 1", one_core),
            }
            figures.push(figure);
            details += &format!("--cores {cores}:\n{}", report.to_text());
            details_json = details_json.object(json_key, report.to_json_object());
        }
        Ok(NamedRun {
            name: "scaling",
            setup: "broker and load generator unpinned".into(),
            figures,
            details,
            details_json,
            error: None,
        })
    }
}
