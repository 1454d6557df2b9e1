//! The README's first code block is `examples/minimal.rs`, to the letter,
//! so the example CI runs (`tests/minimal_example.rs`) is the one a reader
//! copies.

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
