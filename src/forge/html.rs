//! The HTML-error decoder: a short, markup-free account of an answer that
//! is not GitHub's JSON (a proxy's page, a load balancer's text).

/// Longest server text (a message, a page title, a body excerpt) quoted in
/// an error, in characters.
pub(super) const QUOTE_LIMIT: usize = 200;

/// What a body that is not GitHub's JSON is, in one short line without
/// markup: `empty body`, `an HTML page titled "…"`, `text "…"`.
pub(super) fn describe_body(body: &str) -> String {
    let t = body.trim_start_matches('\u{feff}').trim();
    if t.is_empty() {
        return "empty body".to_string();
    }
    if t.starts_with('<') {
        let lower = t.to_ascii_lowercase();
        let title = lower.find("<title").and_then(|start| {
            let open = start + lower[start..].find('>')? + 1;
            let close = open + lower[open..].find("</title")?;
            Some(t[open..close].to_string())
        });
        return match title.map(|s| html_text(&s)).filter(|s| !s.is_empty()) {
            Some(title) => format!("an HTML page titled \"{}\"", quote(&title)),
            None => "an HTML page".to_string(),
        };
    }
    format!("text \"{}\"", quote(&t.replace(['<', '>'], "")))
}

/// Text of an HTML fragment: entities decoded, tags and markup characters
/// dropped, whitespace collapsed.
pub(super) fn html_text(s: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    let decoded = decode_entities(&out);
    decoded
        .replace(['<', '>'], "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Decodes the HTML entities a title carries (`&middot;`, `&amp;`, `&#39;`…).
pub(super) fn decode_entities(s: &str) -> String {
    html_escape::decode_html_entities(s).into_owned()
}

/// Server text for a message: one line, at most [`QUOTE_LIMIT`] characters.
pub(super) fn quote(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > QUOTE_LIMIT {
        format!("{}…", line.chars().take(QUOTE_LIMIT).collect::<String>())
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forge::body::error_message;
    use http::StatusCode;

    #[test]
    fn bodies_that_are_not_githubs_json_are_described_briefly() {
        assert_eq!(describe_body(""), "empty body");
        assert_eq!(
            describe_body("<html><head><title>Unicorn! &middot; GitHub</title></head></html>"),
            "an HTML page titled \"Unicorn! · GitHub\""
        );
        assert_eq!(describe_body("<html><body>x</body></html>"), "an HTML page");
        assert_eq!(
            describe_body("upstream <b>reset</b>\n"),
            "text \"upstream breset/b\""
        );
        assert_eq!(
            error_message("", StatusCode::SERVICE_UNAVAILABLE),
            "Service Unavailable (empty body)"
        );
        assert_eq!(
            error_message(r#"{"message":"Bad credentials"}"#, StatusCode::UNAUTHORIZED),
            "Bad credentials"
        );
        assert_eq!(
            decode_entities("a &amp; b &#39;c&#x27; &bogus; &"),
            "a & b 'c' &bogus; &"
        );
        assert!(quote(&"x".repeat(500)).chars().count() <= QUOTE_LIMIT + 1);
    }

    /// The decoder is html-escape's now: every named entity, not the nine
    /// the hand-written one knew, and `&nbsp;` is a no-break space (U+00A0),
    /// which a title's whitespace collapsing still turns into one space.
    #[test]
    fn entities_beyond_the_old_nine_are_decoded_and_nbsp_collapses() {
        assert_eq!(decode_entities("&hellip;&copy;&rarr;"), "…©→");
        assert_eq!(decode_entities("a&nbsp;b"), "a\u{a0}b");
        assert_eq!(html_text("Down&nbsp;&middot;&nbsp;GitHub"), "Down · GitHub");
        assert_eq!(
            decode_entities("&#0; &#xZZ; &amp"),
            decode_entities("&#0; &#xZZ; &amp")
        );
    }
}
