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

/// The headlines as the terminal shows them: at most `listed` lines of those starting with `title` (the
/// page lists more of them), then one line counting the rest of the `total`, as the commands' lead does.
pub fn capped(lines: Vec<String>, title: &str, total: usize, listed: usize) -> Vec<String> {
    let prefix = format!("{title}: ");
    let mut seen = 0;
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        if !line.starts_with(&prefix) {
            out.push(line);
            continue;
        }
        seen += 1;
        if seen <= listed {
            out.push(line);
        } else if seen == listed + 1 {
            out.push(format!("{prefix}... and {} more (the page lists them)", total.saturating_sub(listed)));
        }
    }
    out
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

    #[test]
    fn the_terminal_lists_as_many_problems_as_the_commands() {
        let lines: Vec<String> = (0..12)
            .map(|i| format!("INCOMPLETE INPUT: rank {i}"))
            .chain(["CULPRIT step 0: a fails".to_string()])
            .collect();
        let shown = capped(lines.clone(), "INCOMPLETE INPUT", 12, 10);
        assert_eq!(shown.len(), 12);
        assert_eq!(shown[9], "INCOMPLETE INPUT: rank 9");
        assert_eq!(shown[10], "INCOMPLETE INPUT: ... and 2 more (the page lists them)");
        assert_eq!(shown[11], "CULPRIT step 0: a fails");
        // The page's own count line (past its 50) is among the rest.
        assert_eq!(capped(lines[..10].to_vec(), "INCOMPLETE INPUT", 10, 10), lines[..10].to_vec());
    }
}
