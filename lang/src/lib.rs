//! padres-lang: what padres-rs messages mean and how they are written.
//!
//! No I/O lives here: no sockets, no clock, no database. Everything is a pure function of
//! its inputs, so brokers, clients and tests share one definition of every message.
//!
//! - [`value`]: [`Value`] (integer, float, string, boolean, [`Timestamp`]) and exact
//!   mixed-number comparison.
//! - [`name`]: [`Name`], the validated identifier used for attributes, brokers, variables.
//! - [`predicate`]: [`Predicate`] `[attr,op,operand]`, [`Op`], [`Operand`], [`Variable`],
//!   [`Pattern`] (a compiled `str-regex`).
//! - [`subscription`]: [`Subscription`] and [`Advertisement`] (conjunctions with a class).
//! - [`publication`]: [`Publication`] (attributes plus an optional opaque payload).
//! - [`composite`]: [`CompositeSubscription`] (`&`, `||`, `;`, `Times`, variables).
//! - [`time`]: the reserved `time` attribute, durations and relative times (`now-1h`).
//! - [`stamp`]: [`Stamp`], where and when a publication entered the federation (its order).
//! - [`id`]: [`MessageId`] (`BROKER/SEQ`); [`message`]: [`Message`], what clients send.
//! - [`parse`] and [`print`](mod@print): the text syntax; `parse(print(x)) == x` for every message.
//! - [`semantics`]: the reference [`matches`](fn@matches), [`conforms`], [`overlaps`], [`covers`] and
//!   [`adv_covers`] that every optimized index is tested against.
//! - [`json`]: notifications as JSON lines, the shapes clients and the HTTP gateway print.
//! - [`wire`]: [`Frame`]s and the length-prefixed bincode codec with hard limits.
//! - [`limits`]: [`Limits`] on message size, composite depth and regex size.
//! - [`error`]: [`InvalidMessage`] and [`ParseError`].
//!
//! ```
//! use padres_lang::{Publication, Subscription, matches};
//!
//! let sub: Subscription = "[class,eq,'stock'],[price,>,100]".parse()?;
//! let publication: Publication = "[class,'stock'],[symbol,'IBM'],[price,100.3]".parse()?;
//! assert!(matches(&sub, &publication));
//! # Ok::<(), padres_lang::ParseError>(())
//! ```

pub mod composite;
pub mod error;
pub mod id;
pub mod json;
pub mod limits;
pub mod message;
pub mod name;
pub mod parse;
pub mod predicate;
pub mod print;
pub mod publication;
pub mod semantics;
pub mod stamp;
pub mod subscription;
pub mod time;
pub mod value;
pub mod wire;

pub use composite::{CompositeOp, CompositeSubscription, Expr, Node};
pub use error::{InvalidMessage, ParseError, ParseErrorKind};
pub use id::MessageId;
pub use limits::Limits;
pub use message::Message;
pub use name::Name;
pub use parse::Parser;
pub use predicate::{Op, Operand, Pattern, Predicate, VarKind, Variable};
pub use publication::Publication;
pub use semantics::{adv_covers, adv_within, conforms, covers, intersects, matches, overlaps};
pub use stamp::{Stamp, Stamped};
pub use subscription::{Advertisement, Subscription};
pub use value::{Kind, Number, Timestamp, Value};
pub use wire::{BrokerMessage, ErrorCode, Frame, Role};
