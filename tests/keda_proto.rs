//! The committed gRPC code of the KEDA external scaler is what
//! `proto/externalscaler.proto` generates: protox parses the file (pure
//! Rust, no protoc) and tonic-prost-build writes the server
//! (src/monitor/keda/externalscaler.rs) and the client the tests use
//! (tests/keda/externalscaler.rs) into a temporary directory; each must
//! equal the committed file byte for byte. With
//! `FRESH_CONSUMER_REGENERATE=1` the test rewrites the committed files
//! instead (then review the diff and commit it).

use std::path::{Path, PathBuf};

/// Generates one side (server or client) into `out` and returns the text.
fn generate(out: &Path, server: bool) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fds = protox::compile(["externalscaler.proto"], [root.join("proto")])
        .expect("proto/externalscaler.proto parses");
    std::fs::create_dir_all(out).unwrap();
    tonic_prost_build::configure()
        .build_server(server)
        .build_client(!server)
        .build_transport(!server)
        // KEDA's optional StreamMetricSpec (and any RPC a later copy of
        // the contract adds) answers Unimplemented unless implemented.
        .generate_default_stubs(true)
        .emit_rerun_if_changed(false)
        .out_dir(out)
        .compile_fds(fds)
        .expect("tonic-prost-build generates the code");
    let text = std::fs::read_to_string(out.join("externalscaler.rs")).unwrap();
    let who = if server {
        "the server side, for src/monitor/keda.rs"
    } else {
        "the client side, for tests/keda_scaler.rs"
    };
    format!(
        "// @generated from proto/externalscaler.proto by tests/keda_proto.rs\n// (protox + tonic-prost-build): {who}. Do not edit; regenerate with\n// FRESH_CONSUMER_REGENERATE=1 cargo test --test keda_proto\n{text}"
    )
}

#[test]
fn committed_grpc_code_is_what_the_proto_generates() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tmp =
        std::env::temp_dir().join(format!("fresh-consumer-keda-proto-{}", std::process::id()));
    let regenerate = std::env::var_os("FRESH_CONSUMER_REGENERATE").is_some();
    let mut stale = Vec::new();
    for (server, committed) in [
        (true, root.join("src/monitor/keda/externalscaler.rs")),
        (false, root.join("tests/keda/externalscaler.rs")),
    ] {
        let fresh = generate(&tmp.join(if server { "server" } else { "client" }), server);
        if regenerate {
            std::fs::write(&committed, &fresh).unwrap();
        } else if std::fs::read_to_string(&committed).ok().as_deref() != Some(fresh.as_str()) {
            stale.push(committed.display().to_string());
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(
        stale.is_empty(),
        "{stale:?} differ from what proto/externalscaler.proto generates: run FRESH_CONSUMER_REGENERATE=1 cargo test --test keda_proto and commit the result"
    );
}
