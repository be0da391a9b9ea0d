//! SQL identifiers, quoted.

/// Quotes an SQL identifier (a name from config or the catalog) the way PostgreSQL's
/// `quote_ident` would, but always: nothing is interpolated into SQL unquoted.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    #[test]
    fn quote_ident_doubles_embedded_quotes() {
        assert_eq!(super::quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(super::quote_ident("Orders"), "\"Orders\"");
    }
}
