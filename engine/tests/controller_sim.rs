//! The controller quorum under the deterministic simulator
//! (`brook_engine::cluster::sim`): a sweep of seeds keeps every invariant,
//! a seed replays exactly, and the checker catches rules broken on purpose.
//! `BROOK_SIM_SEEDS=N` sets the sweep's length (CI: 1,000); long sweeps run
//! with `cargo run --release -p brook-engine --example controller_sim -- --seeds N`.

use brook_engine::cluster::sim::{Bug, Report, SimConfig, Simulation, sweep, sweep_length};

#[test]
fn a_sweep_of_seeds_keeps_every_invariant_and_exercises_the_faults() {
    let count = sweep_length();
    let reports = sweep(0, count, |_| {}).unwrap_or_else(|violation| panic!("{violation}"));
    let total: Report = reports.iter().sum();
    println!("{count} seeds: {total:?}");
    // A sweep that never elected twice, crashed, fenced or snapshotted
    // would prove nothing.
    assert!(total.terms > count, "{total:?}");
    assert!(total.crashes > count, "{total:?}");
    assert!(total.fences > count / 2, "{total:?}");
    assert!(total.snapshots > count, "{total:?}");
    assert!(total.topics > count * 5, "{total:?}");
    // Partitions moved, ISRs changed both ways, brokers stopped cleanly.
    assert!(total.leader_changes > count * 5, "{total:?}");
    assert!(total.isr_changes > count * 2, "{total:?}");
    assert!(total.isr_refusals > 0, "{total:?}");
    assert!(total.controlled_shutdowns > count / 2, "{total:?}");
    // Leaderships went back to preferred replicas (a replica must be
    // fenced, come back and rejoin the ISR first: 70 in 1,000 seeds).
    assert!(total.balanced > count / 50, "{total:?}");
    // Clients were shown most topics (the visibility invariant was
    // exercised, not skipped).
    assert!(total.topics_shown > total.topics / 2, "{total:?}");
    // Log directories failed under replicas.
    assert!(total.offline_replicas > count, "{total:?}");
}

#[test]
fn a_seed_replays_exactly() {
    let run = || Simulation::new(SimConfig::new(7)).run().unwrap();
    assert_eq!(run(), run());
    let other = Simulation::new(SimConfig::new(8)).run().unwrap();
    assert_ne!(run(), other);
}

/// A voter whose vote is not durable can vote twice in one term after a
/// crash: the checker must find two leaders in a term (or a diverged
/// prefix) within the sweep.
#[test]
fn the_checker_catches_a_vote_forgotten_across_a_crash() {
    let found = sweep(0, 2_000, |config| config.bug = Some(Bug::ForgetVote));
    let violation = found.expect_err("a forgotten vote went unnoticed for 2,000 seeds");
    println!("caught: {violation}");
    assert!(
        violation.what.contains("two leaders") || violation.what.contains("differs"),
        "{violation}"
    );
    // The failing seed reproduces alone.
    let mut config = SimConfig::new(violation.seed);
    config.bug = Some(Bug::ForgetVote);
    assert_eq!(Simulation::new(config).run(), Err(violation));
}

#[test]
fn the_checker_catches_a_broker_fenced_inside_its_session() {
    let violation = sweep(0, 200, |config| config.bug = Some(Bug::FenceEarly))
        .expect_err("fencing at half the session went unnoticed");
    assert!(
        violation.what.contains("within the 9000 ms session"),
        "{violation}"
    );
}

/// An election that ignores the ISR puts a leader outside it: the
/// partition check must see it, and the seed must reproduce it.
#[test]
fn the_checker_catches_a_leader_elected_outside_the_isr() {
    let violation = sweep(0, 200, |config| config.bug = Some(Bug::ElectOutOfIsr))
        .expect_err("an election outside the ISR went unnoticed for 200 seeds");
    println!("caught: {violation}");
    assert!(
        violation.what.contains("the leader is not in the ISR"),
        "{violation}"
    );
    let mut config = SimConfig::new(violation.seed);
    config.bug = Some(Bug::ElectOutOfIsr);
    assert_eq!(Simulation::new(config).run(), Err(violation));
}

/// Brokers that show a topic as soon as they apply it: a client asking the
/// brokers in turn hears "unknown" after "exists", and the checker must see
/// it (the rule: `cluster::visibility`).
#[test]
fn the_checker_catches_a_topic_shown_before_every_live_broker_serves_it() {
    let violation = sweep(0, 200, |config| config.bug = Some(Bug::ShowAppliedTopics))
        .expect_err("topics shown on apply went unnoticed for 200 seeds");
    println!("caught: {violation}");
    assert!(
        violation.what.contains("after a live broker showed it"),
        "{violation}"
    );
    let mut config = SimConfig::new(violation.seed);
    config.bug = Some(Bug::ShowAppliedTopics);
    assert_eq!(Simulation::new(config).run(), Err(violation));
}

/// Brokers that do not report their failed log directories keep leading
/// (or stay in the ISR of) partitions they can no longer serve: the end
/// check must see it, and the seed must reproduce it.
#[test]
fn the_checker_catches_offline_replicas_left_leading() {
    let violation = sweep(0, 200, |config| config.bug = Some(Bug::HideOfflineDirs))
        .expect_err("unreported failed log directories went unnoticed for 200 seeds");
    println!("caught: {violation}");
    assert!(
        violation.what.contains("failed log directory"),
        "{violation}"
    );
    let mut config = SimConfig::new(violation.seed);
    config.bug = Some(Bug::HideOfflineDirs);
    assert_eq!(Simulation::new(config).run(), Err(violation));
}

/// A node started without a quorum is a quorum of one (README "One broker,
/// one path"): it campaigns at once, and when it crashes and restarts its
/// new incarnation registers with the controller it is itself. Sweeps of
/// one-voter clusters, alone and with a broker beside the voter, keep every
/// invariant, settle (every live broker registered and unfenced) and crash
/// the voter.
#[test]
fn a_quorum_of_one_keeps_every_invariant() {
    let count = (sweep_length() / 4).max(50);
    for brokers_only in [0, 1] {
        let reports = sweep(0, count, |config| {
            config.voters = 1;
            config.brokers_only = brokers_only;
        })
        .unwrap_or_else(|violation| panic!("{brokers_only} beside the voter: {violation}"));
        let total: Report = reports.iter().sum();
        println!("one voter, {brokers_only} beside it, {count} seeds: {total:?}");
        assert!(total.crashes > count, "{total:?}");
        assert!(total.topics > count, "{total:?}");
        assert!(total.terms > count, "{total:?}");
    }
}
