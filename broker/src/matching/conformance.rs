//! Conformance of a publication to an advertisement, as [`padres_lang::conforms`] defines
//! it, checked for every publication a client sends.
//!
//! The reference takes each of the publication's attributes and looks for it among all the
//! advertisement's predicates. Here each predicate looks for its attribute in the
//! publication instead (a publication names an attribute at most once), starting just
//! after where the previous predicate found its own: clients usually write a publication's
//! attributes in their advertisement's order, so most predicates find theirs at the first
//! comparison. The attributes found are marked in a bitset, and every attribute but `time`
//! must be marked.

use padres_lang::semantics::holds;
use padres_lang::time::TIME;
use padres_lang::{Advertisement, Publication};

/// True if `publication` conforms to `adv` ([`padres_lang::conforms`]).
pub fn conforms(publication: &Publication, adv: &Advertisement) -> bool {
    let attrs = publication.attrs();
    let n = attrs.len();
    if n > 64 {
        return padres_lang::conforms(publication, adv);
    }
    let mut advertised = 0_u64;
    // Where the next predicate starts looking.
    let mut at = 0;
    for p in adv.predicates() {
        let found = (at..n).chain(0..at).find(|&i| attrs[i].0 == *p.attr());
        if let Some(i) = found {
            if !holds(p, &attrs[i].1) {
                return false;
            }
            advertised |= 1 << i;
            at = i + 1;
        }
    }
    attrs.iter().enumerate().all(|(i, (name, _))| advertised & (1 << i) != 0 || name == TIME)
}
