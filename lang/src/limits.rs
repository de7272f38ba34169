//! Size limits applied to every message, whether it arrives as text or as a frame.

/// The limits a parser (and a broker) enforces.
///
/// [`Limits::default`] is what `FromStr` and frame decoding use, and its values are also
/// the ceilings every message is checked against when it is built or decoded: a receiver
/// must be able to accept whatever a sender could build. A [`Parser`](crate::Parser) can be
/// configured tighter; looser values are clamped to the defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest message text accepted by the parser, in bytes.
    pub max_text_len: usize,
    /// Most predicates in one subscription or advertisement, or attributes in a publication.
    pub max_predicates: usize,
    /// Most nodes (leaves and operators) in one composite subscription.
    pub max_composite_nodes: usize,
    /// Deepest nesting of a composite subscription.
    pub max_composite_depth: usize,
    /// Largest count of a `Times` repetition (a match of it carries that many publications).
    pub max_repetitions: usize,
    /// Largest compiled size of one `str-regex` pattern, in bytes (the `regex` crate's
    /// size limit).
    pub regex_size_limit: usize,
    /// Deepest nesting of groups and repetitions inside one regex pattern.
    pub regex_nest_limit: u32,
}

impl Limits {
    /// These limits, with every field at most its default.
    pub fn clamped(&self) -> Self {
        let ceiling = Self::default();
        Self {
            max_text_len: self.max_text_len.min(ceiling.max_text_len),
            max_predicates: self.max_predicates.min(ceiling.max_predicates),
            max_composite_nodes: self.max_composite_nodes.min(ceiling.max_composite_nodes),
            max_composite_depth: self.max_composite_depth.min(ceiling.max_composite_depth),
            max_repetitions: self.max_repetitions.min(ceiling.max_repetitions),
            regex_size_limit: self.regex_size_limit.min(ceiling.regex_size_limit),
            regex_nest_limit: self.regex_nest_limit.min(ceiling.regex_nest_limit),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_text_len: 1 << 20,
            max_predicates: 1024,
            max_composite_nodes: 4096,
            max_composite_depth: 256,
            max_repetitions: 1000,
            regex_size_limit: 256 * 1024,
            regex_nest_limit: 64,
        }
    }
}
