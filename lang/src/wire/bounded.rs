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
    vec_with_spare(deserializer, 0)
}

/// [`vec`] with room for one element more: a publication's attributes, to which its
/// broker adds `time` (without the room, every publication a client sends would be
/// copied to a larger allocation on arrival).
pub(crate) fn vec_with_room<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    vec_with_spare(deserializer, 1)
}

fn vec_with_spare<'de, D, T>(deserializer: D, spare: usize) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct BoundedVec<T>(PhantomData<T>, usize);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for BoundedVec<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let announced = seq.size_hint().unwrap_or(0);
            let mut out = Vec::with_capacity(announced.min(MAX_PREALLOCATED) + self.1);
            while let Some(element) = seq.next_element()? {
                out.push(element);
            }
            // Usually nothing to do: the reservation above had the room, unless the
            // sequence outgrew it.
            out.reserve_exact(self.1);
            Ok(out)
        }
    }

    deserializer.deserialize_seq(BoundedVec(PhantomData, spare))
}
