//! The host's check of a rich result's parts, as the harness sent them: each part must
//! be one MCP knows (`text`, `image`, `audio`, `resource`, `resource_link`), its binary
//! data valid base64, its mime type well-formed and of its kind (an `image` part holds
//! `image/*`, and a PNG, JPEG, GIF or WebP holds what it says), its uri absolute; the
//! decoded bytes of all parts together within `return_bytes`, their text within
//! `return_char_limit`. A part that fails is refused with a sentence naming it; the
//! call then ends `tool_error`, never with a part nobody checked.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

use crate::limits::Limits;
use crate::outcome::{ContentPart, EmbeddedFile};

/// Most parts one result may hold.
pub const MAX_PARTS: usize = 100;

/// Why a result's parts were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContentError {
    /// Too many parts.
    #[error("the result has {count} parts; at most {MAX_PARTS} are allowed: combine them")]
    TooManyParts {
        /// How many.
        count: usize,
    },
    /// A part that is not what it says.
    #[error("part {index} of the result is refused: {reason}")]
    Invalid {
        /// Its index, from 0.
        index: usize,
        /// What is wrong, and what to do.
        reason: String,
    },
    /// More binary data than `return_bytes` allows.
    #[error(
        "the result's binary parts hold {bytes} bytes, more than the {limit} bytes its \
         return_bytes limit allows; return a smaller image or file, or raise return_bytes"
    )]
    TooLarge {
        /// Bytes, decoded.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// More text than `return_char_limit` allows.
    #[error(
        "the result's text parts hold {chars} characters, more than the {limit} its \
         return_char_limit allows; return less text, or raise return_char_limit"
    )]
    TooMuchText {
        /// Characters.
        chars: u64,
        /// The limit.
        limit: u64,
    },
}

impl ContentError {
    /// The exception name the caller sees in the call's `error.type`.
    pub fn kind(&self) -> &'static str {
        match self {
            ContentError::TooLarge { .. } | ContentError::TooMuchText { .. } => "ResultTooLarge",
            ContentError::TooManyParts { .. } | ContentError::Invalid { .. } => "InvalidContent",
        }
    }
}

/// The checked parts of a rich result.
pub fn check(parts: Vec<Value>, limits: &Limits) -> Result<Vec<ContentPart>, ContentError> {
    if parts.len() > MAX_PARTS {
        return Err(ContentError::TooManyParts { count: parts.len() });
    }
    let (mut bytes, mut chars) = (0u64, 0u64);
    let mut checked = Vec::with_capacity(parts.len());
    for (index, raw) in parts.into_iter().enumerate() {
        let invalid = |reason: String| ContentError::Invalid { index, reason };
        let part: ContentPart = serde_json::from_value(raw).map_err(|e| {
            invalid(format!(
                "{e}; a part is text, image, audio, resource or resource_link in MCP's shape"
            ))
        })?;
        match &part {
            ContentPart::Text { text } => chars += text.chars().count() as u64,
            ContentPart::Image { data, mime_type } => {
                bytes += binary(data, mime_type, "image", &invalid)?;
            }
            ContentPart::Audio { data, mime_type } => {
                bytes += binary(data, mime_type, "audio", &invalid)?;
            }
            ContentPart::Resource { resource } => {
                let EmbeddedFile {
                    uri,
                    mime_type,
                    text,
                    blob,
                } = resource;
                absolute_uri(uri).map_err(&invalid)?;
                mime(mime_type, None).map_err(&invalid)?;
                match (text, blob) {
                    (Some(text), None) => chars += text.chars().count() as u64,
                    (None, Some(blob)) => {
                        bytes += decode(blob).map_err(&invalid)?.len() as u64;
                    }
                    _ => {
                        return Err(invalid(
                            "an embedded resource holds either text or blob, exactly one".into(),
                        ));
                    }
                }
            }
            ContentPart::ResourceLink {
                uri,
                name,
                mime_type,
                ..
            } => {
                absolute_uri(uri).map_err(&invalid)?;
                if name.trim().is_empty() {
                    return Err(invalid("a link needs a name".into()));
                }
                if let Some(m) = mime_type {
                    mime(m, None).map_err(&invalid)?;
                }
            }
        }
        checked.push(part);
    }
    if bytes > limits.return_bytes.as_u64() {
        return Err(ContentError::TooLarge {
            bytes,
            limit: limits.return_bytes.as_u64(),
        });
    }
    let char_limit = u64::from(limits.return_chars.0);
    if chars > char_limit {
        return Err(ContentError::TooMuchText {
            chars,
            limit: char_limit,
        });
    }
    Ok(checked)
}

/// The decoded length of an image's or a sound's data, checked against its mime type.
fn binary(
    data: &str,
    mime_type: &str,
    kind: &str,
    invalid: &impl Fn(String) -> ContentError,
) -> Result<u64, ContentError> {
    mime(mime_type, Some(kind)).map_err(invalid)?;
    let bytes = decode(data).map_err(invalid)?;
    if bytes.is_empty() {
        return Err(invalid(format!("the {kind} is empty")));
    }
    if let Some(actual) = sniff(&bytes)
        && actual.starts_with(kind)
        && actual != mime_type
    {
        return Err(invalid(format!(
            "the {kind} says it is {mime_type} but its bytes are {actual}; pass the right \
             format"
        )));
    }
    Ok(bytes.len() as u64)
}

fn decode(data: &str) -> Result<Vec<u8>, String> {
    B64.decode(data)
        .map_err(|e| format!("its data is not base64 ({e})"))
}

