//! Typed reads of a result row. The postgres crate's `Row::get` panics on a column of
//! another type or a NULL; Curio's schema can drift (a migration, a fork), so every column
//! the probe reads goes through [`get`], which turns either into a one-line error naming
//! `table.column` and the type found: `proofshare_meta.pprice is numeric, expected text`.

use postgres::types::{FromSql, Type};
use postgres::Row;

/// A Rust type the probe reads, with the SQL type it expects (for the error).
pub(super) trait Column<'a>: FromSql<'a> {
    const EXPECTED: &'static str;
}

impl Column<'_> for String {
    const EXPECTED: &'static str = "text";
}

impl Column<'_> for i64 {
    const EXPECTED: &'static str = "bigint";
}

impl Column<'_> for f64 {
    const EXPECTED: &'static str = "double precision";
}

impl Column<'_> for bool {
    const EXPECTED: &'static str = "boolean";
}

impl Column<'_> for Vec<bool> {
    const EXPECTED: &'static str = "boolean[]";
}

/// A column that may be NULL (None).
impl<'a, T: Column<'a>> Column<'a> for Option<T> {
    const EXPECTED: &'static str = T::EXPECTED;
}

/// Column `i` of `row` as `T`, or one line naming `column` (`table.column`, or what an
/// expression is computed from) and what it holds instead.
pub(super) fn get<'a, T: Column<'a>>(row: &'a Row, i: usize, column: &str) -> Result<T, String> {
    let Some(ty) = row.columns().get(i).map(|c| c.type_()) else {
        return Err(format!(
            "{column} is missing from the result ({} columns)",
            row.len()
        ));
    };
    if !T::accepts(ty) {
        return Err(format!(
            "{column} is {}, expected {}",
            sql_name(ty),
            T::EXPECTED
        ));
    }
    row.try_get::<_, T>(i).map_err(|e| {
        if matches!(row.try_get::<_, Option<T>>(i), Ok(None)) {
            format!("{column} is NULL, expected {}", T::EXPECTED)
        } else {
            let why = crate::secrets::redact::one_line(&e.to_string());
            format!(
                "{column} ({}) cannot be read as {}: {why}",
                sql_name(ty),
                T::EXPECTED
            )
        }
    })
}

/// A type as SQL spells it (`numeric`, `integer`, `boolean[]`), not PostgreSQL's internal
/// name (`int4`, `_bool`).
fn sql_name(ty: &Type) -> String {
    if let postgres::types::Kind::Array(inner) = ty.kind() {
        return format!("{}[]", sql_name(inner));
    }
    match ty.name() {
        "int2" => "smallint",
        "int4" => "integer",
        "int8" => "bigint",
        "float4" => "real",
        "float8" => "double precision",
        "bool" => "boolean",
        "varchar" => "character varying",
        "bpchar" => "character",
        "timestamptz" => "timestamp with time zone",
        other => other,
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_type_names_read_as_sql() {
        assert_eq!(sql_name(&Type::NUMERIC), "numeric");
        assert_eq!(sql_name(&Type::INT4), "integer");
        assert_eq!(sql_name(&Type::BOOL_ARRAY), "boolean[]");
        assert_eq!(sql_name(&Type::FLOAT8), "double precision");
        assert_eq!(<Option<String> as Column>::EXPECTED, "text");
    }

    /// No read of a row in the probe may panic: every column goes through [`get`].
    #[test]
    fn the_probe_never_calls_the_panicking_row_get() {
        for (name, source) in [
            ("read.rs", include_str!("read.rs")),
            ("mod.rs", include_str!("mod.rs")),
        ] {
            let code = source.split("#[cfg(test)]").next().unwrap_or(source);
            for bad in [".get(", ".get::<"] {
                let uses: Vec<&str> = code.lines().filter(|l| l.contains(bad)).collect();
                assert!(uses.is_empty(), "{name} calls Row::get: {uses:?}");
            }
        }
    }
}
