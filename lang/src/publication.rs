//! Publications: attribute/value pairs with a mandatory string `class`, plus an optional
//! opaque payload that brokers carry but never look into. The reserved attribute `time`,
//! when present, is a timestamp ([`crate::time`]).

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::InvalidMessage;
use crate::limits::Limits;
use crate::name::Name;
use crate::time::TIME;
use crate::value::{Timestamp, Value};

/// A publication: its attributes in the order written, and an optional payload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawPublication")]
pub struct Publication {
    attrs: Vec<(Name, Value)>,
    payload: Option<Bytes>,
}

#[derive(Deserialize)]
struct RawPublication {
    #[serde(deserialize_with = "crate::wire::bounded::vec_with_room")]
    attrs: Vec<(Name, Value)>,
    payload: Option<Bytes>,
}

impl TryFrom<RawPublication> for Publication {
    type Error = InvalidMessage;
    fn try_from(raw: RawPublication) -> Result<Self, Self::Error> {
        let mut publication = Self::new(raw.attrs)?;
        publication.payload = raw.payload;
        Ok(publication)
    }
}

impl Publication {
    /// Checks the attributes (a string `class`, no name twice, finite numbers, default size
    /// limit) and makes a publication without payload.
    pub fn new(attrs: Vec<(Name, Value)>) -> Result<Self, InvalidMessage> {
        Self::check(&attrs, &Limits::default())?;
        Ok(Self { attrs, payload: None })
    }

    fn check(attrs: &[(Name, Value)], limits: &Limits) -> Result<(), InvalidMessage> {
        if attrs.len() > limits.max_predicates {
            return Err(InvalidMessage::TooLarge {
                what: "number of attributes",
                limit: limits.max_predicates,
            });
        }
        for (i, (name, value)) in attrs.iter().enumerate() {
            if attrs[..i].iter().any(|(earlier, _)| earlier == name) {
                return Err(InvalidMessage::DuplicateAttribute(name.to_string()));
            }
            if !value.is_valid() {
                return Err(InvalidMessage::NonFiniteFloat);
            }
            if name == TIME && !matches!(value, Value::Time(_)) {
                return Err(InvalidMessage::TimeAttribute(format!("{value}")));
            }
        }
        match attrs.iter().find(|(name, _)| name == "class") {
            Some((_, Value::Str(_))) => Ok(()),
            _ => Err(InvalidMessage::PublicationClass),
        }
    }

    /// The same publication carrying `payload`.
    #[must_use]
    pub fn with_payload(mut self, payload: impl Into<Bytes>) -> Self {
        self.payload = Some(payload.into());
        self
    }

    /// The same publication with `time` set to `at`, unless it carries a time already
    /// (what its publisher's broker does to every publication).
    #[must_use]
    pub fn with_time(mut self, at: Timestamp) -> Self {
        thread_local! {
            // Shared: a broker adds it to every publication it is given.
            static TIME_NAME: Name = Name::new(TIME).expect("a valid name");
        }
        if self.get(TIME).is_none() {
            self.attrs.push((TIME_NAME.with(Name::clone), Value::Time(at)));
        }
        self
    }

    /// The value of the `time` attribute, if it has one.
    pub fn time(&self) -> Option<Timestamp> {
        match self.get(TIME) {
            Some(Value::Time(t)) => Some(*t),
            _ => None,
        }
    }

    /// The same publication without its `time` attribute: what its publisher wrote, when
    /// the time was added by its broker.
    #[must_use]
    pub fn without_time(&self) -> Self {
        let attrs = self.attrs.iter().filter(|(n, _)| n != TIME).cloned().collect();
        Self { attrs, payload: self.payload.clone() }
    }

    /// The attributes, in the order written.
    pub fn attrs(&self) -> &[(Name, Value)] {
        &self.attrs
    }

    /// The value of attribute `name`, if present.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.attrs.iter().find(|(n, _)| *n == *name).map(|(_, v)| v)
    }

    /// The value of the `class` attribute.
    pub fn class(&self) -> &str {
        self.get("class").and_then(Value::as_str).unwrap_or_default()
    }

    /// The payload, if any.
    pub fn payload(&self) -> Option<&Bytes> {
        self.payload.as_ref()
    }

    /// A rough size of its attributes and payload on the wire (bytes): cheap to compute,
    /// within a small factor of the encoded size, for limits and chunking.
    pub fn estimated_size(&self) -> usize {
        let attrs: usize = self
            .attrs
            .iter()
            .map(|(name, value)| {
                name.as_str().len()
                    + match value {
                        Value::Str(s) => s.len() + 2,
                        _ => 9,
                    }
            })
            .sum();
        attrs + self.payload.as_ref().map_or(0, Bytes::len)
    }
}
