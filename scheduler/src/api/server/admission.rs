//! How many connections the socket holds at once, and from whom: a cap per user, a cap on all users
//! other than the daemon's own and root together, and room of its own for those two. So one user cannot
//! take the daemon's descriptors (and with them every other user's service), and the owner is served
//! whatever the others do. The caps come from the daemon's descriptor limit (`ulimit -n`): half of it
//! stays for the daemon's own files.

use super::policy::Policy;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Connections one user other than the daemon's and root may hold at once (fewer under a low `ulimit -n`).
pub const PER_USER: usize = 64;
/// The most connections either class (the daemon's user and root; everyone else) may hold, whatever the
/// descriptor limit: each may buffer a request line of up to 64 KiB, so this bounds memory too.
pub const MOST: usize = 1024;
/// The fewest connections either class is given, however low the descriptor limit.
pub const FEWEST: usize = 4;

/// The caps, see the module's documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Connections from one user other than the daemon's and root.
    pub per_user: usize,
    /// Connections from all users other than the daemon's and root together.
    pub others: usize,
    /// Connections from the daemon's user and root together: room the others cannot take.
    pub privileged: usize,
}

impl Caps {
    /// The caps of a daemon allowed `descriptors` open files: a quarter of them for each class (within
    /// [`FEWEST`]..=[`MOST`]), the half left for its region, state, `/proc` reads and metrics endpoint.
    pub fn for_descriptors(descriptors: u64) -> Caps {
        let quarter = usize::try_from(descriptors / 4).unwrap_or(usize::MAX).clamp(FEWEST, MOST);
        Caps { per_user: PER_USER.min(quarter), others: quarter, privileged: quarter }
    }

    /// The caps of this process, from its soft `RLIMIT_NOFILE` (1024, a common default, if unreadable).
    pub fn of_this_process() -> Caps {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes one rlimit into the buffer we pass.
        let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
        Caps::for_descriptors(if read { limit.rlim_cur } else { 1024 })
    }
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its user holds [`Caps::per_user`] connections already.
    User {
        /// The user refused.
        uid: u32,
        /// Connections one user may hold.
        cap: usize,
    },
    /// Users other than the daemon's and root hold [`Caps::others`] connections already.
    Others {
        /// Connections those users may hold together.
        cap: usize,
    },
    /// The daemon's user and root hold [`Caps::privileged`] connections already.
    Privileged {
        /// Connections the daemon's user and root may hold together.
        cap: usize,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::User { uid, cap } => {
                write!(
                    f,
                    "too many connections from uid {uid} (at most {cap} at once per user); close some and try again"
                )
            }
            Refusal::Others { cap } => write!(
                f,
                "too many connections from users other than the daemon's and root (at most {cap} at once); try again \
                 later"
            ),
            Refusal::Privileged { cap } => write!(
                f,
                "too many connections from the daemon's user and root (at most {cap} at once); close some and try \
                 again"
            ),
        }
    }
}

/// The connections held now, by class and user; pure bookkeeping (see [`Admission`] for the shared one).
#[derive(Debug)]
pub struct Counts {
    caps: Caps,
    policy: Policy,
    privileged: usize,
    others: usize,
    per_user: HashMap<u32, usize>,
}

impl Counts {
    /// No connections yet.
    pub fn new(caps: Caps, policy: Policy) -> Counts {
        Counts { caps, policy, privileged: 0, others: 0, per_user: HashMap::new() }
    }

    /// Counts a new connection from `uid`, or says why it is refused (nothing counted then).
    pub fn admit(&mut self, uid: u32) -> Result<(), Refusal> {
        if self.policy.privileged(uid) {
            if self.privileged >= self.caps.privileged {
                return Err(Refusal::Privileged { cap: self.caps.privileged });
            }
            self.privileged += 1;
            return Ok(());
        }
        let held = self.per_user.get(&uid).copied().unwrap_or(0);
        if held >= self.caps.per_user {
            return Err(Refusal::User { uid, cap: self.caps.per_user });
        }
        if self.others >= self.caps.others {
            return Err(Refusal::Others { cap: self.caps.others });
        }
        self.others += 1;
        self.per_user.insert(uid, held + 1);
        Ok(())
    }

