//! The client crate's end-to-end tests, one binary: `docs/protocol.md` against the wire types, and
//! replies of daemons of other versions.

mod protocol_doc;
mod versions;
