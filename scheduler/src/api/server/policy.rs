//! Who may ask what of the daemon: the one place the socket decides it. The daemon's own user and root may
//! make every request; anyone may make a `join` (a tenant of a `--user` vGPU vouching for its own process
//! slot, which the daemon checks against the connection's credentials, see [`crate::tenants::joins`]) and nothing
//! else.

use crate::api::caller::Caller;
use crate::api::protocol::Request;

/// The permission rules of one daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The daemon's effective uid.
    owner: u32,
}

impl Policy {
    /// The rules of a daemon running as `owner`.
    pub fn new(owner: u32) -> Policy {
        Policy { owner }
    }

    /// The rules of this process.
    pub fn of_this_process() -> Policy {
        Policy::new(Caller::daemon().uid)
    }

    /// Whether `uid` is the daemon's own user or root: the users the socket keeps room for, whose
    /// connections are counted apart from everyone else's (see [`super::admission`]).
    pub fn privileged(&self, uid: u32) -> bool {
        uid == self.owner || uid == 0
    }

    /// Whether `caller` may make `request`. A caller refused one request is refused the connection too.
    pub fn may(&self, caller: &Caller, request: &Request) -> bool {
        self.privileged(caller.uid) || matches!(request, Request::Join { .. })
    }

    /// Whether `caller` hears why a line it sent is not a request (a caller who may make no request at
    /// all is told only that it may not).
    pub fn told_why_malformed(&self, caller: &Caller) -> bool {
        self.privileged(caller.uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_and_root_may_make_requests_and_no_one_else() {
        let policy = Policy::new(1000);
        let who = |uid| Caller { pid: 7, uid, gid: uid };
        for (uid, allowed) in [(1000, true), (0, true), (1001, false), (65534, false)] {
            assert_eq!(policy.may(&who(uid), &Request::List), allowed, "uid {uid}");
            assert_eq!(policy.privileged(uid), allowed, "uid {uid}");
            assert_eq!(policy.told_why_malformed(&who(uid)), allowed, "uid {uid}");
        }
        assert!(Policy::new(0).privileged(0) && !Policy::new(0).privileged(1000));
        let join = Request::Join { name: "a".into(), slot: 0 };
        assert!(policy.may(&who(65534), &join), "anyone may ask to join: the daemon checks the slot names them");
    }
}
