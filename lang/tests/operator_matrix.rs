//! The operator matrices of PADRES, through `matches` and `overlaps`, with every expected
//! result written out. Rows are `(advertisement operator, subscription operator,
//! results)`; each character of `results` is `T` (overlaps) or `F` for one subscription
//! value, in the order of the column constants.

use padres_lang::{Advertisement, Publication, Subscription, conforms, matches, overlaps};

fn sub(text: &str) -> Subscription {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}
fn adv(text: &str) -> Advertisement {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}
fn publication(text: &str) -> Publication {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn expected(cell: char) -> bool {
    match cell {
        'T' => true,
        'F' => false,
        other => panic!("bad cell {other}"),
    }
}

const NUMBERS: [&str; 3] = ["80", "100", "120"];

/// Advertisement `[price,<a>,100]` against subscription `[price,<s>,80|100|120]`.
const NUMERIC_OVERLAPS: [(&str, &str, &str); 36] = [
    ("<", "<", "TTT"),
    ("<", "<=", "TTT"),
    ("<", ">", "TFF"),
    ("<", ">=", "TFF"),
    ("<", "=", "TFF"),
    ("<", "<>", "TTT"),
    ("<=", "<", "TTT"),
    ("<=", "<=", "TTT"),
    ("<=", ">", "TFF"),
    ("<=", ">=", "TTF"),
    ("<=", "=", "TTF"),
    ("<=", "<>", "TTT"),
    (">", "<", "FFT"),
    (">", "<=", "FFT"),
    (">", ">", "TTT"),
    (">", ">=", "TTT"),
    (">", "=", "FFT"),
    (">", "<>", "TTT"),
    (">=", "<", "FFT"),
    (">=", "<=", "FTT"),
    (">=", ">", "TTT"),
    (">=", ">=", "TTT"),
    (">=", "=", "FTT"),
    (">=", "<>", "TTT"),
    ("=", "<", "FFT"),
    ("=", "<=", "FTT"),
    ("=", ">", "TFF"),
    ("=", ">=", "TTF"),
    ("=", "=", "FTF"),
    ("=", "<>", "TFT"),
    ("<>", "<", "TTT"),
    ("<>", "<=", "TTT"),
    ("<>", ">", "TTT"),
    ("<>", ">=", "TTT"),
    ("<>", "=", "TFT"),
    ("<>", "<>", "TTT"),
];

/// Checks advertisement `[attr,<a>,anchor]` against subscription `[attr,<s>,v]` for each
/// row `(a, s, results)` of `table` and each `v` of `values`.
fn check_overlaps(table: &[(&str, &str, &str)], attr: &str, anchor: &str, values: &[String]) {
    for (adv_op, sub_op, row) in table {
        let a = adv(&format!("[class,eq,'stock'],[{attr},{adv_op},{anchor}]"));
        assert_eq!(row.len(), values.len());
        for (value, cell) in values.iter().zip(row.chars()) {
            let s = sub(&format!("[class,eq,'stock'],[{attr},{sub_op},{value}]"));
            let what = format!("adv [{attr},{adv_op},{anchor}] sub [{attr},{sub_op},{value}]");
            assert_eq!(overlaps(&s, &a), expected(cell), "{what}");
        }
    }
}

#[test]
fn numeric_overlaps() {
    check_overlaps(&NUMERIC_OVERLAPS, "price", "100", &NUMBERS.map(String::from));
}

/// Subscription `[price,<op>,100]` against publications with price 80, 100, 120.
const NUMERIC_MATCHES: [(&str, &str); 6] =
    [("<", "TFF"), ("<=", "TTF"), (">", "FFT"), (">=", "FTT"), ("=", "FTF"), ("<>", "TFT")];

#[test]
fn numeric_matches() {
    for (op, row) in NUMERIC_MATCHES {
        let s = sub(&format!("[class,eq,'stock'],[price,{op},100]"));
        for (value, cell) in NUMBERS.iter().zip(row.chars()) {
            let p = publication(&format!("[class,'stock'],[price,{value}]"));
            assert_eq!(matches(&s, &p), expected(cell), "sub [price,{op},100] pub price {value}");
            // The same with float values: integers and floats compare numerically.
            let p = publication(&format!("[class,'stock'],[price,{value}.0]"));
            assert_eq!(matches(&s, &p), expected(cell), "sub [price,{op},100] pub price {value}.0");
        }
    }
    // PADRES Java failed this one; we compare integers and floats exactly.
    let above = sub("[class,eq,'stock'],[price,>,100]");
    assert!(matches(&above, &publication("[class,'stock'],[price,100.5]")));
    let above_float = sub("[class,eq,'stock'],[price,>,100.5]");
    assert!(!matches(&above_float, &publication("[class,'stock'],[price,100]")));
}

const STRINGS: [&str; 6] = ["ib", "bc", "abc", "ibm", "ibmstock", "xyz"];

/// Advertisement `[symbol,<a>,'ibm']` against subscription `[symbol,<s>,v]` for v in
/// `STRINGS`.
const STRING_OVERLAPS: [(&str, &str, &str); 81] = [
    ("str-lt", "str-lt", "TTTTTT"),
    ("str-lt", "str-le", "TTTTTT"),
    ("str-lt", "str-ge", "TTTFFF"),
    ("str-lt", "str-gt", "TTTFFF"),
    ("str-lt", "eq", "TTTFFF"),
    ("str-lt", "neq", "TTTTTT"),
    ("str-lt", "str-contains", "TTTTTT"),
    ("str-lt", "str-prefix", "TTTFFF"),
    ("str-lt", "str-postfix", "TTTTTT"),
    ("str-le", "str-lt", "TTTTTT"),
    ("str-le", "str-le", "TTTTTT"),
    ("str-le", "str-ge", "TTTTFF"),
    ("str-le", "str-gt", "TTTFFF"),
    ("str-le", "eq", "TTTTFF"),
    ("str-le", "neq", "TTTTTT"),
    ("str-le", "str-contains", "TTTTTT"),
    ("str-le", "str-prefix", "TTTTFF"),
    ("str-le", "str-postfix", "TTTTTT"),
    ("str-ge", "str-lt", "FFFFTT"),
    ("str-ge", "str-le", "FFFTTT"),
    ("str-ge", "str-ge", "TTTTTT"),
    ("str-ge", "str-gt", "TTTTTT"),
    ("str-ge", "eq", "FFFTTT"),
    ("str-ge", "neq", "TTTTTT"),
    ("str-ge", "str-contains", "TTTTTT"),
    ("str-ge", "str-prefix", "TFFTTT"),
    ("str-ge", "str-postfix", "TTTTTT"),
    ("str-gt", "str-lt", "FFFFTT"),
    ("str-gt", "str-le", "FFFFTT"),
    ("str-gt", "str-ge", "TTTTTT"),
    ("str-gt", "str-gt", "TTTTTT"),
    ("str-gt", "eq", "FFFFTT"),
    ("str-gt", "neq", "TTTTTT"),
    ("str-gt", "str-contains", "TTTTTT"),
    ("str-gt", "str-prefix", "TFFTTT"),
    ("str-gt", "str-postfix", "TTTTTT"),
    ("eq", "str-lt", "FFFFTT"),
    ("eq", "str-le", "FFFTTT"),
    ("eq", "str-ge", "TTTTFF"),
    ("eq", "str-gt", "TTTFFF"),
    ("eq", "eq", "FFFTFF"),
    ("eq", "neq", "TTTFTT"),
    ("eq", "str-contains", "TFFTFF"),
    ("eq", "str-prefix", "TFFTFF"),
    ("eq", "str-postfix", "FFFTFF"),
    ("neq", "str-lt", "TTTTTT"),
    ("neq", "str-le", "TTTTTT"),
    ("neq", "str-ge", "TTTTTT"),
    ("neq", "str-gt", "TTTTTT"),
    ("neq", "eq", "TTTFTT"),
    ("neq", "neq", "TTTTTT"),
    ("neq", "str-contains", "TTTTTT"),
    ("neq", "str-prefix", "TTTTTT"),
    ("neq", "str-postfix", "TTTTTT"),
    ("str-contains", "str-lt", "TTTTTT"),
    ("str-contains", "str-le", "TTTTTT"),
    ("str-contains", "str-ge", "TTTTTT"),
    ("str-contains", "str-gt", "TTTTTT"),
    ("str-contains", "eq", "FFFTTF"),
    ("str-contains", "neq", "TTTTTT"),
    ("str-contains", "str-contains", "TTTTTT"),
    ("str-contains", "str-prefix", "TTTTTT"),
    ("str-contains", "str-postfix", "TTTTTT"),
    ("str-prefix", "str-lt", "FFFFTT"),
    ("str-prefix", "str-le", "FFFTTT"),
    ("str-prefix", "str-ge", "TTTTTF"),
    ("str-prefix", "str-gt", "TTTTTF"),
    ("str-prefix", "eq", "FFFTTF"),
    ("str-prefix", "neq", "TTTTTT"),
    ("str-prefix", "str-contains", "TTTTTT"),
    ("str-prefix", "str-prefix", "TFFTTF"),
    ("str-prefix", "str-postfix", "TTTTTT"),
    ("str-postfix", "str-lt", "TTTTTT"),
    ("str-postfix", "str-le", "TTTTTT"),
    ("str-postfix", "str-ge", "TTTTTT"),
    ("str-postfix", "str-gt", "TTTTTT"),
    ("str-postfix", "eq", "FFFTFF"),
    ("str-postfix", "neq", "TTTTTT"),
    ("str-postfix", "str-contains", "TTTTTT"),
    ("str-postfix", "str-prefix", "TTTTTT"),
    ("str-postfix", "str-postfix", "FFFTFF"),
];

#[test]
fn string_overlaps() {
    check_overlaps(&STRING_OVERLAPS, "symbol", "'ibm'", &STRINGS.map(|s| format!("'{s}'")));
}

/// Checks the table itself: wherever a concrete publication matches the subscription and
/// conforms to the advertisement, the table must say `T` (a wrong `F` would lose
/// publications). Candidates: short strings, the constants, and their concatenations.
#[test]
fn string_overlap_table_has_no_false_no() {
    let alphabet: Vec<char> = "abcikmostxyz".chars().collect();
    let mut candidates = vec![String::new()];
    let mut frontier = vec![String::new()];
    for _ in 0..2 {
        frontier = frontier.iter().flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}"))).collect();
        candidates.extend(frontier.iter().cloned());
    }
    let short = candidates.clone();
    for a in STRINGS {
        for b in short.iter().map(String::as_str).chain(STRINGS) {
            candidates.push(format!("{a}{b}"));
            candidates.push(format!("{b}{a}"));
        }
    }
    let publications: Vec<Publication> =
        candidates.iter().map(|c| publication(&format!("[class,'stock'],[symbol,'{c}']"))).collect();
    let mut witnessed = 0;
    for (adv_op, sub_op, row) in STRING_OVERLAPS {
        let a = adv(&format!("[class,eq,'stock'],[symbol,{adv_op},'ibm']"));
        for (value, cell) in STRINGS.iter().zip(row.chars()) {
            let s = sub(&format!("[class,eq,'stock'],[symbol,{sub_op},'{value}']"));
            if let Some(w) = publications.iter().find(|p| matches(&s, p) && conforms(p, &a)) {
                witnessed += 1;
                assert_eq!(cell, 'T', "adv {adv_op} 'ibm', sub {sub_op} '{value}': witness {w}");
            }
        }
    }
    // Every `T` in the table has a witness among these candidates.
    let yes = STRING_OVERLAPS.iter().flat_map(|(_, _, row)| row.chars()).filter(|&c| c == 'T').count();
    assert_eq!(witnessed, yes);
}