/// A `type/subtype` of token characters (parameters allowed), of `kind` when given.
fn mime(mime_type: &str, kind: Option<&str>) -> Result<(), String> {
    let essence = mime_type.split(';').next().unwrap_or("").trim();
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    let well_formed = essence
        .split_once('/')
        .is_some_and(|(t, s)| token(t) && token(s));
    if !well_formed || mime_type.len() > 255 {
        return Err(format!(
            "{mime_type:?} is not a mime type such as image/png or text/plain"
        ));
    }
    if let Some(kind) = kind
        && !essence.starts_with(&format!("{kind}/"))
    {
        return Err(format!(
            "an {kind} part needs an {kind}/* mime type, not {mime_type:?}"
        ));
    }
    Ok(())
}

/// A uri with a scheme (`file:///x`, `https://...`, `test://y`).
fn absolute_uri(uri: &str) -> Result<(), String> {
    let scheme = uri.split_once(':').map(|(s, _)| s);
    let ok = scheme.is_some_and(|s| {
        s.starts_with(|c: char| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    if !ok || uri.len() > 8192 || uri.chars().any(char::is_whitespace) {
        return Err(format!(
            "{:?} is not an absolute uri such as file:///report.csv",
            uri.chars().take(100).collect::<String>()
        ));
    }
    Ok(())
}

/// The type the bytes' signature shows, for the formats worth telling apart.
fn sniff(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n', ..] => Some("image/png"),
        [0xff, 0xd8, 0xff, ..] => Some("image/jpeg"),
        [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => Some("image/gif"),
        [
            b'R',
            b'I',
            b'F',
            b'F',
            _,
            _,
            _,
            _,
            b'W',
            b'E',
            b'B',
            b'P',
            ..,
        ] => Some("image/webp"),
        [
            b'R',
            b'I',
            b'F',
            b'F',
            _,
            _,
            _,
            _,
            b'W',
            b'A',
            b'V',
            b'E',
            ..,
        ] => Some("audio/wav"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use bytesize::ByteSize;
    use serde_json::json;

    use super::*;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n0000";

    fn image(bytes: &[u8], mime: &str) -> Value {
        json!({"type": "image", "data": B64.encode(bytes), "mimeType": mime})
    }

    #[test]
    fn every_kind_passes_in_mcp_shape() {
        let parts = vec![
            json!({"type": "text", "text": "hi"}),
            image(PNG, "image/png"),
            json!({"type": "audio", "data": B64.encode(b"RIFF0000WAVEfmt "), "mimeType": "audio/wav"}),
            json!({"type": "resource", "resource": {"uri": "test://r", "mimeType": "text/plain", "text": "t"}}),
            json!({"type": "resource", "resource": {"uri": "file:///a.bin", "mimeType": "application/octet-stream", "blob": "AAE="}}),
            json!({"type": "resource_link", "uri": "https://example.com/r", "name": "r"}),
        ];
        let checked = check(parts, &Limits::default()).unwrap();
        assert_eq!(checked.len(), 6);
        assert!(
            matches!(&checked[1], ContentPart::Image { mime_type, .. } if mime_type == "image/png")
        );
    }

    #[test]
    fn a_bad_part_is_refused_by_its_index() {
        let cases = [
            (json!({"type": "video", "data": ""}), "video"),
            (image(PNG, "text/plain"), "image/*"),
            (
                json!({"type": "image", "data": "not base64!", "mimeType": "image/png"}),
                "base64",
            ),
            (image(PNG, "image/jpeg"), "its bytes are image/png"),
            (image(PNG, "png"), "not a mime type"),
            (
                json!({"type": "resource", "resource": {"uri": "relative", "mimeType": "text/plain", "text": "t"}}),
                "absolute uri",
            ),
            (
                json!({"type": "resource", "resource": {"uri": "a:b", "mimeType": "text/plain"}}),
                "exactly one",
            ),
            (
                json!({"type": "text", "text": "x", "extra": 1}),
                "unknown field",
            ),
        ];
        for (part, says) in cases {
            let e = check(
                vec![json!({"type": "text", "text": "ok"}), part.clone()],
                &Limits::default(),
            )
            .unwrap_err();
            let text = e.to_string();
            assert!(text.starts_with("part 1 "), "{part}: {text}");
            assert!(text.contains(says), "{part}: {text}");
            assert_eq!(e.kind(), "InvalidContent");
        }
    }

    #[test]
    fn binary_and_text_budgets_hold() {
        let limits = Limits {
            return_bytes: ByteSize::b(12),
            ..Limits::default()
        };
        assert!(check(vec![image(PNG, "image/png")], &limits).is_ok());
        let e = check(
            vec![image(PNG, "image/png"), image(PNG, "image/png")],
            &limits,
        )
        .unwrap_err();
        assert_eq!(
            e,
            ContentError::TooLarge {
                bytes: 24,
                limit: 12
            }
        );
        assert_eq!(e.kind(), "ResultTooLarge");
        let few = Limits {
            return_chars: crate::limits::CharLimit(3),
            ..Limits::default()
        };
        let e = check(vec![json!({"type": "text", "text": "four"})], &few).unwrap_err();
        assert!(e.to_string().contains("return_char_limit"), "{e}");
        let many = vec![json!({"type": "text", "text": ""}); MAX_PARTS + 1];
        assert!(matches!(
            check(many, &Limits::default()),
            Err(ContentError::TooManyParts { .. })
        ));
    }
}
