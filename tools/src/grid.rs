//! Plain-text tables: columns as wide as their widest cell, two spaces apart, no trailing blanks.

/// How a column's cells line up.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// The table's lines (each ending in a newline): `header`, then `rows`, aligned per `align` (columns not
/// listed are left-aligned). Widths count characters, so block characters line up too.
pub fn render<S: AsRef<str>>(header: &[&str], rows: &[Vec<S>], align: &[Align]) -> String {
    let width = |c: usize| {
        let cells = rows.iter().filter_map(|r| r.get(c)).map(|s| s.as_ref().chars().count());
        cells.chain([header[c].chars().count()]).max().unwrap_or(0)
    };
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let padded: Vec<String> = cells
            .zip(&widths)
            .enumerate()
            .map(|(c, (text, &w))| match align.get(c) {
                Some(Align::Right) => format!("{text:>w$}"),
                _ => format!("{text:<w$}"),
            })
            .collect();
        padded.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(&mut header.iter().copied());
    for row in rows {
        out += &line(&mut row.iter().map(AsRef::as_ref));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let rows = vec![vec!["a", "1", "x"], vec!["long name", "12,345", ""]];
        let out = render(&["NAME", "N", "NOTE"], &rows, &[Align::Left, Align::Right]);
        assert_eq!(out, "NAME            N  NOTE\na               1  x\nlong name  12,345\n");
        let bars = render(&["BAR"], &[vec!["██░"]], &[]);
        assert_eq!(bars, "BAR\n██░\n");
    }
}
