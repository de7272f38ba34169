//! Composite subscriptions: patterns over atomic subscriptions.
//!
//! A composite subscription is a tree whose leaves are atomic subscriptions and whose inner
//! nodes are `&` (both), `||` (either) and `;` (left matched before right), plus
//! `Times(S, n, attr, step)`: `n` publications matching the atomic subscription `S` whose
//! attribute `attr` increases by `step` from one to the next (decreases if negative).
//! Variables (`$S$x`, `$I$x`) bind on first match and must be equal across the pattern.
//!
//! Two options bound the state a detector keeps (see `docs/composite.md`):
//! `within DURATION` (every match spans at most that long, by the publications' stamps) and
//! `until {FILTER}` (a publication matching the filter ends the partial matches of the
//! binding it gives the filter's variables, e.g. a workflow generation's end ends its `gid`).
//!
//! The tree is stored flat, in post-order (children before their parent, the root last).
//! That keeps decoding free of recursion, so a hostile frame cannot exhaust the stack, and
//! [`CompositeSubscription::new`] checks that the nodes form exactly one tree.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::InvalidMessage;
use crate::limits::Limits;
use crate::name::Name;
use crate::subscription::{Subscription, check_variable_kinds};
use crate::value::Value;

/// A binary composite operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CompositeOp {
    /// `&`: both sides matched, in any order.
    And,
    /// `||`: either side matched.
    Or,
    /// `;`: the left side matched before the right side.
    Seq,
}

impl CompositeOp {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::And => "&",
            Self::Or => "||",
            Self::Seq => ";",
        }
    }
}

impl fmt::Display for CompositeOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One node of a composite subscription. Children are indices of earlier nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Node {
    /// An atomic subscription.
    Leaf(Subscription),
    /// `{left} op {right}`.
    Binary {
        /// The operator.
        op: CompositeOp,
        /// Index of the left child.
        left: u32,
        /// Index of the right child.
        right: u32,
    },
    /// `Times(sub, count, attr, step)`.
    Times {
        /// The atomic subscription repeated.
        sub: Subscription,
        /// How many matching publications make a match (at least 1).
        count: u32,
        /// The attribute that steps.
        attr: Name,
        /// The step between consecutive publications (an integer or a float).
        step: Value,
    },
}

/// A composite subscription (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawComposite")]
pub struct CompositeSubscription {
    nodes: Vec<Node>,
    /// `within`: the longest span of a match, in milliseconds of stamp time.
    window: Option<u64>,
    /// `until`: the filter whose matching publications end a binding's partial matches.
    until: Option<Subscription>,
}

#[derive(Deserialize)]
struct RawComposite {
    #[serde(deserialize_with = "crate::wire::bounded::vec")]
    nodes: Vec<Node>,
    window: Option<u64>,
    until: Option<Subscription>,
}

impl TryFrom<RawComposite> for CompositeSubscription {
    type Error = InvalidMessage;
    fn try_from(raw: RawComposite) -> Result<Self, Self::Error> {
        let mut cs = Self::new(raw.nodes)?;
        if let Some(window) = raw.window {
            cs = cs.within(window)?;
        }
        match raw.until {
            Some(until) => cs.until(until),
            None => Ok(cs),
        }
    }
}

/// The longest `within` window: 100 years of milliseconds.
pub const MAX_WINDOW_MS: u64 = 100 * 366 * 24 * 3600 * 1000;

