//! Scenario options: `--name value` or `--name=value`, checked against what the scenario accepts.

use crate::fail::{Failure, Outcome};
use std::collections::HashMap;
use std::str::FromStr;
use tessera_ffi::units::{parse_duration_ns, parse_size};

/// The options given to one scenario.
#[derive(Debug, Default)]
pub struct Args {
    values: HashMap<String, String>,
}

impl Args {
    /// Parses `items`, rejecting options not in `allowed` and options without a value.
    pub fn parse(items: &[String], allowed: &[&str]) -> Outcome<Args> {
        let mut values = HashMap::new();
        let mut it = items.iter();
        while let Some(item) = it.next() {
            let Some(name) = item.strip_prefix("--") else {
                return Err(Failure::new(format!("unexpected argument {item:?}; options look like --name value")));
            };
            let (name, value) = match name.split_once('=') {
                Some((n, v)) => (n.to_string(), v.to_string()),
                None => {
                    let v = it.next().ok_or_else(|| Failure::new(format!("--{name} needs a value")))?;
                    (name.to_string(), v.clone())
                }
            };
            if !allowed.contains(&name.as_str()) {
                return Err(Failure::new(format!("unknown option --{name}; this scenario accepts {allowed:?}")));
            }
            values.insert(name, value);
        }
        Ok(Args { values })
    }

    /// The raw text of an option.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    fn parsed<T, E: std::fmt::Display>(
        &self,
        name: &str,
        default: T,
        parse: impl Fn(&str) -> Result<T, E>,
    ) -> Outcome<T> {
        match self.text(name) {
            None => Ok(default),
            Some(t) => parse(t).map_err(|e| Failure::new(format!("--{name}: {e}"))),
        }
    }

    /// A number (`--count 10`, `--seconds 2.5`).
    pub fn number<T: FromStr>(&self, name: &str, default: T) -> Outcome<T> {
        self.parsed(name, default, |t| t.trim().parse().map_err(|_| format!("{t:?} is not a valid number")))
    }

    /// A byte size (`--bytes 3GiB`).
    pub fn size(&self, name: &str, default: u64) -> Outcome<u64> {
        self.parsed(name, default, parse_size)
    }

    /// A duration in nanoseconds (`--ns 20ms`, `--ns 20000000`).
    pub fn duration_ns(&self, name: &str, default: u64) -> Outcome<u64> {
        self.parsed(name, default, parse_duration_ns)
    }

    /// The device ordinal (`--device N`, default 0).
    pub fn device(&self) -> Outcome<usize> {
        self.number("device", 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(items: &[&str]) -> Outcome<Args> {
        let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
        Args::parse(&items, &["ns", "bytes", "count"])
    }

    #[test]
    fn both_forms_and_units() {
        let a = parse(&["--ns", "20ms", "--bytes=3GiB"]).unwrap();
        assert_eq!(a.duration_ns("ns", 0).unwrap(), 20_000_000);
        assert_eq!(a.size("bytes", 0).unwrap(), 3 << 30);
        assert_eq!(a.number("count", 7usize).unwrap(), 7);
        assert_eq!(a.device().unwrap(), 0);
    }

    #[test]
    fn rejects_unknown_missing_and_malformed() {
        assert!(parse(&["--device", "1"]).is_err());
        assert!(parse(&["--ns"]).is_err());
        assert!(parse(&["20ms"]).is_err());
        assert!(parse(&["--count", "many"]).unwrap().number("count", 0usize).is_err());
    }
}
