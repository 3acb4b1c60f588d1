//! The units limits are counted in: fuel, characters, files. Each parses from the
//! strings people type (`2G`, `50_000`) and prints the way it parses.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{LimitError, MIN_FUEL, MIN_RETURN_CHARS};

/// Units of wasmtime fuel: roughly one per WebAssembly instruction executed.
///
/// A fresh call of a trivial tool costs about 1.4 million units (the harness's own
/// work included); `import numpy` costs far more. When the guest runs out, it traps
/// at once and the call ends with status `out_of_fuel`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(transparent)]
pub struct Fuel(pub u64);

impl fmt::Display for Fuel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Group digits so that 2000000000 reads as 2_000_000_000.
        let digits = self.0.to_string();
        let mut out = String::with_capacity(digits.len() + digits.len() / 3);
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push('_');
            }
            out.push(c);
        }
        f.write_str(&out)
    }
}

impl FromStr for Fuel {
    type Err = LimitError;

    /// Accepts `2000000000`, `2_000_000_000`, or a suffix `k`, `M`, `G` (powers of ten);
    /// refuses less than [`MIN_FUEL`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || LimitError::Fuel(s.to_owned());
        let t = s.trim().replace('_', "");
        let (digits, scale) = match t.chars().last() {
            Some('k' | 'K') => (&t[..t.len() - 1], 1_000),
            Some('M') => (&t[..t.len() - 1], 1_000_000),
            Some('G') => (&t[..t.len() - 1], 1_000_000_000),
            _ => (t.as_str(), 1),
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        let fuel = Fuel(n.checked_mul(scale).ok_or_else(bad)?);
        if fuel < MIN_FUEL {
            return Err(bad());
        }
        Ok(fuel)
    }
}

/// A number of Unicode characters (Python `str` length), used for `return_char_limit`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(transparent)]
pub struct CharLimit(pub u32);

impl fmt::Display for CharLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} characters", self.0)
    }
}

impl FromStr for CharLimit {
    type Err = LimitError;

    /// Accepts a positive whole number such as `50000` or `50_000`, and the displayed
    /// form, `50000 characters`; refuses less than [`MIN_RETURN_CHARS`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let digits = t.strip_suffix("characters").unwrap_or(t).trim();
        match digits.replace('_', "").parse::<u32>().map(CharLimit) {
            Ok(n) if n >= MIN_RETURN_CHARS => Ok(n),
            _ => Err(LimitError::Chars(s.to_owned())),
        }
    }
}

/// A number of files: descriptors open at once, or files and folders created.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(transparent)]
pub struct FileCount(pub u32);

impl fmt::Display for FileCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for FileCount {
    type Err = LimitError;

    /// Accepts a whole number such as `256` or `1_000`, zero included: see
    /// `parse_open_files` for the count that may not be zero.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_count(s).map(FileCount)
    }
}

/// A whole number such as `256` or `1_000`, zero included.
fn parse_count(s: &str) -> Result<u32, LimitError> {
    s.trim()
        .replace('_', "")
        .parse::<u32>()
        .map_err(|_| LimitError::Count(s.to_owned()))
}

/// A number of outbound HTTP requests.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(transparent)]
pub struct RequestCount(pub u32);

impl fmt::Display for RequestCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for RequestCount {
    type Err = LimitError;

    /// Accepts a whole number such as `32`, zero included (no requests allowed).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_count(s).map(RequestCount)
    }
}
