//! Names of attributes, brokers and variables.
//!
//! A name is an identifier (`[A-Za-z_][A-Za-z0-9_.-]*`, at most [`Name::MAX_LEN`] bytes)
//! behind an `Arc`, so the many copies that routing tables keep cost a pointer each.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::InvalidMessage;

/// A validated identifier: an attribute, broker or variable name.
#[derive(Clone, Eq, PartialOrd, Ord, Serialize)]
#[serde(into = "Arc<str>")]
pub struct Name(Arc<str>);

/// Equal texts; copies of one name (the usual case in routing tables) are told equal by
/// their pointer, without comparing the text (`Arc<str>` itself always compares it).
impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || same_text(&self.0, &other.0)
    }
}

/// The text's hash, as `str`'s (a name is looked up by its text: `Borrow<str>`).
impl std::hash::Hash for Name {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

/// Names decoded or parsed recently on this thread. Publications repeat the same few
/// attribute names, so such a name is usually a reference count away instead of an
/// allocation, and equal names are usually told equal by their pointer.
const RECENT_NAMES: usize = 1024;

thread_local! {
    static RECENT: std::cell::RefCell<std::collections::HashSet<Name>> =
        std::cell::RefCell::new(std::collections::HashSet::new());
}

impl Name {
    /// [`Name::new`], sharing the text of an equal name decoded or parsed before on this
    /// thread.
    pub fn interned(text: &str) -> Result<Self, InvalidMessage> {
        // Not shared when the thread's set is gone (text parsed while the thread ends).
        let shared = RECENT.try_with(|recent| {
            let mut recent = recent.borrow_mut();
            if let Some(name) = recent.get(text) {
                return Ok(name.clone());
            }
            let name = Self::new(text)?;
            if recent.len() >= RECENT_NAMES {
                recent.clear();
            }
            recent.insert(name.clone());
            Ok(name)
        });
        shared.unwrap_or_else(|_| Self::new(text))
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = Name;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an identifier")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Name, E> {
                Name::interned(text).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Text)
    }
}

impl Name {
    /// The longest name accepted, in bytes.
    pub const MAX_LEN: usize = 255;

    /// Checks `text` and makes a name of it.
    pub fn new(text: &str) -> Result<Self, InvalidMessage> {
        if is_identifier(text) {
            Ok(Self(Arc::from(text)))
        } else {
            Err(InvalidMessage::BadName(text.chars().take(64).collect()))
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// True for the first character of an identifier.
pub(crate) fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

/// True for the characters after the first.
pub(crate) fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

pub(crate) fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    text.len() <= Name::MAX_LEN && chars.next().is_some_and(is_ident_start) && chars.all(is_ident_char)
}

impl TryFrom<String> for Name {
    type Error = InvalidMessage;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::new(&text)
    }
}

impl TryFrom<&str> for Name {
    type Error = InvalidMessage;
    fn try_from(text: &str) -> Result<Self, Self::Error> {
        Self::new(text)
    }
}

impl From<Name> for Arc<str> {
    fn from(name: Name) -> Self {
        name.0
    }
}

// Hashing and equality are those of the text, so maps keyed by `Name` can be looked up by
// `&str`.
impl std::borrow::Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        same_text(&self.0, other)
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        same_text(&self.0, other)
    }
}

/// Equal texts. Names are short, and comparing them as slices called `memcmp` for every
/// pair of equal length, a visible share of looking a publication's values up by name:
/// up to 16 bytes, the first and last bytes (or words) cover the text between them.
#[inline]
fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word4 = |s: &[u8], at: usize| u32::from_ne_bytes([s[at], s[at + 1], s[at + 2], s[at + 3]]);
    let word8 = |s: &[u8], at: usize| {
        u64::from_ne_bytes([
            s[at],
            s[at + 1],
            s[at + 2],
            s[at + 3],
            s[at + 4],
            s[at + 5],
            s[at + 6],
            s[at + 7],
        ])
    };
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=8 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        9..=16 => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_equal_text_exactly_at_every_length() {
        for n in 0..40 {
            let text: String = (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            assert!(same_text(&text, &text.clone()), "{text:?}");
            for at in 0..n {
                let mut other = text.clone().into_bytes();
                other[at] = b'Z';
                let other = String::from_utf8(other).expect("ascii");
                assert!(!same_text(&text, &other), "{text:?} vs {other:?}");
            }
            assert!(!same_text(&text, &format!("{text}a")));
        }
    }

    #[test]
    fn decoded_names_are_checked_and_shared() {
        let a = Name::interned("price").expect("valid");
        let b = Name::interned("price").expect("valid");
        assert!(Arc::ptr_eq(&a.0, &b.0), "the second decode shares the first's text");
        assert!(Name::interned("no spaces").is_err());
    }

    #[test]
    fn identifiers() {
        for ok in ["class", "job_status", "_x", "a.b-c", "B1"] {
            assert!(Name::new(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1a", "a b", "a,b", "'a'", "$x", &"a".repeat(256)] {
            assert!(Name::new(bad).is_err(), "{bad}");
        }
    }
}
