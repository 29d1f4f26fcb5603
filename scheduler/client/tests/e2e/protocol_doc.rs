//! `docs/protocol.md` cannot fall behind the code: every request kind and every error code must appear in it.

use tessera_client::{ErrorCode, Request};

fn doc() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/protocol.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_request_kind_is_documented_with_an_example() {
    let doc = doc();
    for request in Request::examples() {
        let op = request.op();
        assert!(doc.contains(&format!("### {op}\n")), "docs/protocol.md has no section for request {op:?}");
        let example = format!(r#"{{"version":{},"op":"{op}""#, tessera_client::VERSION);
        assert!(doc.contains(&example), "docs/protocol.md has no example of request {op:?} ({example})");
    }
}

#[test]
fn every_error_code_is_documented() {
    let doc = doc();
    for code in ErrorCode::ALL {
        assert!(doc.contains(&format!("| `{}`", code.as_str())), "docs/protocol.md does not list {code:?}");
    }
    assert!(doc.contains(&format!("Protocol version: **{}**", tessera_client::VERSION)));
}
