//! Notifications as one JSON object per line: `{"type":"notification","sub":"B1/3",
//! "subs":["B1/3"],"attrs":{"class":"stock","price":100}}` (`sub` is the first subscription
//! matched, `subs` all of them). Numbers stay numbers, timestamps become RFC 3339 strings, a
//! payload becomes `"payload_hex"`.

use padres_lang::{MessageId, Publication, Value};
use serde_json::{Map, Value as Json, json};

fn value(v: &Value) -> Json {
    match v {
        Value::Int(i) => json!(i),
        Value::Float(f) => json!(f),
        Value::Str(s) => json!(&**s),
        Value::Bool(b) => json!(b),
        Value::Time(t) => json!(t.to_rfc3339()),
    }
}

/// The notification as one line of JSON.
pub fn notification(subs: &[MessageId], publication: &Publication) -> String {
    let attrs: Map<String, Json> =
        publication.attrs().iter().map(|(n, v)| (n.to_string(), value(v))).collect();
    let ids: Vec<String> = subs.iter().map(ToString::to_string).collect();
    let first = ids.first().cloned().unwrap_or_default();
    let mut object = json!({ "type": "notification", "sub": first, "subs": ids, "attrs": attrs });
    if let Some(payload) = publication.payload() {
        object["payload_hex"] = json!(hex::encode(payload));
    }
    object.to_string()
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
        let line = notification(&ids, &p);
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
}
