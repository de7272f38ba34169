//! Subscriptions and advertisements: conjunctions of predicates with a mandatory class.
//!
//! Both carry exactly one `[class,eq,'name']` predicate (a guaranteed selective key, like a
//! topic). Several predicates on one attribute are a conjunction (`[p,>,10],[p,<,20]`).
//! Subscriptions may use variables; a variable used twice requires equal values.
//! Advertisements describe what a publisher will publish and take no variables.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::InvalidMessage;
use crate::limits::Limits;
use crate::name::Name;
use crate::predicate::{Op, Operand, Predicate, VarKind};
use crate::time::TIME;
use crate::value::{Kind, Value};

/// A conjunction of predicates that selects publications.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawFilter")]
pub struct Subscription {
    predicates: Vec<Predicate>,
}

/// The set of publications a publisher may publish, as a conjunction of predicates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawFilter")]
pub struct Advertisement {
    predicates: Vec<Predicate>,
}

/// The wire shape of both, checked on the way in.
#[derive(Deserialize)]
struct RawFilter {
    #[serde(deserialize_with = "crate::wire::bounded::vec")]
    predicates: Vec<Predicate>,
}

impl TryFrom<RawFilter> for Subscription {
    type Error = InvalidMessage;
    fn try_from(raw: RawFilter) -> Result<Self, Self::Error> {
        Self::new(raw.predicates)
    }
}

impl TryFrom<RawFilter> for Advertisement {
    type Error = InvalidMessage;
    fn try_from(raw: RawFilter) -> Result<Self, Self::Error> {
        Self::new(raw.predicates)
    }
}

impl Subscription {
    /// Checks `predicates` (class rule, variable kinds, default size limit) and makes a
    /// subscription of them.
    pub fn new(predicates: Vec<Predicate>) -> Result<Self, InvalidMessage> {
        check_filter(&predicates, "a subscription", &Limits::default())?;
        check_variable_kinds(&predicates, &mut HashMap::new())?;
        Ok(Self { predicates })
    }

    /// The predicates, in the order written.
    pub fn predicates(&self) -> &[Predicate] {
        &self.predicates
    }

    /// The value of the class predicate.
    pub fn class(&self) -> &str {
        class_of(&self.predicates)
    }
}

impl Advertisement {
    /// Checks `predicates` (class rule, no variables, default size limit) and makes an
    /// advertisement of them.
    pub fn new(predicates: Vec<Predicate>) -> Result<Self, InvalidMessage> {
        check_filter(&predicates, "an advertisement", &Limits::default())?;
        if predicates.iter().any(|p| p.variable().is_some()) {
            return Err(InvalidMessage::VariableNotAllowed("advertisements"));
        }
        Ok(Self { predicates })
    }

    /// The predicates, in the order written.
    pub fn predicates(&self) -> &[Predicate] {
        &self.predicates
    }

    /// The value of the class predicate.
    pub fn class(&self) -> &str {
        class_of(&self.predicates)
    }
}

/// The rules shared by subscriptions and advertisements.
fn check_filter(predicates: &[Predicate], what: &'static str, limits: &Limits) -> Result<(), InvalidMessage> {
    if predicates.len() > limits.max_predicates {
        return Err(InvalidMessage::TooLarge { what: "number of predicates", limit: limits.max_predicates });
    }
    let mut classes = predicates.iter().filter(|p| p.attr() == "class");
    match (classes.next(), classes.next()) {
        (Some(class), None) => {
            let is_string = matches!(class.operand(), Operand::Value(Value::Str(_)));
            if class.op() != Op::Eq || !is_string {
                return Err(InvalidMessage::BadClass);
            }
            Ok(())
        }
        _ => Err(InvalidMessage::MissingClass(what)),
    }?;
    // `time` holds timestamps: a predicate on it must be able to hold for one.
    match predicates.iter().find(|p| p.attr() == TIME && p.kind().is_some_and(|k| k != Kind::Number)) {
        Some(p) => Err(InvalidMessage::TimePredicate(p.to_string())),
        None => Ok(()),
    }
}

/// Records the kind of every variable in `seen`, failing if one is used as both kinds.
pub(crate) fn check_variable_kinds(
    predicates: &[Predicate],
    seen: &mut HashMap<Name, VarKind>,
) -> Result<(), InvalidMessage> {
    for var in predicates.iter().filter_map(Predicate::variable) {
        let kind = *seen.entry(var.name.clone()).or_insert(var.kind);
        if kind != var.kind {
            return Err(InvalidMessage::VariableKindConflict(var.name.to_string()));
        }
    }
    Ok(())
}

fn class_of(predicates: &[Predicate]) -> &str {
    // The constructors guarantee exactly one class predicate with a string value.
    predicates
        .iter()
        .find(|p| p.attr() == "class")
        .and_then(Predicate::literal)
        .and_then(Value::as_str)
        .unwrap_or_default()
}
