//! Quoting for identifiers that come from config or the catalog.

/// Quotes an identifier the way PostgreSQL's `quote_ident` does, always.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    #[test]
    fn doubles_embedded_quotes() {
        assert_eq!(super::quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(super::quote_ident("Orders"), "\"Orders\"");
    }
}
