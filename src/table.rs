//! Tables on the terminal, as the CLI prints them.

/// Rows under a header, each column as wide as its widest cell, two spaces apart.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = line(header, &widths) + "\n";
    for row in rows {
        out += &(line(row, &widths) + "\n");
    }
    out
}

/// One row of a table whose columns are `widths` wide, two spaces apart (the last one as it is).
pub fn line<S: AsRef<str>>(cells: &[S], widths: &[usize]) -> String {
    let mut out = String::new();
    for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
        if i + 1 == cells.len() {
            out.push_str(cell.as_ref());
        } else {
            out.push_str(&format!("{:<w$}  ", cell.as_ref()));
        }
    }
    out.trim_end().to_string()
}
