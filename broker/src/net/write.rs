//! Batched writes: whatever is already queued for a peer goes out in one write.

use padres_lang::wire::{self, ErrorCode, Frame};
use padres_transport::FrameError;

/// Frames queued for one peer are encoded into one write of about this many bytes.
const WRITE_BATCH: usize = 64 * 1024;

/// Writes `first` and whatever else is already queued (`more`, up to [`WRITE_BATCH`]
/// bytes) in one write. Each frame comes with its size as counted for a queue limit; the
/// sum, and the number of frames, are returned. `encoded` is told each frame written and
/// its encoded bytes.
pub(super) async fn write_batch(
    send: &mut quinn::SendStream,
    out: &mut Vec<u8>,
    first: (Frame, usize),
    mut more: impl FnMut() -> Option<(Frame, usize)>,
    max_frame: usize,
    mut encoded: impl FnMut(&Frame, usize),
) -> Result<(usize, usize), FrameError> {
    out.clear();
    let (mut size, mut frames) = (0, 0);
    let mut next = Some(first);
    while let Some((frame, frame_size)) = next.take() {
        size += frame_size;
        frames += 1;
        let before = out.len();
        if let Err(error) = wire::encode(&frame, max_frame, out) {
            // One frame over the limit must not cost the peer its connection: say so in
            // its place where there is someone to tell, else drop it with a warning.
            tracing::warn!(%error, "a frame could not be sent");
            let message = format!("not delivered: {error}");
            let stand_in = match frame {
                Frame::Notification { .. } => {
                    Some(Frame::Error { req: None, code: ErrorCode::LimitExceeded, message })
                }
                // A match carries a publication per leaf: it can outgrow a frame that each
                // of its publications fits.
                Frame::CompositeNotification { sub, .. } => Some(Frame::Error {
                    req: None,
                    code: ErrorCode::LimitExceeded,
                    message: format!("a match of {sub} {message}"),
                }),
                Frame::Report { req, .. } | Frame::Ok { req, .. } => {
                    Some(Frame::Error { req: Some(req), code: ErrorCode::LimitExceeded, message })
                }
                // An error whose explanation is too long keeps its place, shortened: a
                // client in a session counts every answer.
                Frame::Error { req, code, .. } => Some(Frame::Error {
                    req,
                    code,
                    message: "(the explanation did not fit in a frame)".to_owned(),
                }),
                _ => None,
            };
            if let Some(stand_in) = stand_in {
                wire::encode(&stand_in, max_frame, out)?;
            }
        } else {
            encoded(&frame, out.len() - before);
        }
        if out.len() < WRITE_BATCH {
            next = more();
        }
    }
    send.write_all(out).await.map_err(|e| FrameError::Stream(e.to_string()))?;
    Ok((size, frames))
}
