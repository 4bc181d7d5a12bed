//! The product binary's dependencies: `brook` does not link the benchmarks
//! (`brook-bench`, a program of its own that `brook bench` runs), so the
//! broker carries neither their code nor their counting allocator.

use std::process::Command;

#[test]
fn the_brook_binary_does_not_depend_on_the_benchmarks() {
    let output = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-p", "brook", "-e", "normal,build"])
        .args(["--prefix", "none", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(tree.contains("brook-shards"), "{tree}");
    assert!(!tree.contains("brook-bench"), "{tree}");
}
