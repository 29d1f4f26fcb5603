//! C strings across the ABI: reading the caller's NUL-terminated arguments and writing into the
//! fixed-size `char` arrays of the structs (truncated, always NUL-terminated).

use crate::guard::Fail;
use std::ffi::{CStr, c_char};

/// The caller's string argument `what`: `INVALID_PARAM` when NULL, empty or not UTF-8.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that stays valid through the call.
pub unsafe fn arg(p: *const c_char, what: &str) -> Result<String, Fail> {
    if p.is_null() {
        return Err(Fail::invalid(format!("{what} is NULL")));
    }
    // SAFETY: the caller's NUL-terminated string (the function's contract).
    let s = unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| Fail::invalid(format!("{what} is not UTF-8")))?;
    if s.is_empty() {
        return Err(Fail::invalid(format!("{what} is empty")));
    }
    Ok(s.to_string())
}

/// Writes `s` into `out`, truncated to fit with its NUL (at a character boundary).
pub fn put(out: &mut [c_char], s: &str) {
    out.fill(0);
    let mut end = s.len().min(out.len().saturating_sub(1));
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    for (o, b) in out.iter_mut().zip(&s.as_bytes()[..end]) {
        *o = *b as c_char;
    }
}

/// The string in a fixed-size array (up to its first NUL).
pub fn get(field: &[c_char]) -> String {
    let bytes: Vec<u8> = field.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_truncates_and_terminates() {
        let mut buf = [1 as c_char; 4];
        put(&mut buf, "abcdef");
        assert_eq!(get(&buf), "abc");
        assert_eq!(buf[3], 0);
        put(&mut buf, "é€");
        assert_eq!(get(&buf), "é");
    }
}
