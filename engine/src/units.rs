//! Human-written quantities on command lines: byte counts with binary
//! suffixes (`--bytes 2GiB`), shared by the `brook` tools and `brook bench`.

/// Parses a byte count: a plain number, or one with a binary suffix
/// (`KiB`, `MiB`, `GiB`, `TiB`; `K`, `M`, `G`, `T` mean the same).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits_end = text
        .find(|character: char| !character.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    let shift = match suffix.trim() {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        "T" | "TiB" => 40,
        other => return Err(format!("unknown size suffix {other:?} (use KiB, MiB, GiB)")),
    };
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a byte count"))?;
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_take_binary_suffixes() {
        let rows = [
            ("2147483648", Ok(2 << 30)),
            ("2GiB", Ok(2 << 30)),
            ("512 MiB", Ok(512 << 20)),
            ("64K", Ok(64 << 10)),
            ("1TiB", Ok(1 << 40)),
            ("7B", Ok(7)),
        ];
        for (text, expected) in rows {
            assert_eq!(parse_bytes(text), expected, "{text}");
        }
        for bad in [
            "",
            "GiB",
            "2GB",
            "-1",
            "1.5GiB",
            "99999999999999999999",
            "20000000TiB",
        ] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