/// Subscription `[symbol,<op>,'ibm']` against publications with each of `STRINGS`.
const STRING_MATCHES: [(&str, &str); 9] = [
    ("str-lt", "TTTFFF"),
    ("str-le", "TTTTFF"),
    ("str-ge", "FFFTTT"),
    ("str-gt", "FFFFTT"),
    ("eq", "FFFTFF"),
    ("neq", "TTTFTT"),
    ("str-contains", "FFFTTF"),
    ("str-prefix", "FFFTTF"),
    ("str-postfix", "FFFTFF"),
];

#[test]
fn string_matches() {
    for (op, row) in STRING_MATCHES {
        let s = sub(&format!("[class,eq,'stock'],[symbol,{op},'ibm']"));
        for (value, cell) in STRINGS.iter().zip(row.chars()) {
            let p = publication(&format!("[class,'stock'],[symbol,'{value}']"));
            assert_eq!(matches(&s, &p), expected(cell), "sub [symbol,{op},'ibm'] pub symbol '{value}'");
        }
    }
}

#[test]
fn strings_never_equal_numbers() {
    let p = publication("[class,'stock'],[symbol,100]");
    assert!(!matches(&sub("[class,eq,'stock'],[symbol,eq,'100']"), &p));
    assert!(!matches(&sub("[class,eq,'stock'],[symbol,neq,'100']"), &p));
    assert!(matches(&sub("[class,eq,'stock'],[symbol,=,100]"), &p));
    let number_adv = adv("[class,eq,'stock'],[symbol,=,100]");
    assert!(!overlaps(&sub("[class,eq,'stock'],[symbol,eq,'100']"), &number_adv));
}

