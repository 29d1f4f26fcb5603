//! Who made a request: the kernel's credentials of the connection it came on (`SO_PEERCRED`), never
//! anything the client wrote. The server reads them once per connection and hands them to
//! [`crate::vgpus::manager::Manager::handle_from`], which decides what the caller may do and records it in the
//! audit log.

/// The credentials of the process at the other end of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Its pid, in the daemon's pid namespace (the kernel translates it).
    pub pid: u32,
    /// Its effective uid.
    pub uid: u32,
    /// Its effective gid.
    pub gid: u32,
}

impl Caller {
    /// The daemon itself (requests it makes of its own, e.g. the metrics endpoint's `stats`).
    pub fn daemon() -> Caller {
        // SAFETY: getuid/getgid cannot fail and have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Caller { pid: std::process::id(), uid, gid }
    }
}
