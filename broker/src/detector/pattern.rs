//! A composite subscription compiled for detection: variables numbered into slots, each
//! operator's join variables (the ones both sides always bind, used as the index key of
//! its stored partial matches) and the other shared variables (checked per pair).

use std::collections::BTreeSet;

use padres_lang::composite::{CompositeOp, CompositeSubscription, Expr};
use padres_lang::value::SmolStr;
use padres_lang::{Name, Number, Subscription, Value};

use super::stores::Layout;

/// What a node does with the matches of its children.
#[derive(Debug, PartialEq)]
pub(super) enum Op {
    /// An atomic subscription: its matches are publications.
    Leaf,
    /// `Times(S, count, attr, step)`: stores the publications of `S` per binding.
    Times { count: usize, attr: Name, step: Value },
    /// `||`: a child's match is this node's match.
    Or,
    /// `&` of leaves that all bind exactly the variables `key` (none other): a chain of
    /// `&`s compiled into one node, whose sides are its leaves in order (a workflow job's
    /// dependencies within one generation). It stores each leaf's publications under their
    /// binding and forms a match once every side has one: no partial match is stored for a
    /// part of the chain. The `&` nodes it replaces are [`Op::Absorbed`].
    All {
        /// The variables every leaf binds: the key its publications are stored under.
        key: Vec<usize>,
    },
    /// An `&` inside an [`Op::All`]: receives nothing.
    Absorbed,
    /// `&` or `;`: stores both children's matches and pairs them.
    Join {
        seq: bool,
        /// Slots both sides always bind: the key the stored matches are indexed by.
        key: Vec<usize>,
        /// Other slots both sides may bind: compared pair by pair.
        shared: Vec<usize>,
    },
}

#[derive(Debug, PartialEq)]
pub(super) struct Node {
    pub(super) op: Op,
    /// The parent and which side of it this node is (0 left, 1 right; a leaf of an
    /// [`Op::All`] is its side of that node).
    pub(super) parent: Option<(usize, usize)>,
    /// The left and right children of an operator.
    pub(super) children: Option<(usize, usize)>,
    /// The slots a match of this node always binds.
    certain: BTreeSet<usize>,
    /// The slots a match of this node may bind.
    possible: BTreeSet<usize>,
    /// The leaf numbers under this node: `leaves.0..leaves.1`.
    pub(super) leaves: (usize, usize),
}

/// A compiled pattern: the structure of a composite subscription, without its filters
/// (detectors of patterns that differ only in their filters' constants share one; a
/// `Times` step is part of the structure).
#[derive(Debug, PartialEq)]
pub(super) struct Pattern {
    pub(super) nodes: Vec<Node>,
    /// Leaf number → node index.
    pub(super) leaf_node: Vec<usize>,
    /// Leaf number → the leaf's variable predicates as (attribute, slot).
    pub(super) leaf_vars: Vec<Vec<(Name, usize)>>,
    /// How many variable slots.
    pub(super) slots: usize,
    pub(super) window: Option<u64>,
    /// The `until` filter's variables as (attribute, slot).
    pub(super) until_vars: Vec<(Name, usize)>,
    pub(super) has_until: bool,
    /// Where its stored matches go.
    pub(super) layout: Layout,
}

/// One value of an index key: numbers by numeric value, so `3` and `3.0` meet.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum KeyPart {
    Str(SmolStr),
    Int(i64),
    Float(u64),
    Bool(bool),
}

/// An index key: the values of some slots. Inline up to one (a workflow's joins are on
/// one variable): a key is made, cloned and dropped for every partial match stored.
pub(super) type Key = smallvec::SmallVec<[KeyPart; 1]>;

impl KeyPart {
    pub(super) fn of(value: &Value) -> Self {
        match value {
            Value::Str(s) => Self::Str(s.clone()),
            Value::Bool(b) => Self::Bool(*b),
            other => match other.as_number() {
                Some(Number::Int(i)) => Self::Int(i),
                Some(Number::Float(f)) => integral(f).map_or(Self::Float(f.to_bits()), Self::Int),
                None => Self::Bool(false),
            },
        }
    }
}