#[test]
fn is_present_matches_any_value() {
    let s = sub("[class,eq,'stock'],[symbol,isPresent,'x']");
    assert!(matches(&s, &publication("[class,'stock'],[symbol,'IBM']")));
    assert!(matches(&s, &publication("[class,'stock'],[symbol,7]")));
    assert!(!matches(&s, &publication("[class,'stock'],[price,7]")));
    assert!(overlaps(&s, &adv("[class,eq,'stock'],[symbol,>,0]")));
    assert!(!overlaps(&s, &adv("[class,eq,'stock'],[price,>,0]")));
    // isPresent's operand is only a spelling: `[y,isPresent,false]` is no `neq true`.
    let flag = sub("[class,eq,'b'],[y,isPresent,false]");
    assert!(overlaps(&flag, &adv("[class,eq,'b'],[y,eq,false]")));
    let b = sub("[class,eq,'a'],[x,isPresent,true],[x,neq,false]");
    assert!(matches(&b, &publication("[class,'a'],[x,true]")));
    assert!(!padres_lang::covers(&sub("[class,eq,'a'],[y,eq,'']"), &b));
}

#[test]
fn several_predicates_on_one_attribute_are_a_conjunction() {
    let s = sub("[class,eq,'stock'],[price,>,10],[price,<,20]");
    assert!(matches(&s, &publication("[class,'stock'],[price,15]")));
    assert!(!matches(&s, &publication("[class,'stock'],[price,25]")));
    assert!(!matches(&s, &publication("[class,'stock'],[price,5]")));
    assert!(!overlaps(&s, &adv("[class,eq,'stock'],[price,>=,20]")));
    assert!(overlaps(&s, &adv("[class,eq,'stock'],[price,>=,19.5]")));
}

