//! The hello/welcome exchange that opens every connection, written once for both ends of a
//! broker link and for clients.
//!
//! The connecting side sends [`Frame::Hello`] with its role, name and
//! [`PROTOCOL_VERSION`] ([`hello`]); the accepting side reads it ([`await_hello`]) and answers
//! [`Frame::Welcome`] ([`welcome`]) or refuses with an [`Frame::Error`] ([`refuse`]). Either
//! side refuses a peer of another protocol version.

use padres_lang::Name;
use padres_lang::wire::codec::FrameReader;
use padres_lang::wire::{ErrorCode, Frame, PROTOCOL_VERSION, Role, Token};

use crate::frames::{FrameError, finish, read_frame, write_frame};

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// Reading or writing a frame failed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The peer closed the stream before the handshake was over.
    #[error("the peer closed the stream during the handshake")]
    Closed,
    /// The peer refused.
    #[error("refused ({code:?}): {message}")]
    Refused {
        /// Why, as a code.
        code: ErrorCode,
        /// Why, for people.
        message: String,
    },
    /// The peer speaks another protocol version.
    #[error("protocol version {theirs} is not supported; this side speaks {PROTOCOL_VERSION}")]
    VersionMismatch {
        /// The peer's version.
        theirs: u32,
    },
    /// The peer sent another frame than the handshake's.
    #[error("unexpected frame in the handshake: {0}")]
    Unexpected(String),
}

/// What the connecting side said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Client or broker.
    pub role: Role,
    /// Its name.
    pub name: Name,
    /// A client's token, if it gave one.
    pub token: Option<Token>,
}

/// Says hello as `role` named `name` (with a client's `token`, if any) and waits for the
/// welcome; returns the broker's name.
pub async fn hello(
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    reader: &mut FrameReader,
    hello: Hello,
    max_frame: usize,
) -> Result<Name, HandshakeError> {
    let Hello { role, name, token } = hello;
    write_frame(send, &Frame::Hello { version: PROTOCOL_VERSION, role, name, token }, max_frame).await?;
    match read_frame(recv, reader).await? {
        Some(Frame::Welcome { version, broker }) if version == PROTOCOL_VERSION => Ok(broker),
        Some(Frame::Welcome { version, .. }) => Err(HandshakeError::VersionMismatch { theirs: version }),
        Some(Frame::Error { code, message, .. }) => Err(HandshakeError::Refused { code, message }),
        Some(other) => Err(HandshakeError::Unexpected(format!("{other:?}"))),
        None => Err(HandshakeError::Closed),
    }
}

/// Reads the connecting side's hello. Anything else, or another version, is refused
/// (the refusal is sent, and the stream finished) and returned as the error.
pub async fn await_hello(
    send: quinn::SendStream,
    recv: &mut quinn::RecvStream,
    reader: &mut FrameReader,
    max_frame: usize,
) -> Result<(Hello, quinn::SendStream), HandshakeError> {
    let (code, error) = match read_frame(recv, reader).await {
        Ok(Some(Frame::Hello { version, role, name, token })) if version == PROTOCOL_VERSION => {
            return Ok((Hello { role, name, token }, send));
        }
        Ok(Some(Frame::Hello { version, .. })) => {
            (ErrorCode::VersionMismatch, HandshakeError::VersionMismatch { theirs: version })
        }
        Ok(Some(other)) => (
            ErrorCode::BadRequest,
            HandshakeError::Unexpected(format!("the first frame must be Hello, not {other:?}")),
        ),
        Ok(None) => return Err(HandshakeError::Closed),
        Err(why) => (ErrorCode::BadRequest, HandshakeError::Frame(why)),
    };
    let message = match &error {
        HandshakeError::Frame(why) => {
            format!(
                "invalid input: {why} (a hello from before protocol version {PROTOCOL_VERSION} does not decode)"
            )
        }
        other => other.to_string(),
    };
    refuse(send, code, message, max_frame).await;
    Err(error)
}

/// Welcomes the connecting side to broker `broker`.
pub async fn welcome(
    send: &mut quinn::SendStream,
    broker: Name,
    max_frame: usize,
) -> Result<(), HandshakeError> {
    write_frame(send, &Frame::Welcome { version: PROTOCOL_VERSION, broker }, max_frame).await?;
    Ok(())
}

/// Refuses the connecting side with `code` and `message`, then finishes the stream (best
/// effort: the peer may be gone).
pub async fn refuse(mut send: quinn::SendStream, code: ErrorCode, message: String, max_frame: usize) {
    let _ = write_frame(&mut send, &Frame::Error { req: None, code, message }, max_frame).await;
    finish(send).await;
}
