//! The hashes the controllers stamp objects with: a deterministic one that tells when a rollout
//! or a write is due, and a one-way one for values derived from Secrets. Pure.

use serde_json::Value;

/// A hash of a value derived from a Secret, for annotations: the first 16 bytes of SHA-256 over
/// its JSON with sorted keys, as hex. Unlike [`stable_hash`] it is one-way, so an annotation
/// tells nothing usable about the secret (as Helm's `checksum/secret` annotations).
pub fn secret_hash<T: serde::Serialize>(value: &T) -> String {
    let json = serde_json::to_value(value).unwrap_or(Value::Null);
    let mut text = String::new();
    canonical(&json, &mut text);
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A deterministic hash of a value: FNV-1a (64 bit) over its JSON with sorted keys, as 16 hex
/// digits. Stable across processes and versions, so it never causes a rollout by itself.
pub fn stable_hash<T: serde::Serialize>(value: &T) -> String {
    let json = serde_json::to_value(value).unwrap_or(Value::Null);
    let mut text = String::new();
    canonical(&json, &mut text);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// JSON with object keys sorted at every level, whatever serde_json's map order is.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hash_is_stable_and_order_independent() {
        let a = json!({"b": 1, "a": {"y": [1, 2], "x": "s"}});
        let b: Value =
            serde_json::from_str(r#"{"a": {"x": "s", "y": [1, 2]}, "b": 1}"#).expect("json");
        assert_eq!(stable_hash(&a), stable_hash(&b));
        assert_eq!(stable_hash(&a).len(), 16);
        assert_ne!(
            stable_hash(&a),
            stable_hash(&json!({"b": 2, "a": {"y": [1, 2], "x": "s"}}))
        );
        // Pinned (FNV-1a of `{"a":1}`): a changed hash function would roll every workload on upgrade.
        assert_eq!(stable_hash(&json!({"a": 1})), "9c3e82dd6fcae8b1");
    }

    #[test]
    fn the_secret_hash_is_one_way_and_stable() {
        let hash = secret_hash(&json!({"key": "sk-1"}));
        assert_eq!(hash.len(), 32);
        assert_eq!(hash, secret_hash(&json!({"key": "sk-1"})));
        assert_ne!(hash, secret_hash(&json!({"key": "sk-2"})));
    }
}