/// The integer a float equals exactly, if any.
fn integral(f: f64) -> Option<i64> {
    // Every integral float in [-2^63, 2^63) converts exactly.
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    let in_range = (-(2f64.powi(63))..2f64.powi(63)).contains(&f);
    #[allow(clippy::cast_possible_truncation)]
    (f.fract() == 0.0 && in_range).then_some(f as i64)
}

fn vars_of(sub: &Subscription, names: &mut Vec<Name>) -> Vec<(Name, usize)> {
    sub.predicates()
        .iter()
        .filter_map(|p| {
            let var = p.variable()?;
            let slot = match names.iter().position(|n| *n == var.name) {
                Some(slot) => slot,
                None => {
                    names.push(var.name.clone());
                    names.len() - 1
                }
            };
            Some((p.attr().clone(), slot))
        })
        .collect()
}

impl Pattern {
    /// `cs` compiled; the nodes in `parts` receive matches detected elsewhere (they are
    /// never absorbed into an [`Op::All`], which receives only its leaves' publications).
    pub(super) fn compile(cs: &CompositeSubscription, parts: &[usize]) -> Self {
        let mut names = Vec::new();
        let mut nodes: Vec<Node> = Vec::with_capacity(cs.nodes().len());
        let mut leaf_node = Vec::new();
        let mut leaf_vars = Vec::new();
        for index in 0..cs.nodes().len() {
            let leaf =
                |sub: &Subscription, names: &mut Vec<Name>, leaf_vars: &mut Vec<Vec<(Name, usize)>>| {
                    let vars = vars_of(sub, names);
                    let slots: BTreeSet<usize> = vars.iter().map(|&(_, s)| s).collect();
                    leaf_vars.push(vars);
                    slots
                };
            let node = match cs.expr(index) {
                Expr::Leaf(sub) => {
                    let slots = leaf(sub, &mut names, &mut leaf_vars);
                    leaf_node.push(index);
                    let n = leaf_node.len();
                    Node {
                        op: Op::Leaf,
                        parent: None,
                        children: None,
                        certain: slots.clone(),
                        possible: slots,
                        leaves: (n - 1, n),
                    }
                }
                Expr::Times(sub, count, attr, step) => {
                    let slots = leaf(sub, &mut names, &mut leaf_vars);
                    leaf_node.push(index);
                    let n = leaf_node.len();
                    let op = Op::Times { count: count as usize, attr: attr.clone(), step: step.clone() };
                    let certain = slots.clone();
                    Node { op, parent: None, children: None, certain, possible: slots, leaves: (n - 1, n) }
                }
                Expr::Binary(op, left, right) => {
                    nodes[left].parent = Some((index, 0));
                    nodes[right].parent = Some((index, 1));
                    let (l, r) = (&nodes[left], &nodes[right]);
                    let possible: BTreeSet<usize> = l.possible.union(&r.possible).copied().collect();
                    let leaves = (l.leaves.0, r.leaves.1);
                    let children = Some((left, right));
                    match op {
                        CompositeOp::Or => {
                            let certain = l.certain.intersection(&r.certain).copied().collect();
                            Node { op: Op::Or, parent: None, children, certain, possible, leaves }
                        }
                        CompositeOp::And | CompositeOp::Seq => {
                            let key: Vec<usize> = l.certain.intersection(&r.certain).copied().collect();
                            let shared = l
                                .possible
                                .intersection(&r.possible)
                                .filter(|s| !key.contains(s))
                                .copied()
                                .collect();
                            let certain = l.certain.union(&r.certain).copied().collect();
                            let op = Op::Join { seq: op == CompositeOp::Seq, key, shared };
                            Node { op, parent: None, children, certain, possible, leaves }
                        }
                    }
                }
            };
            nodes.push(node);
        }
        let (until_vars, has_until) = match cs.until_filter() {
            Some(until) => (vars_of(until, &mut names), true),
            None => (Vec::new(), false),
        };
        let mut pattern = Self {
            nodes,
            leaf_node,
            leaf_vars,
            slots: names.len(),
            window: cs.window(),
            until_vars,
            has_until,
            layout: Layout::default(),
        };
        pattern.gather_all(parts);
        pattern.layout = Layout::new(&pattern);
        pattern
    }

