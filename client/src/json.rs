//! Notifications as one JSON object per line: `{"type":"notification","sub":"B1/3",
//! "subs":["B1/3"],"attrs":{"class":"stock","price":100}}` (`sub` is the first subscription
//! matched, `subs` all of them), and for a composite subscription's match
//! `{"type":"notification","sub":"B1/4","pubs":[{"leaf":0,"attrs":{…}},{"leaf":1,"attrs":{…}}]}`
//! (the publications used, each with its leaf). A historic subscription's stored part ends
//! with `{"type":"end_of_history","sub":"B1/5","count":42,"missing":[],"truncated":false}`
//! (`missing`: the brokers whose stores did not answer in time). Numbers stay numbers,
//! timestamps become RFC 3339 strings, a payload becomes `"payload_hex"`.

use padres_lang::{MessageId, Publication, Value};
use serde_json::{Map, Value as Json, json};

use crate::Notification;

fn value(v: &Value) -> Json {
    match v {
        Value::Int(i) => json!(i),
        Value::Float(f) => json!(f),
        Value::Str(s) => json!(&**s),
        Value::Bool(b) => json!(b),
        Value::Time(t) => json!(t.to_rfc3339()),
    }
}

fn attrs(publication: &Publication) -> Json {
    let attrs: Map<String, Json> =
        publication.attrs().iter().map(|(n, v)| (n.to_string(), value(v))).collect();
    Json::Object(attrs)
}

/// A publication matching `subs`, as one line of JSON.
pub fn publication(subs: &[MessageId], publication: &Publication) -> String {
    let ids: Vec<String> = subs.iter().map(ToString::to_string).collect();
    let first = ids.first().cloned().unwrap_or_default();
    let mut object =
        json!({ "type": "notification", "sub": first, "subs": ids, "attrs": attrs(publication) });
    if let Some(payload) = publication.payload() {
        object["payload_hex"] = json!(hex::encode(payload));
    }
    object.to_string()
}

/// Any notification as one line of JSON.
pub fn notification(notification: &Notification) -> String {
    match notification {
        Notification::Publication { subs, publication: p } => publication(subs, p),
        Notification::Composite { sub, pubs } => {
            let pubs: Vec<Json> = pubs
                .iter()
                .map(|(leaf, p)| {
                    let mut object = json!({ "leaf": leaf, "attrs": attrs(p) });
                    if let Some(payload) = p.payload() {
                        object["payload_hex"] = json!(hex::encode(payload));
                    }
                    object
                })
                .collect();
            json!({ "type": "notification", "sub": sub.to_string(), "pubs": pubs }).to_string()
        }
        Notification::EndOfHistory { sub, count, missing, truncated } => {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_keep_their_types() {
        let p: Publication =
            "[class,'stock'],[price,100],[ratio,0.5],[ok,true],[at,2026-11-21T10:00:00Z] payload=0x6869"
                .parse()
                .expect("valid");
        let ids: Vec<MessageId> = vec!["B1/3".parse().expect("id"), "B1/4".parse().expect("id")];
        let line = publication(&ids, &p);
        let back: Json = serde_json::from_str(&line).expect("json");
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
        let n = Notification::Composite { sub: "B2/7".parse().expect("id"), pubs: vec![(0, a), (1, b)] };
        let back: Json = serde_json::from_str(&notification(&n)).expect("json");
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
        let n = Notification::Composite { sub: "B2/7".parse().expect("id"), pubs: vec![(0, p)] };
        assert!(
            notification(&n).starts_with(
                r#"{"type":"notification","sub":"B2/7","pubs":[{"leaf":0,"attrs":{"class":"stock","#
            ),
            "{}",
            notification(&n)
        );
        let end = Notification::EndOfHistory {
            sub: "B1/5".parse().expect("id"),
            count: 42,
            missing: vec![],
            truncated: false,
        };
        assert_eq!(
            notification(&end),
            r#"{"type":"end_of_history","sub":"B1/5","count":42,"missing":[],"truncated":false}"#
        );
    }
}
