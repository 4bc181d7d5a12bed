//! Long sweeps of the controller simulator, outside CI:
//! `cargo run --release -p brook-engine --example controller_sim -- --seeds 100000 [--first 0]`.
//! A failing seed is printed; `--first S --seeds 1` replays it. `--bug NAME`
//! breaks a rule on purpose (the checker must then fail).

use brook_engine::cluster::sim::{Bug, Report, sweep};

fn main() {
    let mut seeds = 1_000u64;
    let mut first = 0u64;
    let mut bug = None;
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    for pair in arguments.chunks(2) {
        let value = pair.get(1).and_then(|value| value.parse().ok());
        match (pair[0].as_str(), value) {
            ("--seeds", Some(value)) => seeds = value,
            ("--first", Some(value)) => first = value,
            ("--bug", _) if pair.get(1).is_some_and(|name| name == "forget-vote") => {
                bug = Some(Bug::ForgetVote)
            }
            ("--bug", _) if pair.get(1).is_some_and(|name| name == "fence-early") => {
                bug = Some(Bug::FenceEarly)
            }
            ("--bug", _) if pair.get(1).is_some_and(|name| name == "elect-out-of-isr") => {
                bug = Some(Bug::ElectOutOfIsr)
            }
            ("--bug", _)
                if pair
                    .get(1)
                    .is_some_and(|name| name == "show-applied-topics") =>
            {
                bug = Some(Bug::ShowAppliedTopics)
            }
            ("--bug", _) if pair.get(1).is_some_and(|name| name == "hide-offline-dirs") => {
                bug = Some(Bug::HideOfflineDirs)
            }
            _ => {
                eprintln!(
                    "usage: controller_sim [--seeds N] [--first S] [--bug forget-vote|fence-early|elect-out-of-isr|show-applied-topics|hide-offline-dirs]"
                );
                std::process::exit(2);
            }
        }
    }
    let started = std::time::Instant::now();
    match sweep(first, seeds, |config| config.bug = bug) {
        Ok(reports) => {
            let total: Report = reports.iter().sum();
            println!(
                "{seeds} seeds from {first} passed in {:.1} s: {total:?}",
                started.elapsed().as_secs_f64()
            );
        }
        Err(violation) => {
            println!("FAILED: {violation}");
            std::process::exit(1);
        }
    }
}