    /// Forgets a connection from `uid` that [`Counts::admit`] counted.
    pub fn release(&mut self, uid: u32) {
        if self.policy.privileged(uid) {
            self.privileged = self.privileged.saturating_sub(1);
            return;
        }
        self.others = self.others.saturating_sub(1);
        if let Some(held) = self.per_user.get_mut(&uid) {
            *held -= 1;
            if *held == 0 {
                // No entry per user who once connected: the map stays as small as what is held.
                self.per_user.remove(&uid);
            }
        }
    }

    /// Connections held now: (the daemon's user and root, everyone else, users with one or more).
    #[cfg(test)] // Only the tests use it.
    pub fn held(&self) -> (usize, usize, usize) {
        (self.privileged, self.others, self.per_user.len())
    }
}

/// The counts shared by the accept loop and the connections.
#[derive(Clone, Debug)]
pub struct Admission(Arc<Mutex<Counts>>);

impl Admission {
    /// No connections yet.
    pub fn new(caps: Caps, policy: Policy) -> Admission {
        Admission(Arc::new(Mutex::new(Counts::new(caps, policy))))
    }

    /// Admits a connection from `uid`: the ticket gives its place back when dropped.
    pub fn admit(&self, uid: u32) -> Result<Ticket, Refusal> {
        self.counts().admit(uid)?;
        Ok(Ticket { admission: self.clone(), uid })
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        // The counts are consistent whatever panicked while holding them (each change is one statement).
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A place held by one admitted connection.
#[derive(Debug)]
pub struct Ticket {
    admission: Admission,
    uid: u32,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.counts().release(self.uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: u32 = 1000;

    #[test]
    fn caps_follow_the_descriptor_limit_within_bounds() {
        assert_eq!(Caps::for_descriptors(1024), Caps { per_user: 64, others: 256, privileged: 256 });
        assert_eq!(Caps::for_descriptors(64), Caps { per_user: 16, others: 16, privileged: 16 });
        assert_eq!(Caps::for_descriptors(3), Caps { per_user: 4, others: 4, privileged: 4 });
        assert_eq!(Caps::for_descriptors(u64::MAX), Caps { per_user: 64, others: 1024, privileged: 1024 });
        let c = Caps::of_this_process();
        assert!(c.privileged >= FEWEST && c.others + c.privileged <= 2 * MOST, "{c:?}");
    }

    #[test]
    fn one_user_is_capped_and_the_owner_and_root_keep_their_room() {
        let caps = Caps { per_user: 3, others: 5, privileged: 2 };
        let mut counts = Counts::new(caps, Policy::new(OWNER));
        for _ in 0..3 {
            counts.admit(65534).unwrap();
        }
        assert_eq!(counts.admit(65534), Err(Refusal::User { uid: 65534, cap: 3 }));
        // Another user still gets in, until all others together reach their cap.
        counts.admit(1001).unwrap();
        counts.admit(1002).unwrap();
        assert_eq!(counts.admit(1003), Err(Refusal::Others { cap: 5 }));
        // The owner and root are counted apart: the others' caps do not touch them.
        counts.admit(OWNER).unwrap();
        counts.admit(0).unwrap();
        assert_eq!(counts.admit(OWNER), Err(Refusal::Privileged { cap: 2 }));
        assert_eq!(counts.held(), (2, 5, 3));
        // Places come back as connections end, and a user holding none is forgotten.
        counts.release(65534);
        counts.admit(1003).unwrap();
        counts.release(1001);
        counts.release(0);
        assert_eq!(counts.held(), (1, 4, 3));
        counts.admit(0).unwrap();
        let message = Refusal::User { uid: 65534, cap: 3 }.to_string();
        assert!(message.contains("uid 65534") && message.contains("at most 3"), "{message}");
    }

    #[test]
    fn a_ticket_gives_its_place_back_when_dropped() {
        let admission = Admission::new(Caps { per_user: 1, others: 1, privileged: 1 }, Policy::new(OWNER));
        let ticket = admission.admit(7).unwrap();
        assert!(admission.admit(7).is_err());
        let root = admission.admit(0).unwrap();
        drop(ticket);
        let again = admission.admit(7).unwrap();
        assert_eq!(admission.counts().held(), (1, 1, 1));
        drop((again, root));
        assert_eq!(admission.counts().held(), (0, 0, 0));
    }
}