    /// A hash of what [`PartialEq`] compares, but for a `Times`'s step (equal patterns
    /// hash equal).
    pub(super) fn shape_hash(&self) -> u64 {
        use std::hash::{BuildHasher, Hash, Hasher};
        let mut h = foldhash::fast::FixedState::default().build_hasher();
        for node in &self.nodes {
            match &node.op {
                Op::Leaf => 0_u8.hash(&mut h),
                Op::Times { count, attr, .. } => (1_u8, count, attr).hash(&mut h),
                Op::Or => 2_u8.hash(&mut h),
                Op::All { key } => (3_u8, key).hash(&mut h),
                Op::Absorbed => 4_u8.hash(&mut h),
                Op::Join { seq, key, shared } => (5_u8, seq, key, shared).hash(&mut h),
            }
            (node.parent, node.children, node.leaves).hash(&mut h);
        }
        (&self.leaf_node, &self.leaf_vars, self.slots, self.window, &self.until_vars, self.has_until)
            .hash(&mut h);
        h.finish()
    }

    /// Compiles each maximal chain of `&`s over leaves that bind the same variables (at
    /// least one, and nothing else) into one [`Op::All`]. A chain member that receives
    /// parts from elsewhere ends the chain there.
    fn gather_all(&mut self, parts: &[usize]) {
        // The variables of each node whose subtree is such a chain (or such a leaf).
        let mut same: Vec<Option<BTreeSet<usize>>> = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let vars = match (&node.op, node.children) {
                (Op::Leaf, _) if !node.certain.is_empty() => Some(node.certain.clone()),
                (Op::Join { seq: false, .. }, Some((left, right))) => {
                    let member = |child: usize| {
                        let leaf = matches!(self.nodes[child].op, Op::Leaf);
                        same[child].as_ref().filter(|_| leaf || !parts.contains(&child))
                    };
                    member(left).zip(member(right)).filter(|(l, r)| l == r).map(|(l, _)| l.clone())
                }
                _ => None,
            };
            same.push(vars);
        }
        for index in 0..self.nodes.len() {
            let Some(vars) = &same[index] else { continue };
            if matches!(self.nodes[index].op, Op::Leaf) {
                continue;
            }
            let absorbed = self.nodes[index]
                .parent
                .is_some_and(|(parent, _)| same[parent].is_some() && !parts.contains(&index));
            if absorbed {
                self.nodes[index].op = Op::Absorbed;
                continue;
            }
            self.nodes[index].op = Op::All { key: vars.iter().copied().collect() };
            let (lo, hi) = self.nodes[index].leaves;
            for leaf in lo..hi {
                self.nodes[self.leaf_node[leaf]].parent = Some((index, leaf - lo));
            }
        }
    }

    /// How many sides `node` stores matches for: a join's two, an [`Op::All`]'s leaves, a
    /// `Times`'s one.
    pub(super) fn sides(&self, node: usize) -> usize {
        match &self.nodes[node].op {
            Op::All { .. } => self.nodes[node].leaves.1 - self.nodes[node].leaves.0,
            Op::Join { .. } => 2,
            Op::Times { .. } => 1,
            Op::Leaf | Op::Or | Op::Absorbed => 0,
        }
    }

    /// The slots `node`'s stored partial matches are keyed by, if it stores any: a join's
    /// join variables, an `&` chain's leaves' variables, a `Times`'s variables.
    pub(super) fn key_slots(&self, node: usize) -> Option<Vec<usize>> {
        match &self.nodes[node].op {
            Op::Join { key, .. } | Op::All { key } => Some(key.clone()),
            Op::Times { .. } => {
                Some(self.leaf_vars[self.nodes[node].leaves.0].iter().map(|&(_, s)| s).collect())
            }
            Op::Leaf | Op::Or | Op::Absorbed => None,
        }
    }

    /// The number of leaves.
    pub(super) fn leaves(&self) -> usize {
        self.leaf_node.len()
    }
}
