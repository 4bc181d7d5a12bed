//! Output: a table of aligned columns for people, or one JSON object per
//! line (`--format json`) for programs. Writes go through [`Out`], whose
//! errors are values (a closed pipe must not panic the tool, as `println!`
//! would).

use std::io::{BufWriter, Stdout, Write};

use serde::Serialize;

use crate::cli::{CliError, Format};

/// Standard output, buffered; flushed by [`Out::flush`] (and on drop).
#[derive(Debug)]
pub struct Out {
    writer: BufWriter<Stdout>,
}

impl Default for Out {
    fn default() -> Out {
        Out::new()
    }
}

impl Out {
    pub fn new() -> Out {
        Out {
            writer: BufWriter::new(std::io::stdout()),
        }
    }

    /// Writes `text` and a newline.
    pub fn line(&mut self, text: &str) -> Result<(), CliError> {
        writeln!(self.writer, "{text}").map_err(output_error)
    }

    /// Writes raw bytes (record values are not always UTF-8).
    pub fn bytes(&mut self, bytes: &[u8]) -> Result<(), CliError> {
        self.writer.write_all(bytes).map_err(output_error)
    }

    /// Writes `value` as one line of JSON.
    pub fn json<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CliError> {
        serde_json::to_writer(&mut self.writer, value)
            .map_err(|error| output_error(std::io::Error::other(error)))?;
        self.line("")
    }

    /// Writes `rows` as one JSON object each, or as the table `table` makes
    /// of them, then flushes.
    pub fn rows<T: Serialize>(
        &mut self,
        format: &Format,
        rows: &[T],
        table: impl FnOnce(&[T]) -> Table,
    ) -> Result<(), CliError> {
        match format {
            Format::Json => rows.iter().try_for_each(|row| self.json(row))?,
            _ => self.table(&table(rows))?,
        }
        self.flush()
    }

    /// Writes a table's rendering.
    pub fn table(&mut self, table: &Table) -> Result<(), CliError> {
        self.writer
            .write_all(table.render().as_bytes())
            .map_err(output_error)
    }

    pub fn flush(&mut self) -> Result<(), CliError> {
        self.writer.flush().map_err(output_error)
    }
}

fn output_error(source: std::io::Error) -> CliError {
    CliError::Io {
        operation: "writing the output".to_owned(),
        source,
    }
}

/// Rows under headers, each column as wide as its widest cell.
#[derive(Clone, Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|header| (*header).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells print empty, extra cells are kept.
    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: ToString,
    {
        self.rows
            .push(cells.into_iter().map(|cell| cell.to_string()).collect());
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The headers and rows, columns separated by two spaces, no trailing
    /// blanks.
    pub fn render(&self) -> String {
        let columns = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.headers.len()])
            .max()
            .unwrap_or(0);
        let mut widths = vec![0; columns];
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            for (column, cell) in row.iter().enumerate() {
                widths[column] = widths[column].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::new();
            for (column, cell) in row.iter().enumerate() {
                if column > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                let pad = widths[column] - cell.chars().count();
                line.extend(std::iter::repeat_n(' ', pad));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_their_widest_cell() {
        let mut table = Table::new(&["TOPIC", "PARTITIONS"]);
        table.row(["orders", "12"]);
        table.row(["a-much-longer-name", "1"]);
        assert_eq!(
            table.render(),
            "TOPIC               PARTITIONS\n\
             orders              12\n\
             a-much-longer-name  1\n"
        );
    }

    #[test]
    fn ragged_rows_and_no_rows_render() {
        let mut table = Table::new(&["A", "B"]);
        assert_eq!(table.render(), "A  B\n");
        table.row(["x"]);
        table.row(["y", "z", "extra"]);
        assert_eq!(table.render(), "A  B\nx\ny  z  extra\n");
    }
}
