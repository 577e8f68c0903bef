//! The `--json` wire format: one JSON object per line,
//! `{"type": "<kind>", "data": {...}}`. Every line printed with `--json` goes
//! through [`line`](fn@line), so the shape is in one place.

use serde::Serialize;

/// Serialises one JSON line of `kind` with `data`.
pub fn line<T: Serialize>(kind: &str, data: &T) -> String {
    #[derive(Serialize)]
    struct Line<'a, T> {
        #[serde(rename = "type")]
        kind: &'a str,
        data: &'a T,
    }
    serde_json::to_string(&Line { kind, data }).expect("report types always serialise")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_shape() {
        #[derive(Serialize)]
        struct D {
            x: u32,
        }
        assert_eq!(
            line("step", &D { x: 3 }),
            r#"{"type":"step","data":{"x":3}}"#
        );
    }
}
