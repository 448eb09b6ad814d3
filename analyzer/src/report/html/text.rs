//! Text on the page.

/// Text made safe for HTML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The text of an HTML fragment as a terminal shows it: tags dropped, [`escape`]'s entities undone.
pub fn plain(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        out.push_str(&rest[..open]);
        rest = rest[open..].find('>').map_or("", |close| &rest[open + close + 1..]);
    }
    out.push_str(rest);
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// The page's answers as lines of text, in the page's order: the input problems, then each verdict that
/// says something (not the details under it).
pub fn headlines(html: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut rest = html;
    loop {
        let li = rest.find("<li><b>");
        let verdict = rest.find("<p class=\"verdict ");
        let (at, close) = match (li, verdict) {
            (Some(l), Some(v)) if l < v => (l, "</li>"),
            (Some(l), None) => (l, "</li>"),
            (_, Some(v)) => (v, "</p>"),
            (None, None) => break,
        };
        let Some(len) = rest[at..].find(close) else { break };
        let element = &rest[at..at + len];
        if !element.starts_with("<p class=\"verdict detail") {
            lines.push(plain(&without_links_aside(element)));
        }
        rest = &rest[at + len..];
    }
    lines
}

/// The fragment without its asides that only link elsewhere on the page (` (<a ...>table</a>)`).
fn without_links_aside(html: &str) -> String {
    let mut s = html.to_string();
    while let Some(at) = s.find(" (<a ") {
        let Some(len) = s[at..].find("</a>)") else { break };
        s.replace_range(at..at + len + 5, "");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headlines_read_as_the_page_words_them() {
        let html = format!(
            "<ul><li><b>INCOMPLETE INPUT</b>: {}</li></ul><p class=\"verdict bad\"><b>CULPRIT</b> step 0: \
             <a href=\"#f\"><code>a</code></a> fails (<a href=\"#e\">error</a>, <a href=\"#t\">table</a>)</p>\
             <p class=\"verdict detail\">more</p>",
            escape("segment 3 of <run> & 'more'")
        );
        assert_eq!(
            headlines(&html),
            ["INCOMPLETE INPUT: segment 3 of <run> & 'more'", "CULPRIT step 0: a fails"]
        );
    }
}
