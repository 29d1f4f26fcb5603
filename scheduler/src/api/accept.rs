//! What an error of `accept(2)` means for a listener, decided in one place for the daemon's two (the API
//! socket and the metrics endpoint): a shortage of descriptors or memory that passes, an error of the
//! connection at hand (gone before it was accepted, or a network error the kernel reports on it), or an
//! error of the listener itself.

/// The meaning of an accept error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Out of descriptors or memory: the pending connection stays queued until some are freed.
    Shortage,
    /// The connection at hand failed, or a signal came: the next one is accepted as usual (accept(2)
    /// says to treat the network errors it passes on like `EAGAIN`).
    Passing,
    /// The listener itself is broken.
    Broken,
}

impl Failure {
    /// What `e`, returned by `accept`, means.
    pub fn of(e: &std::io::Error) -> Failure {
        match e.raw_os_error() {
            Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => Failure::Shortage,
            Some(
                libc::EINTR
                | libc::ECONNABORTED
                | libc::EPROTO
                | libc::EAGAIN
                | libc::EPERM
                | libc::ETIMEDOUT
                | libc::ENETDOWN
                | libc::ENOPROTOOPT
                | libc::EHOSTDOWN
                | libc::ENONET
                | libc::EHOSTUNREACH
                | libc::EOPNOTSUPP
                | libc::ENETUNREACH,
            ) => Failure::Passing,
            _ => Failure::Broken,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortages_passing_errors_and_broken_listeners_are_told_apart() {
        let of = |errno| Failure::of(&std::io::Error::from_raw_os_error(errno));
        assert_eq!(of(libc::EMFILE), Failure::Shortage);
        assert_eq!(of(libc::ECONNABORTED), Failure::Passing);
        assert_eq!(of(libc::EBADF), Failure::Broken);
        assert_eq!(of(libc::EINVAL), Failure::Broken);
    }
}
