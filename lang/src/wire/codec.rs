//! Length-prefixed bincode framing: the only two functions that know the encoding.
//!
//! `decode` has three outcomes besides a frame: [`DecodeError::Incomplete`] (read more
//! bytes), [`DecodeError::TooLarge`] (decided from the 4-byte prefix alone, before any body
//! is buffered) and [`DecodeError::Invalid`]. Decoding never lets a small frame ask for a
//! large allocation: bincode's byte limit is chosen from the frame's own length, and
//! sequences reserve memory only as their elements arrive.

use bincode::config::{Configuration, standard};

use super::Frame;

/// Bytes in the length prefix.
pub const PREFIX_LEN: usize = 4;
/// The default maximum frame size (body, without the prefix): 1 MiB.
pub const DEFAULT_MAX_FRAME: usize = 1 << 20;
/// No configured maximum may exceed this: 64 MiB.
pub const MAX_FRAME_CEILING: usize = 64 << 20;

/// Why bytes did not decode to a frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Need more bytes: at least `needed` in all (prefix included) to go on.
    #[error("need more bytes: {needed} in all")]
    Incomplete {
        /// Total bytes needed from the start of the frame.
        needed: usize,
    },
    /// The length prefix announces a frame over the maximum.
    #[error("frame too large: {len} bytes announced, the maximum is {max}")]
    TooLarge {
        /// The announced body length.
        len: usize,
        /// The maximum in force.
        max: usize,
    },
    /// The body is not a valid frame.
    #[error("invalid frame: {0}")]
    Invalid(String),
}

/// Why a frame could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The encoded frame is over the maximum.
    #[error("frame too large: {len} bytes, the maximum is {max}")]
    TooLarge {
        /// The encoded body length.
        len: usize,
        /// The maximum in force.
        max: usize,
    },
    /// The encoder failed.
    #[error("cannot encode frame: {0}")]
    Failed(String),
}

fn config() -> Configuration {
    standard()
}

/// Appends `frame` to `out` as prefix and body. On error `out` is left as it was.
pub fn encode(frame: &Frame, max_frame: usize, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let max = max_frame.min(MAX_FRAME_CEILING);
    let start = out.len();
    out.extend_from_slice(&[0; PREFIX_LEN]);
    if let Err(e) = bincode::serde::encode_into_std_write(frame, out, config()) {
        out.truncate(start);
        return Err(EncodeError::Failed(e.to_string()));
    }
    let len = out.len() - start - PREFIX_LEN;
    match u32::try_from(len) {
        Ok(prefix) if len <= max => {
            out[start..start + PREFIX_LEN].copy_from_slice(&prefix.to_be_bytes());
            Ok(())
        }
        _ => {
            out.truncate(start);
            Err(EncodeError::TooLarge { len, max })
        }
    }
}

/// Decodes the frame at the start of `buf`, returning it and the bytes it took.
pub fn decode(buf: &[u8], max_frame: usize) -> Result<(Frame, usize), DecodeError> {
    let max = max_frame.min(MAX_FRAME_CEILING);
    let Some(prefix) = buf.first_chunk::<PREFIX_LEN>() else {
        return Err(DecodeError::Incomplete { needed: PREFIX_LEN });
    };
    // u32 always fits in usize on the platforms we build for (32 and 64 bit).
    let len = usize::try_from(u32::from_be_bytes(*prefix)).unwrap_or(usize::MAX);
    if len > max {
        return Err(DecodeError::TooLarge { len, max });
    }
    let total = PREFIX_LEN + len;
    let Some(body) = buf.get(PREFIX_LEN..total) else {
        return Err(DecodeError::Incomplete { needed: total });
    };
    let (frame, used) = decode_body(body).map_err(|e| DecodeError::Invalid(e.to_string()))?;
    if used != len {
        return Err(DecodeError::Invalid(format!("{} trailing bytes after the frame", len - used)));
    }
    Ok((frame, total))
}

/// Bincode counts every decoded integer at its in-memory size (8 bytes for a `u64` that
/// took one varint byte), so a valid body claims at most this many bytes per body byte.
const CLAIM_PER_BODY_BYTE: usize = 8;

/// Picks bincode's allocation limit from the body length: the smallest step at least
/// [`CLAIM_PER_BODY_BYTE`] times the body. A string or byte buffer is allocated after its
/// length is claimed, so a frame of a few bytes can never allocate more than a few KiB.
fn decode_body(body: &[u8]) -> Result<(Frame, usize), bincode::error::DecodeError> {
    fn with<const LIMIT: usize>(body: &[u8]) -> Result<(Frame, usize), bincode::error::DecodeError> {
        bincode::serde::decode_from_slice(body, config().with_limit::<LIMIT>())
    }
    const K: usize = CLAIM_PER_BODY_BYTE;
    match body.len() {
        0..=1024 => with::<{ 1024 * K }>(body),
        1025..=16_384 => with::<{ 16_384 * K }>(body),
        16_385..=262_144 => with::<{ 262_144 * K }>(body),
        262_145..=4_194_304 => with::<{ 4_194_304 * K }>(body),
        _ => with::<{ MAX_FRAME_CEILING * K }>(body),
    }
}

/// Accumulates bytes from a stream and yields whole frames.
#[derive(Debug)]
pub struct FrameReader {
    buf: Vec<u8>,
    /// Where the undecoded bytes start: frames are consumed by moving this, and the
    /// buffer is compacted only when more bytes arrive, so a chunk holding many frames is
    /// not moved once per frame.
    start: usize,
    max_frame: usize,
}

impl FrameReader {
    /// A reader refusing frames over `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        Self { buf: Vec::new(), start: 0, max_frame }
    }

    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered and not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next whole frame, `Ok(None)` if more bytes are needed. After an error the
    /// stream cannot be resynchronised; close the connection.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, DecodeError> {
        match decode(&self.buf[self.start..], self.max_frame) {
            Ok((frame, used)) => {
                self.start += used;
                Ok(Some(frame))
            }
            Err(DecodeError::Incomplete { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