/// A borrowed view of one node with its children resolved, for walking the tree.
#[derive(Clone, Copy, Debug)]
pub enum Expr<'a> {
    /// An atomic subscription.
    Leaf(&'a Subscription),
    /// `{left} op {right}`.
    Binary(CompositeOp, usize, usize),
    /// `Times(sub, count, attr, step)`.
    Times(&'a Subscription, u32, &'a Name, &'a Value),
}

impl CompositeSubscription {
    /// Checks that `nodes` is one tree in post-order within the default [`Limits`], that
    /// every `Times` is well-formed and that no variable is used as two kinds.
    pub fn new(nodes: Vec<Node>) -> Result<Self, InvalidMessage> {
        Self::with_limits(nodes, &Limits::default())
    }

    /// As [`Self::new`], within `limits` (clamped to the defaults).
    pub fn with_limits(nodes: Vec<Node>, limits: &Limits) -> Result<Self, InvalidMessage> {
        Self::check(&nodes, &limits.clamped())?;
        Ok(Self { nodes, window: None, until: None })
    }

    /// The same pattern whose matches span at most `window_ms` milliseconds (by stamp).
    pub fn within(mut self, window_ms: u64) -> Result<Self, InvalidMessage> {
        if window_ms > MAX_WINDOW_MS {
            return Err(InvalidMessage::TooLarge {
                what: "within window (ms)",
                limit: MAX_WINDOW_MS as usize,
            });
        }
        self.window = Some(window_ms);
        Ok(self)
    }

    /// The same pattern, whose partial matches of a binding end when a publication
    /// matching `until` gives its variables that binding. Every variable of `until` must
    /// be one the pattern binds, as the same kind.
    pub fn until(mut self, until: Subscription) -> Result<Self, InvalidMessage> {
        let mut kinds = HashMap::new();
        for sub in self.atoms() {
            check_variable_kinds(sub.predicates(), &mut kinds)?;
        }
        for var in until.predicates().iter().filter_map(|p| p.variable()) {
            match kinds.get(&var.name) {
                Some(kind) if *kind == var.kind => {}
                Some(_) => return Err(InvalidMessage::VariableKindConflict(var.name.to_string())),
                None => return Err(InvalidMessage::UnboundUntilVariable(var.name.to_string())),
            }
        }
        self.until = Some(until);
        Ok(self)
    }

    /// The `within` window in milliseconds, if any.
    pub fn window(&self) -> Option<u64> {
        self.window
    }

    /// The `until` filter, if any.
    pub fn until_filter(&self) -> Option<&Subscription> {
        self.until.as_ref()
    }

    /// The same pattern with neither `within` nor `until`.
    #[must_use]
    pub fn without_options(mut self) -> Self {
        self.window = None;
        self.until = None;
        self
    }

    fn check(nodes: &[Node], limits: &Limits) -> Result<(), InvalidMessage> {
        if nodes.is_empty() {
            return Err(InvalidMessage::Empty("a composite subscription"));
        }
        if nodes.len() > limits.max_composite_nodes {
            return Err(InvalidMessage::TooLarge {
                what: "number of composite nodes",
                limit: limits.max_composite_nodes,
            });
        }
        // Replaying the post-order with a stack of finished subtrees checks that every
        // child is used once, right before its parent's other child, and that one root
        // remains: exactly the canonical post-order of a single tree.
        let mut stack: Vec<(usize, usize)> = Vec::new(); // (node index, depth)
        let mut kinds = HashMap::new();
        for (i, node) in nodes.iter().enumerate() {
            let depth = match node {
                Node::Leaf(sub) => {
                    check_variable_kinds(sub.predicates(), &mut kinds)?;
                    1
                }
                Node::Times { sub, count, step, .. } => {
                    check_variable_kinds(sub.predicates(), &mut kinds)?;
                    let numeric_step = matches!(step, Value::Int(_) | Value::Float(_));
                    if *count == 0 || !numeric_step || !step.is_valid() {
                        return Err(InvalidMessage::BadRepetition);
                    }
                    if *count as usize > limits.max_repetitions {
                        return Err(InvalidMessage::TooLarge {
                            what: "count of a repetition",
                            limit: limits.max_repetitions,
                        });
                    }
                    1
                }
                Node::Binary { left, right, .. } => {
                    let malformed = InvalidMessage::MalformedComposite("children out of order");
                    let (r, rd) = stack.pop().ok_or(malformed.clone())?;
                    let (l, ld) = stack.pop().ok_or(malformed.clone())?;
                    if r != *right as usize || l != *left as usize {
                        return Err(malformed);
                    }
                    1 + ld.max(rd)
                }
            };
            if depth > limits.max_composite_depth {
                return Err(InvalidMessage::TooLarge {
                    what: "composite nesting depth",
                    limit: limits.max_composite_depth,
                });
            }
            stack.push((i, depth));
        }
        if stack.len() != 1 {
            return Err(InvalidMessage::MalformedComposite("more than one root"));
        }
        Ok(())
    }

    /// A composite of one atomic subscription.
    pub fn leaf(sub: Subscription) -> Self {
        Self { nodes: vec![Node::Leaf(sub)], window: None, until: None }
    }

    /// `Times(sub, count, attr, step)`.
    pub fn times(sub: Subscription, count: u32, attr: Name, step: Value) -> Result<Self, InvalidMessage> {
        Self::new(vec![Node::Times { sub, count, attr, step }])
    }

    /// `{self} op {right}`, checked against the default limits; the parts' `within` and
    /// `until` are dropped (set them on the result).
    pub fn combine(self, op: CompositeOp, right: Self) -> Result<Self, InvalidMessage> {
        let offset = u32::try_from(self.nodes.len())
            .map_err(|_| InvalidMessage::MalformedComposite("too many nodes"))?;
        let mut nodes = self.nodes;
        nodes.extend(right.nodes.into_iter().map(|node| match node {
            Node::Binary { op, left, right } => {
                Node::Binary { op, left: left + offset, right: right + offset }
            }
            other => other,
        }));
        let right_root = u32::try_from(nodes.len() - 1)
            .map_err(|_| InvalidMessage::MalformedComposite("too many nodes"))?;
        nodes.push(Node::Binary { op, left: offset - 1, right: right_root });
        Self::new(nodes)
    }

    /// The nodes in post-order; the root is last.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The index of the root node.
    pub fn root(&self) -> usize {
        self.nodes.len() - 1
    }

    /// Node `index`, with its children as indices.
    pub fn expr(&self, index: usize) -> Expr<'_> {
        match &self.nodes[index] {
            Node::Leaf(sub) => Expr::Leaf(sub),
            Node::Binary { op, left, right } => Expr::Binary(*op, *left as usize, *right as usize),
            Node::Times { sub, count, attr, step } => Expr::Times(sub, *count, attr, step),
        }
    }

    /// The leaf number of every node that is a leaf (`Leaf` or `Times`), counting leaves
    /// left to right from 0; `None` for operators. Notifications name leaves by this number.
    pub fn leaf_numbers(&self) -> Vec<Option<usize>> {
        let mut next = 0;
        self.nodes
            .iter()
            .map(|node| match node {
                Node::Binary { .. } => None,
                _ => {
                    next += 1;
                    Some(next - 1)
                }
            })
            .collect()
    }

    /// The index of the first node of `node`'s subtree (its nodes are `first..=node`).
    pub fn subtree_start(&self, node: usize) -> usize {
        let mut at = node;
        while let Node::Binary { left, .. } = self.nodes[at] {
            at = left as usize;
        }
        at
    }

    /// The subtree rooted at `node` as a composite subscription of its own, with this one's
    /// `within`, and its `until` if the subtree binds the filter's variables. Its leaves
    /// are numbered from 0: leaf `i` of the part is leaf `i + k` here, where `k` is the
    /// number of leaves before the subtree.
    pub fn part(&self, node: usize) -> Self {
        let start = self.subtree_start(node);
        let offset = u32::try_from(start).expect("node indices fit in u32");
        let nodes = self.nodes[start..=node]
            .iter()
            .map(|n| match n {
                Node::Binary { op, left, right } => {
                    Node::Binary { op: *op, left: left - offset, right: right - offset }
                }
                other => other.clone(),
            })
            .collect();
        let part = Self { nodes, window: self.window, until: None };
        match &self.until {
            Some(until) => part.clone().until(until.clone()).unwrap_or(part),
            None => part,
        }
    }

    /// Every atomic subscription in the pattern, left to right.
    pub fn atoms(&self) -> impl Iterator<Item = &Subscription> {
        self.nodes.iter().filter_map(|node| match node {
            Node::Leaf(sub) | Node::Times { sub, .. } => Some(sub),
            Node::Binary { .. } => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_a_subtree_with_the_options_it_can_keep() {
        let cs: CompositeSubscription =
            "{{[class,eq,a],[g,eq,$S$g]}&{[class,eq,b]}}||Times({[class,eq,c],[g,eq,$S$g]},2,v,1) \
             within 5s until {[class,eq,end],[g,eq,$S$g]}"
                .parse()
                .expect("valid");
        // Nodes: 0 a, 1 b, 2 &, 3 Times, 4 ||.
        assert_eq!(cs.subtree_start(2), 0);
        assert_eq!(cs.subtree_start(3), 3);
        let and = cs.part(2);
        assert_eq!(
            and.to_string(),
            "{{[class,eq,'a'],[g,eq,$S$g]}&{[class,eq,'b']}} within 5s until {[class,eq,'end'],[g,eq,$S$g]}"
        );
        assert_eq!(cs.part(1).to_string(), "{[class,eq,'b']} within 5s", "b does not bind g: no until");
        assert_eq!(cs.part(4), cs);
        assert_eq!(cs.leaf_numbers(), [Some(0), Some(1), None, Some(2), None]);
    }
}
