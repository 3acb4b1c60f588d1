//! How clients show a tool: its `title` and `icon` (MCP's `title` and `icons`). Labels
//! like the description: not part of the version id, checked so that what a client is
//! handed is well formed and small.

use base64::Engine as _;

/// Longest title kept: 200 bytes.
pub const MAX_TITLE_BYTES: usize = 200;
/// Largest icon kept (a `data:` URI or an URL): 64 KiB.
pub const MAX_ICON_BYTES: usize = 64 * 1024;

/// Image types an icon may have; MCP clients must support PNG and JPEG, should support
/// SVG and WebP.
const ICON_TYPES: &[&str] = &["image/png", "image/jpeg", "image/svg+xml", "image/webp"];

/// A title or icon that cannot be shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PresentationError {
    /// The title is empty, too long or holds control characters.
    #[error("invalid title: {0}")]
    Title(String),
    /// The icon is not an `https:` URL or a `data:` URI of an image.
    #[error("invalid icon: {0}")]
    Icon(String),
}

/// Checks a title: one line of at most [`MAX_TITLE_BYTES`] bytes, not blank.
pub fn check_title(title: &str) -> Result<(), PresentationError> {
    let bad = |why: &str| Err(PresentationError::Title(why.to_owned()));
    if title.trim().is_empty() {
        return bad("it is blank: give a few words, or leave the title out");
    }
    if title.len() > MAX_TITLE_BYTES {
        return bad(&format!("keep it under {MAX_TITLE_BYTES} bytes"));
    }
    if title.chars().any(char::is_control) {
        return bad("it holds a line break or control character: keep it to one line");
    }
    Ok(())
}

/// Checks an icon: an `https:` URL, or a `data:IMAGE-TYPE;base64,...` URI whose data
/// decodes, within [`MAX_ICON_BYTES`]. Answers its mime type when known.
pub fn check_icon(icon: &str) -> Result<Option<&'static str>, PresentationError> {
    let bad = |why: String| Err(PresentationError::Icon(why));
    if icon.len() > MAX_ICON_BYTES {
        return bad(format!(
            "it is {} bytes: keep it under {MAX_ICON_BYTES}",
            icon.len()
        ));
    }
    if let Some(rest) = icon.strip_prefix("data:") {
        let Some((kind, data)) = rest.split_once(";base64,") else {
            return bad("a data: URI must be data:IMAGE-TYPE;base64,DATA".into());
        };
        let Some(mime) = ICON_TYPES.iter().find(|t| **t == kind) else {
            return bad(format!(
                "{kind:?} is no icon type: use one of {}",
                ICON_TYPES.join(", ")
            ));
        };
        if base64::engine::general_purpose::STANDARD
            .decode(data)
            .is_err()
        {
            return bad("its data is not valid base64".into());
        }
        return Ok(Some(mime));
    }
    match url::Url::parse(icon) {
        Ok(url) if url.scheme() == "https" && url.host().is_some() => Ok(None),
        Ok(url) => bad(format!(
            "{}: is not allowed: give an https: URL or a data: URI",
            url.scheme()
        )),
        Err(e) => bad(format!(
            "not a URL ({e}): give an https: URL or a data: URI"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles() {
        assert_eq!(check_title("Weather lookup"), Ok(()));
        for title in ["", "  ", "two\nlines", &"x".repeat(MAX_TITLE_BYTES + 1)] {
            assert!(check_title(title).is_err(), "{title:?}");
        }
    }

    #[test]
    fn icons() {
        assert_eq!(check_icon("https://example.com/i.png"), Ok(None));
        assert_eq!(
            check_icon("data:image/png;base64,iVBORw0KGgo="),
            Ok(Some("image/png"))
        );
        for icon in [
            "http://example.com/i.png",
            "javascript:alert(1)",
            "file:///etc/passwd",
            "data:text/html;base64,PGI+",
            "data:image/png;base64,***",
            "data:image/png,raw",
            "not a url",
        ] {
            assert!(check_icon(icon).is_err(), "{icon:?}");
        }
        let big = format!("data:image/png;base64,{}", "A".repeat(MAX_ICON_BYTES));
        assert!(check_icon(&big).is_err());
    }
}
