//! Notifications as one JSON object per line, the shapes `padres session`, `padres sub
//! --json` and the broker's HTTP gateway all print:
//!
//! - a publication: `{"type":"notification","sub":"B1/3","subs":["B1/3"],"attrs":{"class":"stock","price":100}}`
//!   (`sub` is the first subscription matched, `subs` all of them);
//! - a composite subscription's match: `{"type":"notification","sub":"B1/4","pubs":[{"leaf":0,"attrs":{…}},{"leaf":1,"attrs":{…}}]}`
//!   (the publications used, each with its leaf);
//! - the end of a historic subscription's stored part:
//!   `{"type":"end_of_history","sub":"B1/5","count":42,"missing":[],"truncated":false}`
//!   (`missing`: the brokers whose stores did not answer in time).
//!
//! - the answer to request line `N`: `{"type":"reply","op":"s","line":N,"id":"B1/1"}` (`id`
//!   where one was given), or `{"type":"error","line":N,"message":…}`.
//!
//! Keys keep this order, and a publication's attributes their own. Numbers stay numbers,
//! timestamps become RFC 3339 strings, a payload becomes `"payload_hex"`.
//!
//! Requests come the other way as session lines, one command per line (`p [class,'x']`),
//! or a JSON array of them: [`request_lines`] reads either, as the HTTP gateway takes them.

use serde_json::{Map, Value as Json, json};

use crate::{Message, MessageId, Name, Parser, Publication, Value};

fn value(v: &Value) -> Json {
    match v {
        Value::Int(i) => json!(i),
        Value::Float(f) => json!(f),
        Value::Str(s) => json!(&**s),
        Value::Bool(b) => json!(b),
        Value::Time(t) => json!(t.to_rfc3339()),
    }
}

/// A publication's attributes as one JSON object, in their order (its payload left out).
pub fn attributes(publication: &Publication) -> Json {
    let attrs: Map<String, Json> =
        publication.attrs().iter().map(|(n, v)| (n.to_string(), value(v))).collect();
    Json::Object(attrs)
}

fn with_payload(mut object: Json, publication: &Publication) -> Json {
    if let Some(payload) = publication.payload() {
        object["payload_hex"] = json!(hex::encode(payload));
    }
    object
}

/// Why a body of request lines was refused: the line at fault (numbered from 1), if one
/// is, and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinesError {
    /// The line, if one line is at fault.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

/// The messages of `body`: one session line per line of text, or with `json_array` a JSON
/// array of lines (strings). Blank lines and `#` comments are skipped; every other line is
/// parsed with `parser`, and the first that does not parse refuses the whole body. Each
/// message comes with its line number (from 1, blank lines and comments counted).
pub fn request_lines(
    body: &str,
    json_array: bool,
    parser: &Parser,
) -> Result<Vec<(usize, Message)>, LinesError> {
    let lines: Vec<String> = if json_array {
        serde_json::from_str(body).map_err(|e| LinesError {
            line: None,
            message: format!("the body is not a JSON array of session lines (strings): {e}"),
        })?
    } else {
        body.lines().map(str::to_owned).collect()
    };
    let mut messages = Vec::new();
    for (at, text) in lines.iter().enumerate() {
        let (line, text) = (at + 1, text.trim());
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let message =
            parser.message(text).map_err(|e| LinesError { line: Some(line), message: e.to_string() })?;
        messages.push((line, message));
    }
    Ok(messages)
}

/// A publication matching `subs`.
pub fn publication(subs: &[MessageId], publication: &Publication) -> String {
    let ids: Vec<String> = subs.iter().map(ToString::to_string).collect();
    let first = ids.first().cloned().unwrap_or_default();
    let object =
        json!({ "type": "notification", "sub": first, "subs": ids, "attrs": attributes(publication) });
    with_payload(object, publication).to_string()
}

/// A match of composite subscription `sub`: the publications it used, each with its leaf.
pub fn composite<'a>(sub: &MessageId, pubs: impl IntoIterator<Item = (u32, &'a Publication)>) -> String {
    let pubs: Vec<Json> = pubs
        .into_iter()
        .map(|(leaf, p)| with_payload(json!({ "leaf": leaf, "attrs": attributes(p) }), p))
        .collect();
    json!({ "type": "notification", "sub": sub.to_string(), "pubs": pubs }).to_string()
}

/// The end of historic subscription `sub`'s stored part.
pub fn end_of_history(sub: &MessageId, count: u64, missing: &[Name], truncated: bool) -> String {
    let missing: Vec<String> = missing.iter().map(ToString::to_string).collect();
    json!({
        "type": "end_of_history",
        "sub": sub.to_string(),
        "count": count,
        "missing": missing,
        "truncated": truncated,
    })
    .to_string()
}

/// The reply to request line `line`, a message of command `op` (`a`, `s`, …), with the id
/// the broker gave it, if any.
pub fn reply(line: usize, op: &str, id: Option<&MessageId>) -> Json {
    let mut object = json!({ "type": "reply", "op": op, "line": line });
    if let Some(id) = id {
        object["id"] = json!(id.to_string());
    }
    object
}

