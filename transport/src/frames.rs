//! Frames on QUIC streams: [`read_frame`] buffers bytes into a [`FrameReader`] until a frame
//! is whole; [`write_frame`] encodes and sends one.

use padres_lang::wire::codec::FrameReader;
use padres_lang::wire::{self, DecodeError, Frame};

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The peer sent bytes that are not a valid frame (or one over the size limit).
    #[error(transparent)]
    Invalid(#[from] DecodeError),
    /// The frame to send cannot be encoded (too large, say).
    #[error(transparent)]
    Encode(#[from] wire::EncodeError),
    /// The stream failed.
    #[error("stream: {0}")]
    Stream(String),
}

/// The next frame from `recv`, or `None` once the peer has finished the stream.
pub async fn read_frame(
    recv: &mut quinn::RecvStream,
    reader: &mut FrameReader,
) -> Result<Option<Frame>, FrameError> {
    loop {
        if let Some(frame) = reader.next_frame()? {
            return Ok(Some(frame));
        }
        // Chunks as quinn holds them: no buffer of ours to zero and copy through.
        match recv.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => reader.push(&chunk.bytes),
            Ok(None) => return Ok(None),
            Err(e) => return Err(FrameError::Stream(e.to_string())),
        }
    }
}

/// Encodes `frame` (at most `max_frame` bytes) and writes it to `send`.
pub async fn write_frame(
    send: &mut quinn::SendStream,
    frame: &Frame,
    max_frame: usize,
) -> Result<(), FrameError> {
    let mut bytes = Vec::new();
    wire::encode(frame, max_frame, &mut bytes)?;
    send.write_all(&bytes).await.map_err(|e| FrameError::Stream(e.to_string()))
}

/// Finishes `send` and gives its last frames (an error's explanation, say) up to a second
/// to reach the peer before the connection is dropped with it.
pub async fn finish(mut send: quinn::SendStream) {
    if send.finish().is_ok() {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), send.stopped()).await;
    }
}
