//! The daemon's API: [`server`] answers JSON lines over a unix socket ([`protocol`]: reading a request
//! line; the wire types and the client are the `tessera-client` crate's), knowing who asked from the
//! connection ([`caller`]); [`stats`] answers the `stats` request; [`accept`]: what an accept error means
//! to both listeners (the socket and the metrics endpoint).

pub(crate) mod accept;
pub(crate) mod caller;
pub(crate) mod protocol;
pub(crate) mod server;
pub(crate) mod stats;
