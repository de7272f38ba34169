//! The text syntax: the PADRES examples it must accept (with their canonical forms) and the
//! inputs it must reject (with their messages).

use padres_lang::{
    Advertisement, CompositeOp, CompositeSubscription, Expr, Limits, Message, Parser, Publication,
    Subscription, Value,
};

fn canonical_sub(text: &str) -> String {
    let sub: Subscription = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
    let printed = sub.to_string();
    assert_eq!(printed.parse::<Subscription>().as_ref(), Ok(&sub), "round trip of {printed}");
    printed
}

#[test]
fn accepts_padres_subscriptions() {
    let cases = [
        (
            "[class,eq,'stock'],[price,>,100],[symbol,isPresent,'x']",
            "[class,eq,'stock'],[price,>,100],[symbol,isPresent,'x']",
        ),
        (
            "[class,eq,stock],[symbol,eq,\"IBM\"],[price,<=,123.45]",
            "[class,eq,'stock'],[symbol,eq,'IBM'],[price,<=,123.45]",
        ),
        ("[class,eq,'stock'],[price,>,10],[price,<,20]", "[class,eq,'stock'],[price,>,10],[price,<,20]"),
        ("[class,eq,'log'],[msg,str-regex,'^ERR[0-9]+']", "[class,eq,'log'],[msg,str-regex,'^ERR[0-9]+']"),
        (" [ class , eq , 'stock' ] , [ price , >= , -1e3 ] ", "[class,eq,'stock'],[price,>=,-1000.0]"),
        (
            "[class,eq,'t'],[at,>=,2026-11-21T10:00:00Z],[ok,eq,true]",
            "[class,eq,'t'],[at,>=,2026-11-21T10:00:00.000Z],[ok,eq,true]",
        ),
    ];
    for (input, canonical) in cases {
        assert_eq!(canonical_sub(input), canonical);
    }
}

#[test]
fn accepts_padres_publications() {
    let cases = [
        (
            "[class,'stock'],[symbol,'IBM'],[price,100.3],[volume,110]",
            "[class,'stock'],[symbol,'IBM'],[price,100.3],[volume,110]",
        ),
        ("[class,reading],[level,-10.9]", "[class,'reading'],[level,-10.9]"),
        ("[class,'note'],[text,'it\\'s'] payload=0x6869", "[class,'note'],[text,'it\\'s'] payload=0x6869"),
    ];
    for (input, canonical) in cases {
        let p: Publication = input.parse().unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(p.to_string(), canonical);
        assert_eq!(canonical.parse::<Publication>().as_ref(), Ok(&p));
    }
    let p: Publication = "[class,reading],[level,-10.9]".parse().expect("valid");
    assert_eq!(p.get("level"), Some(&Value::Float(-10.9)));
    assert_eq!(p.class(), "reading");
}

#[test]
fn accepts_padres_composites() {
    let text = "{{[class,eq,'stock'],[comp,eq,$S$X],[price,>,100]}&{[class,eq,'trade'],[buyer,eq,$S$X],[bargainor,eq,'MS']}}";
    let cs: CompositeSubscription = text.parse().expect("valid");
    assert_eq!(cs.to_string(), text);
    let Expr::Binary(CompositeOp::And, left, right) = cs.expr(cs.root()) else {
        panic!("root should be &");
    };
    assert!(matches!(cs.expr(left), Expr::Leaf(s) if s.class() == "stock"));
    assert!(matches!(cs.expr(right), Expr::Leaf(s) if s.class() == "trade"));

    let text = "{{{[class,eq,fa]}&{{[class,eq,do]}||{[class,eq,re]}}}&{[class,eq,so]}}";
    let cs: CompositeSubscription = text.parse().expect("valid");
    assert_eq!(
        cs.to_string(),
        "{{{[class,eq,'fa']}&{{[class,eq,'do']}||{[class,eq,'re']}}}&{[class,eq,'so']}}"
    );
    let classes: Vec<&str> = cs.atoms().map(Subscription::class).collect();
    assert_eq!(classes, ["fa", "do", "re", "so"]);

    // The DESIGN form: no outer braces, spaces around the operator.
    let text =
        "{[class,eq,'trigger'],[appl,eq,$S$a]} & {[class,eq,'job_status'],[appl,eq,$S$a],[job,eq,'A']}";
    let cs: CompositeSubscription = text.parse().expect("valid");
    assert_eq!(cs.atoms().count(), 2);

    // Chains of one operator are left-associative; sequence and repetition.
    let chain: CompositeSubscription = "{[class,eq,a]};{[class,eq,b]};{[class,eq,c]}".parse().expect("valid");
    assert_eq!(chain.to_string(), "{{{[class,eq,'a']};{[class,eq,'b']}};{[class,eq,'c']}}");
    let times: CompositeSubscription = "Times({[class,eq,temp],[v,>,10]}, 3, v, 1)".parse().expect("valid");
    assert_eq!(times.to_string(), "Times({[class,eq,'temp'],[v,>,10]},3,v,1)");

    // Options: a window (printed in its largest exact unit) and an ending filter.
    let bounded: CompositeSubscription =
        "{[class,eq,a],[g,eq,$S$g]} & {[class,eq,b],[g,eq,$S$g]} within 90000ms until {[class,eq,end],[g,eq,$S$g]}"
            .parse()
            .expect("valid");
    assert_eq!(bounded.window(), Some(90_000));
    assert_eq!(
        bounded.to_string(),
        "{{[class,eq,'a'],[g,eq,$S$g]}&{[class,eq,'b'],[g,eq,$S$g]}} within 90s until {[class,eq,'end'],[g,eq,$S$g]}"
    );
    let short: CompositeSubscription = "{[class,eq,a]} within 1500ms".parse().expect("valid");
    assert_eq!(short.to_string(), "{[class,eq,'a']} within 1500ms");
}