#[test]
fn a_variable_used_twice_requires_equal_values() {
    let s = sub("[class,eq,'trade'],[buyer,eq,$S$X],[seller,eq,$S$X]");
    assert!(matches(&s, &publication("[class,'trade'],[buyer,'MS'],[seller,'MS']")));
    assert!(!matches(&s, &publication("[class,'trade'],[buyer,'MS'],[seller,'GS']")));
    let n = sub("[class,eq,'job'],[gid,=,$I$g],[parent,=,$I$g]");
    assert!(matches(&n, &publication("[class,'job'],[gid,3],[parent,3.0]")));
    assert!(!matches(&n, &publication("[class,'job'],[gid,'3'],[parent,'3']")));
}

#[test]
fn regex_matches_anywhere_unless_anchored() {
    let s = sub("[class,eq,'log'],[msg,str-regex,'^ERR[0-9]+']");
    assert!(matches(&s, &publication("[class,'log'],[msg,'ERR42 disk full']")));
    assert!(!matches(&s, &publication("[class,'log'],[msg,'WARN ERR42']")));
    assert!(!matches(&s, &publication("[class,'log'],[msg,42]")));
}

#[test]
fn conformance_needs_every_attribute_advertised() {
    let a = adv("[class,eq,'stock'],[symbol,isPresent,''],[price,>,0]");
    assert!(conforms(&publication("[class,'stock'],[symbol,'IBM'],[price,10]"), &a));
    assert!(conforms(&publication("[class,'stock'],[symbol,'IBM']"), &a));
    assert!(!conforms(&publication("[class,'stock'],[symbol,'IBM'],[price,-1]"), &a));
    assert!(!conforms(&publication("[class,'stock'],[symbol,'IBM'],[volume,1]"), &a));
    assert!(!conforms(&publication("[class,'bond'],[symbol,'IBM']"), &a));
}