/// The error that answers request line `line`, or nothing in particular (`None`).
pub fn error(line: Option<usize>, message: &str) -> Json {
    match line {
        Some(line) => json!({ "type": "error", "line": line, "message": message }),
        None => json!({ "type": "error", "message": message }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_come_numbered_as_written_from_text_or_a_json_array() {
        let parser = Parser::default();
        let text = "# quotes\na [class,eq,'q'],[n,isPresent,0]\n\n  p [class,'q'],[n,1]  \n";
        let read = request_lines(text, false, &parser).expect("reads");
        let lines: Vec<usize> = read.iter().map(|(line, _)| *line).collect();
        assert_eq!(lines, [2, 4], "comments and blank lines count, and are skipped");
        assert_eq!(read[1].1.command(), "p");
        let json = r#"["a [class,eq,'q'],[n,isPresent,0]", "", "p [class,'q'],[n,1]"]"#;
        let from_json = request_lines(json, true, &parser).expect("reads");
        assert_eq!(from_json.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(from_json[1].1, read[1].1);
    }

    #[test]
    fn a_body_is_refused_at_its_first_bad_line_or_as_a_whole() {
        let parser = Parser::default();
        let refused =
            request_lines("p [class,'q']\np [class,'q'\np [class", false, &parser).expect_err("refused");
        assert_eq!(refused.line, Some(2));
        assert!(!refused.message.is_empty());
        let refused = request_lines("[\"p [class,'q']\"", true, &parser).expect_err("refused");
        assert_eq!(refused.line, None);
        assert!(refused.message.contains("JSON array"), "{}", refused.message);
        let refused = request_lines("[1, 2]", true, &parser).expect_err("strings only");
        assert_eq!(refused.line, None);
    }

    #[test]
    fn attributes_keep_their_types() {
        let p: Publication =
            "[class,'stock'],[price,100],[ratio,0.5],[ok,true],[at,2026-11-21T10:00:00Z] payload=0x6869"
                .parse()
                .expect("valid");
        let ids: Vec<MessageId> = vec!["B1/3".parse().expect("id"), "B1/4".parse().expect("id")];
        let back: Json = serde_json::from_str(&publication(&ids, &p)).expect("json");
        assert_eq!(back["type"], "notification");
        assert_eq!(back["sub"], "B1/3");
        assert_eq!(back["subs"][1], "B1/4");
        assert_eq!(back["attrs"]["price"], 100);
        assert_eq!(back["attrs"]["ratio"], 0.5);
        assert_eq!(back["attrs"]["ok"], true);
        assert_eq!(back["attrs"]["at"], "2026-11-21T10:00:00.000Z");
        assert_eq!(back["payload_hex"], "6869");
    }

    #[test]
    fn a_composite_match_lists_its_publications_by_leaf() {
        let a: Publication = "[class,'a'],[k,'x']".parse().expect("valid");
        let b: Publication = "[class,'b'],[n,2]".parse().expect("valid");
        let sub: MessageId = "B2/7".parse().expect("id");
        let back: Json = serde_json::from_str(&composite(&sub, [(0, &a), (1, &b)])).expect("json");
        assert_eq!(back["type"], "notification");
        assert_eq!(back["sub"], "B2/7");
        assert_eq!(back["pubs"][0]["leaf"], 0);
        assert_eq!(back["pubs"][0]["attrs"]["k"], "x");
        assert_eq!(back["pubs"][1]["leaf"], 1);
        assert_eq!(back["pubs"][1]["attrs"]["n"], 2);
        assert!(back.get("attrs").is_none(), "a composite match has no top-level attrs");
    }

    #[test]
    fn lines_keep_the_documented_order_of_their_keys() {
        // Read by scripts as text too: `type` first, then `sub`, and a publication's
        // attributes in its own order (docs/composite.md, docs/history.md).
        let p: Publication = "[class,'stock'],[symbol,'IBM'],[price,100]".parse().expect("valid");
        let ids: Vec<MessageId> = vec!["B1/3".parse().expect("id")];
        assert_eq!(
            publication(&ids, &p),
            r#"{"type":"notification","sub":"B1/3","subs":["B1/3"],"attrs":{"class":"stock","symbol":"IBM","price":100}}"#
        );
        let sub: MessageId = "B2/7".parse().expect("id");
        let line = composite(&sub, [(0, &p)]);
        assert!(
            line.starts_with(
                r#"{"type":"notification","sub":"B2/7","pubs":[{"leaf":0,"attrs":{"class":"stock","#
            ),
            "{line}"
        );
        let end: MessageId = "B1/5".parse().expect("id");
        assert_eq!(
            end_of_history(&end, 42, &[], false),
            r#"{"type":"end_of_history","sub":"B1/5","count":42,"missing":[],"truncated":false}"#
        );
    }
}
