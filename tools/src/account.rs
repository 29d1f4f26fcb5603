//! User accounts named on the command line (`tessera vgpu create --user`): resolved through the system's
//! account database, so a typo or a uid without an account is refused rather than given a vGPU.

/// Why a user named on the command line is refused.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    /// A number too large for a uid.
    #[error("uid {0} is out of range")]
    UidOutOfRange(String),
    /// The uid that stands for "no user" (-1) in the system calls that take a uid.
    #[error("uid {} stands for no user (-1); give an existing account", u32::MAX)]
    NoUserUid,
    /// A name with a NUL byte in it.
    #[error("{0:?} is not a user name")]
    NotAName(String),
    /// Looking a uid up failed (not merely found nothing).
    #[error("uid {uid}: cannot look the account up: {source}")]
    UidLookup {
        /// The uid looked up.
        uid: u32,
        /// What the lookup said.
        #[source]
        source: std::io::Error,
    },
    /// Looking a name up failed (not merely found nothing).
    #[error("user {name:?}: cannot look the account up: {source}")]
    NameLookup {
        /// The name looked up.
        name: String,
        /// What the lookup said.
        #[source]
        source: std::io::Error,
    },
    /// No account has that name or uid.
    #[error("there is no user {0:?}; give the name or uid of an existing account")]
    NoSuchUser(String),
}

/// The uid of the account `text` names, by name or by number, resolved with `getpwnam_r`/`getpwuid_r`:
/// a uid must belong to an existing account, and is never 4294967295, which stands for "no user" (-1) in
/// the system calls that take a uid.
pub fn resolve(text: &str) -> Result<u32, AccountError> {
    let uid = if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let uid: u32 = text.parse().map_err(|_| AccountError::UidOutOfRange(text.to_string()))?;
        if uid == u32::MAX {
            return Err(AccountError::NoUserUid);
        }
        account(Lookup::Uid(uid)).map_err(|source| AccountError::UidLookup { uid, source })?
    } else {
        let name = std::ffi::CString::new(text).map_err(|_| AccountError::NotAName(text.to_string()))?;
        account(Lookup::Name(&name)).map_err(|source| AccountError::NameLookup { name: text.to_string(), source })?
    };
    uid.ok_or_else(|| AccountError::NoSuchUser(text.to_string()))
}

/// What [`account`] looks up.
enum Lookup<'a> {
    Uid(u32),
    Name(&'a std::ffi::CStr),
}

/// The uid of the account `what` names, `None` when there is none; the system's error when the lookup
/// itself failed.
fn account(what: Lookup<'_>) -> Result<Option<u32>, std::io::Error> {
    let mut buf = vec![0 as libc::c_char; 1024];
    loop {
        // SAFETY: passwd is plain data; an all-zero value is valid for the lookup to overwrite.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: the record, the buffer of `buf.len()` bytes the record's
        // strings go to, the result pointer, and a NUL-terminated name.
        let rc = unsafe {
            match what {
                Lookup::Uid(uid) => libc::getpwuid_r(uid, &mut entry, buf.as_mut_ptr(), buf.len(), &mut found),
                Lookup::Name(name) => {
                    libc::getpwnam_r(name.as_ptr(), &mut entry, buf.as_mut_ptr(), buf.len(), &mut found)
                }
            }
        };
        match rc {
            0 if found.is_null() => return Ok(None),
            0 => return Ok(Some(entry.pw_uid)),
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            // "Not found" comes back as one of these from some name services rather than as no entry.
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(None),
            e => return Err(std::io::Error::from_raw_os_error(e)),
        }
    }
}
