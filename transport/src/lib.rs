//! padres-transport: what brokers and clients share on the network, below routing.
//!
//! - [`frames`]: reading and writing [`Frame`](padres_lang::Frame)s on QUIC streams with the
//!   codec of `padres-lang` (which stays free of I/O).
//! - [`handshake`]: the hello/welcome exchange, with the protocol version check.
//! - [`tls`]: trust (certificate files, or `--insecure`), identities, and the rustls
//!   configurations that QUIC endpoints use.
//! - [`local`]: the local broker registry, where a broker leaves its certificate so that
//!   clients on the same machine find and verify it with no flags.
//! - [`x509`]: the fields of a certificate that trust decisions read (names, validity,
//!   CA or not), from its DER.

pub mod frames;
pub mod handshake;
pub mod local;
pub mod tls;
pub mod x509;

pub use frames::{FrameError, finish, read_frame, write_frame};
pub use handshake::HandshakeError;
pub use tls::{Identity, TlsError, Trust};
