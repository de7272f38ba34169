//! Sequence decoding that never trusts a length prefix for its allocation.
//!
//! serde's own `Vec` preallocates up to 1 MiB from the announced length; a frame of a few
//! bytes announcing 2^60 elements would get that much. Here the capacity grows only with
//! elements actually decoded.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};

/// At most this many elements are reserved ahead of decoding them.
const MAX_PREALLOCATED: usize = 16;

/// Deserializes a `Vec<T>`, reserving at most a few elements ahead (use with
/// `#[serde(deserialize_with = "crate::wire::bounded::vec")]`).
pub(crate) fn vec<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct BoundedVec<T>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for BoundedVec<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(MAX_PREALLOCATED));
            while let Some(element) = seq.next_element()? {
                out.push(element);
            }
            Ok(out)
        }
    }

    deserializer.deserialize_seq(BoundedVec(PhantomData))
}
