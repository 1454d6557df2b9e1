//! The README is a front page: its first code block is
//! `examples/minimal.rs`, to the letter (so the example CI runs,
//! `tests/minimal_example.rs`, is the one a reader copies), it stays short,
//! and every heading it had before the guide has a home.

use std::path::Path;

#[test]
fn the_readme_opens_with_the_minimal_example() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let example = std::fs::read_to_string(root.join("examples/minimal.rs")).expect("minimal.rs");
    let start = readme.find("\n```").expect("a code block in the README") + 1;
    let fence_end = start + readme[start..].find('\n').expect("fence line") + 1;
    let fence = &readme[start..fence_end];
    assert_eq!(fence, "```rust,no_run\n", "the README's first code block");
    let body_end = fence_end + readme[fence_end..].find("\n```").expect("closing fence") + 1;
    assert_eq!(
        &readme[fence_end..body_end],
        example,
        "README.md's first code block differs from examples/minimal.rs"
    );
    assert!(
        example.lines().count() <= 60,
        "examples/minimal.rs has {} lines (at most 60)",
        example.lines().count()
    );
}

/// Every heading of the README as it was before the guide (issue 47: 2,705
/// lines for four audiences) has a home: a heading, word for word, in the
/// README, a chapter of the guide (`docs/guide/*.md`, the `guide` module's
/// docs) or the contributors' `tests/README.md`. Nothing the README
/// promised was dropped on the way.
const HEADINGS_BEFORE_THE_GUIDE: &[&str] = &[
    "## A first service",
    "## Quickstart",
    "### The quickstart on your own cluster",
    "## Usage",
    "## Batch handlers",
    "## Guarantees",
    "## Exactly-once effects with at-least-once delivery",
    "## Outputs and freshness across hops",
    "## Exactly once into Kafka",
    "## Configuration",
    "### Failing records",
    "### Retry topics: failing records wait in delay tiers",
    "### Stale records",
    "### Pausing and throttling at run time",
    "### Dead-letter headers and redrive",
    "### OTLP export (`fresh_consumer::otlp`)",
    "## Traces",
    "## Metrics",
    "### Semantic conventions: what follows them, and where the library differs",
    "## Reading the signals: the six ways a lag graph lies",
    "## Freshness objectives (SLO)",
    "## Watching a group from outside",
    "### Autoscaling: KEDA's rule beside the monitor's",
    "### Autoscaling with KEDA: `fresh-monitor --keda-grpc`",
    "## How it is built",
    "## Tests",
    "### Chaos soak",
    "## End to end with a collector (rotel and kcat)",
    "## Performance",
    "### The allocator",
    "## Testing your handlers",
    "## Crate features",
    "### Without OTLP (`default-features = false`)",
    "## Minimum supported Rust version",
    "## License",
];

#[test]
fn every_heading_of_the_old_readme_has_a_home() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut homes = vec![root.join("README.md"), root.join("tests/README.md")];
    for entry in std::fs::read_dir(root.join("docs/guide")).expect("docs/guide") {
        homes.push(entry.expect("an entry of docs/guide").path());
    }
    let headings: Vec<(String, String)> = homes
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).expect("a home of the old README");
            let name = path
                .strip_prefix(root)
                .unwrap_or(path)
                .display()
                .to_string();
            let mut in_code = false;
            text.lines()
                .filter(|line| {
                    if line.starts_with("```") {
                        in_code = !in_code;
                        return false;
                    }
                    !in_code && line.starts_with('#')
                })
                .map(|line| (line.trim_start_matches('#').trim().to_owned(), name.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    let homeless: Vec<&str> = HEADINGS_BEFORE_THE_GUIDE
        .iter()
        .map(|h| h.trim_start_matches('#').trim())
        .filter(|h| !headings.iter().any(|(found, _)| found == h))
        .collect();
    assert!(
        homeless.is_empty(),
        "headings of the old README without a home: {homeless:?}"
    );
}

/// The README stays a front page: at most 300 lines.
#[test]
fn the_readme_is_a_front_page() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lines = std::fs::read_to_string(root.join("README.md"))
        .expect("README.md")
        .lines()
        .count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines (at most 300; the rest is the guide)"
    );
}
