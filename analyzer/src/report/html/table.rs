//! A table on the page: sortable by heading, filterable, cut at [`MAX_ROWS`] with where the rest is.

use super::text::escape;
use crate::report::fmt_num;

/// Most rows a table carries; the command's CSV has them all.
pub const MAX_ROWS: usize = 2000;

/// A cell: text, and a number to sort by when it has one.
pub enum Cell {
    Text(String),
    Code(String),
    Num(f64),
    Count(u64),
}

pub struct Table<'a> {
    pub id: &'a str,
    pub title: &'a str,
    pub headings: &'a [&'a str],
    pub rows: Vec<(Option<String>, Vec<Cell>)>,
    pub total: usize,
    /// Where all the rows are when the table is cut.
    pub rest: &'a str,
}

impl Table<'_> {
    pub fn write(&self, page: &mut String) {
        page.push_str(&format!(
            "<div class=\"table\" id=\"{}-box\"><h3>{} ({})</h3><p><input class=\"filter\" type=\"search\" placeholder=\"filter rows\" data-table=\"{}\"> <span class=\"count\"></span></p>",
            self.id,
            escape(self.title),
            self.total,
            self.id
        ));
        if self.total > self.rows.len() {
            page.push_str(&format!(
                "<p class=\"small\">The first {} of {} rows; {}.</p>",
                self.rows.len(),
                self.total,
                escape(self.rest)
            ));
        }
        page.push_str(&format!("<table id=\"{}\" class=\"sortable\"><thead><tr>", self.id));
        for h in self.headings {
            page.push_str(&format!("<th>{}</th>", escape(h)));
        }
        page.push_str("</tr></thead><tbody>");
        for (id, cells) in &self.rows {
            match id {
                Some(id) => page.push_str(&format!("<tr id=\"{id}\">")),
                None => page.push_str("<tr>"),
            }
            for cell in cells {
                match cell {
                    Cell::Text(t) => page.push_str(&format!("<td>{}</td>", escape(t))),
                    Cell::Code(t) => page.push_str(&format!("<td><code>{}</code></td>", escape(t))),
                    Cell::Num(v) => {
                        page.push_str(&format!("<td data-v=\"{}\">{}</td>", sort_key(*v), fmt_num(*v)))
                    }
                    Cell::Count(n) => page.push_str(&format!("<td data-v=\"{n}\">{n}</td>")),
                }
            }
            page.push_str("</tr>");
        }
        page.push_str("</tbody></table></div>\n");
    }
}

/// A number the script sorts by: inf and NaN (the worst) last in ascending order.
fn sort_key(v: f64) -> String {
    if v.is_finite() {
        format!("{v:e}")
    } else {
        "1e308".into()
    }
}