fn sub_error(text: &str) -> String {
    match text.parse::<Subscription>() {
        Ok(s) => panic!("{text} should be rejected, parsed as {s}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn rejects_bad_subscriptions_with_clear_messages() {
    let cases = [
        ("[class,eq,'stock'] [price,<,100]", "expected ',' after predicate at column 20"),
        ("[class eq 'stock']", "expected ',' after attribute name at column 8"),
        (
            "[class,eq,'s'],[attribute,=,'high']",
            "operator '=' compares numbers or booleans (use 'eq' for strings), but 'high' is a string at column 29",
        ),
        (
            "[class,eq,'s'],[price,str-lt,100]",
            "operator 'str-lt' compares strings, but 100 is a number at column 30",
        ),
        ("[class,eq,'s'],[price,<,]", "expected a value after the operator at column 25"),
        // The same mistakes written alone, as in the PADRES examples: the first error wins.
        (
            "[attribute,=,'high']",
            "operator '=' compares numbers or booleans (use 'eq' for strings), but 'high' is a string at column 14",
        ),
        ("[price,str-lt,100]", "operator 'str-lt' compares strings, but 100 is a number at column 15"),
        ("[price,<,]", "expected a value after the operator at column 10"),
        ("[price,>,100]", "a subscription needs exactly one [class,eq,'...'] predicate at column 1"),
        (
            "[class,eq,'a'],[class,eq,'b']",
            "a subscription needs exactly one [class,eq,'...'] predicate at column 1",
        ),
        (
            "[class,str-prefix,'a']",
            "the class predicate must be [class,eq,'name'] (operator eq, a string value) at column 1",
        ),
        (
            "[class,eq,'s'],[p,==,1]",
            "unknown operator '==' (expected one of eq neq str-lt str-le str-gt str-ge str-prefix str-postfix str-contains str-regex = <> < <= > >= isPresent) at column 19",
        ),
        (
            "[class,eq,'s'],[p,>,99999999999999999999]",
            "number '99999999999999999999' is out of range at column 21",
        ),
        ("[class,eq,'s'],[p,>,1e999]", "number '1e999' is out of range at column 21"),
        ("[class,eq,'s'],[p,eq,'open]", "bad string: missing closing quote at column 22"),
        (
            "[class,eq,'s'],[p,eq,'a\\qb']",
            "bad string: unknown escape (use \\\\ \\' \\\" \\n \\t \\r \\0 \\u{hex}) at column 24",
        ),
        (
            "[class,eq,'s'],[p,>,$I$]",
            "expected a variable name (a letter or '_' first) after '$S$' or '$I$' at column 24",
        ),
        ("[class,eq,'s'],[p,>,$I$x]", "variable $I$x can only be used with '=' at column 21"),
        (
            "[class,eq,'s'],[p,eq,$S$x],[q,=,$I$x]",
            "variable 'x' is used both as $S$ (string) and as $I$ (number) at column 1",
        ),
        (
            "[class,eq,'s'],[t,>,2026-13-01T00:00:00Z]",
            "invalid timestamp '2026-13-01T00:00:00Z': expected RFC 3339 such as 2026-11-21T10:00:00Z, years 0000 to 9999, at most millisecond precision at column 21",
        ),
        ("[class,eq,'s'],[1p,>,1]", "expected an attribute name after '[' at column 17"),
        ("[class,eq,'s'],", "expected '[' to start a predicate at column 16"),
        ("", "expected a predicate at column 1"),
        ("[class,eq,'s']]", "expected end of input at column 15"),
        (
            "[class,eq,'s'],[m,str-regex,'(']",
            "invalid regular expression: regex parse error: ( ^ error: unclosed group at column 29",
        ),
    ];
    for (input, message) in cases {
        assert_eq!(sub_error(input), message, "for {input}");
    }
}

#[test]
fn rejects_a_regex_over_the_configured_size_limit() {
    let parser = Parser::new(Limits { regex_size_limit: 10_000, ..Limits::default() });
    assert!(parser.subscription("[class,eq,'log'],[msg,str-regex,'^ERR[0-9]+']").is_ok());
    let error =
        parser.subscription("[class,eq,'log'],[msg,str-regex,'(abc|def){500}']").expect_err("too large");
    let text = error.to_string();
    assert!(text.starts_with("invalid regular expression:"), "{text}");
    assert!(text.contains("size limit"), "{text}");
    assert!(text.ends_with("bytes at column 33"), "{text}");
}

#[test]
fn rejects_other_limits() {
    let parser = Parser::new(Limits {
        max_predicates: 2,
        max_text_len: 64,
        max_composite_depth: 3,
        ..Limits::default()
    });
    let e = parser.subscription("[class,eq,'s'],[a,>,1],[b,>,2]").expect_err("3 predicates");
    assert_eq!(e.to_string(), "number of predicates exceeds the limit of 2 at column 24");
    let e = parser.subscription(&format!("[class,eq,'{}']", "x".repeat(64))).expect_err("long");
    assert_eq!(e.to_string(), "text longer than the limit of 64 bytes at column 1");
    let e = parser.composite("{{{{[class,eq,a]}}}}").expect_err("deep");
    assert_eq!(e.to_string(), "composite subscription nested deeper than 3 levels at column 4");
}

#[test]
fn rejects_bad_publications_advertisements_and_composites() {
    let pub_error = |t: &str| t.parse::<Publication>().expect_err(t).to_string();
    assert_eq!(
        pub_error("[class,eq,'stock']"),
        "expected ']' after the value (a publication attribute is written [name,value]) at column 10"
    );
    assert_eq!(
        pub_error("[price,1]"),
        "a publication needs a [class,'name'] attribute with a string value at column 1"
    );
    assert_eq!(
        pub_error("[class,1]"),
        "a publication needs a [class,'name'] attribute with a string value at column 1"
    );
    assert_eq!(pub_error("[class,'a'],[x,1],[x,2]"), "attribute 'x' appears twice at column 19");
    assert_eq!(pub_error("[class,'a'] payload=0x123"), "expected an even number of hex digits at column 23");

    let adv_error = |t: &str| t.parse::<Advertisement>().expect_err(t).to_string();
    assert_eq!(
        adv_error("[class,eq,'a'],[x,eq,$S$v]"),
        "variables are not allowed in advertisements at column 22"
    );

    let cs_error = |t: &str| t.parse::<CompositeSubscription>().expect_err(t).to_string();
    assert_eq!(
        cs_error("{[class,eq,a]}&{[class,eq,b]}||{[class,eq,c]}"),
        "'&', '||' and ';' cannot be mixed without braces: write {A}&{{B}||{C}} at column 30"
    );
    assert_eq!(
        cs_error("{[class,eq,a]}&"),
        "expected '{' or 'Times(' to start a composite term at column 16"
    );
    assert_eq!(cs_error("{[class,eq,a]"), "expected ',' or '}' after predicate at column 14");
    assert_eq!(
        cs_error("Times({[class,eq,a]},0,v,1)"),
        "expected a repetition count of at least 1 at column 22"
    );
    assert_eq!(
        cs_error("Times({[class,eq,a]},1001,v,1)"),
        "count of a repetition exceeds the limit of 1000 at column 1"
    );
    assert!("Times({[class,eq,a]},1000,v,1)".parse::<CompositeSubscription>().is_ok());
    assert_eq!(
        cs_error("{[class,eq,a],[k,eq,$S$x]}&{[class,eq,b],[k,=,$I$x]}"),
        "variable 'x' is used both as $S$ (string) and as $I$ (number) at column 1"
    );
    assert_eq!(
        cs_error("{[class,eq,a]} within 10 s"),
        "expected a duration such as 500ms, 30s, 10m, 2h or 7d at column 23"
    );
    assert_eq!(
        cs_error("{[class,eq,a],[k,eq,$S$x]} until {[class,eq,end],[k,eq,$S$y]}"),
        "the until filter's variable y is not bound by the pattern at column 34"
    );
    assert_eq!(
        cs_error("{[class,eq,a]} until [class,eq,end]"),
        "expected '{' before the until filter at column 22"
    );
}

#[test]
fn messages_in_command_form() {
    let cases = [
        ("a [class,eq,'stock'],[price,>,0]", "a"),
        ("s [class,eq,'stock']", "s"),
        ("cs {[class,eq,a]}||{[class,eq,b]}", "cs"),
        ("p [class,'stock'],[price,1]", "p"),
        ("unsub B1/42", "unsub"),
        ("unadv broker-2/7", "unadv"),
    ];
    for (text, command) in cases {
        let m: Message = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(m.command(), command);
        assert_eq!(m.to_string().parse::<Message>().as_ref(), Ok(&m));
    }
    let error = |t: &str| t.parse::<Message>().expect_err(t).to_string();
    assert_eq!(error("x [class,eq,a]"), "expected a command: a, s, cs, p, unsub or unadv at column 1");
    assert_eq!(error("unsub 42"), "invalid message id '42': expected BROKER/NUMBER, e.g. B1/42 at column 7");
}

#[test]
fn limits_can_tighten_but_not_loosen() {
    let loose = Parser::new(Limits { max_predicates: 100_000, ..Limits::default() });
    let many: String = (0..1100).map(|i| format!(",[a{i},>,1]")).collect();
    let error = loose.subscription(&format!("[class,eq,'s']{many}")).expect_err("over the ceiling");
    assert!(error.to_string().starts_with("number of predicates exceeds the limit of 1024"), "{error}");
}
