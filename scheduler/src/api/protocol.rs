//! What the daemon says over the socket (`docs/protocol.md`): the wire types of [`tessera_client::wire`],
//! shared with every client, and the daemon's reading of a request line, version first.

use serde_json::Value;
pub use tessera_client::wire::{DEFRAG_TIMEOUT, MAX_LINE, PagerReport, Reply, Request, VERSION, VgpuStatus};
pub use tessera_client::{Error, ErrorCode};

/// Reads one request line. Its protocol version is checked before anything else in it, so that a client
/// of another version hears about the version rather than about a field it got wrong; only `version`
/// requests are read whatever version they carry.
pub fn parse(line: &str) -> Result<Request, Error> {
    let bad = |why: String| Error::new(ErrorCode::BadRequest, format!("malformed request: {why}"));
    let value: Value = serde_json::from_str(line).map_err(|e| bad(format!("not JSON ({e})")))?;
    let Value::Object(fields) = &value else { return Err(bad("not a JSON object".into())) };
    let asks_version = fields.get("op").and_then(Value::as_str) == Some("version");
    if !asks_version {
        match fields.get("version") {
            None => {
                return Err(Error::new(
                    ErrorCode::UnsupportedVersion,
                    format!(
                        "the request carries no protocol version (a client older than protocol versions); this daemon \
                         speaks version {VERSION}: use the tessera of the daemon's release"
                    ),
                ));
            }
            Some(Value::Number(n)) if n.as_u64() == Some(VERSION as u64) => {}
            Some(Value::Number(n)) => {
                return Err(Error::new(
                    ErrorCode::UnsupportedVersion,
                    format!(
                        "the request is of protocol version {n}, this daemon speaks version {VERSION}: use the \
                         tessera of the daemon's release, or restart the daemon with the client's"
                    ),
                ));
            }
            Some(other) => return Err(bad(format!("\"version\" is {other}, not a number"))),
        }
    }
    serde_json::from_value(value).map_err(|e| bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_of_another_version_or_none_gets_the_version_error() {
        assert_eq!(parse(r#"{"version":2,"op":"list"}"#), Ok(Request::List));
        for (line, says) in [
            (r#"{"op":"list"}"#, "carries no protocol version"),
            (r#"{"version":1,"op":"list"}"#, "protocol version 1, this daemon speaks version 2"),
            (r#"{"version":3,"op":"list"}"#, "protocol version 3, this daemon speaks version 2"),
            (r#"{"version":0,"op":"explode","name":7}"#, "protocol version 0, this daemon speaks version 2"),
        ] {
            let e = parse(line).unwrap_err();
            assert_eq!(e.code, ErrorCode::UnsupportedVersion, "{line}");
            assert!(e.message.contains(says), "{line}: {e}");
        }
        assert_eq!(parse(r#"{"op":"version"}"#), Ok(Request::Version), "answered whatever the version");
        assert_eq!(parse(r#"{"version":9,"op":"version"}"#), Ok(Request::Version));
        for line in ["nonsense", "[1]", r#"{"version":"2","op":"list"}"#, r#"{"version":2,"op":"explode"}"#] {
            assert_eq!(parse(line).unwrap_err().code, ErrorCode::BadRequest, "{line}");
        }
    }
}
