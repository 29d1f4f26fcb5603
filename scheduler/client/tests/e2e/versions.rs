//! The client's side of versions: a reply of another protocol version, or of none (a daemon older than
//! versions), is an `unsupported_version` error naming both; a refusal keeps the daemon's code. A daemon
//! here is a socket answering one canned line.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use tessera_client::{Client, ErrorCode};

/// A client of a fake daemon that answers `reply` to one request; returns what the client got and the
/// request line the fake daemon read.
fn against(tag: &str, reply: &'static str) -> (Result<Vec<tessera_client::VgpuStatus>, tessera_client::Error>, String) {
    let dir = std::env::temp_dir().join(format!("tessera-client-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let server = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line).unwrap();
        (&stream).write_all(format!("{reply}\n").as_bytes()).unwrap();
        line
    });
    let got = Client::new(&socket).list();
    let line = server.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (got, line)
}

#[test]
fn a_reply_of_another_version_or_none_is_a_clear_error() {
    let (got, line) = against("v1", r#"{"version":1,"ok":true,"vgpus":[],"pid":7}"#);
    assert_eq!(line, "{\"version\":2,\"op\":\"list\"}\n", "the client sends its version");
    let e = got.unwrap_err();
    assert_eq!(e.code, ErrorCode::UnsupportedVersion);
    assert!(e.message.contains("protocol version 1, this client version 2"), "{e}");
    let e = against("none", r#"{"ok":true,"vgpus":[],"pid":7}"#).0.unwrap_err();
    assert_eq!(e.code, ErrorCode::UnsupportedVersion);
    assert!(e.message.contains("older than protocol versions, this client speaks version 2"), "{e}");
    let e = against("garbage", "hello").0.unwrap_err();
    assert_eq!(e.code, ErrorCode::BadReply);
}

#[test]
fn a_refusal_keeps_the_daemons_code_and_message() {
    let e = against("refused", r#"{"version":2,"ok":false,"code":"in_use","error":"busy","pid":7}"#).0.unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (ErrorCode::InUse, "busy"));
    let e = against("newer", r#"{"version":2,"ok":false,"code":"on_fire","error":"hot","pid":7}"#).0.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unknown, "a code from a newer daemon still reads");
    let ok = against("ok", r#"{"version":2,"ok":true,"vgpus":[],"pid":7,"added_later":{"x":1}}"#).0;
    assert_eq!(ok, Ok(vec![]), "fields this client does not know are ignored");
}

#[test]
fn no_daemon_is_unavailable() {
    let e = Client::new("/nonexistent/tessera.sock").list().unwrap_err();
    assert_eq!(e.code, ErrorCode::Unavailable);
    assert!(e.message.contains("no Tessera daemon"), "{e}");
}
