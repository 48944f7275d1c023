//! Sweeps and overrides: a `[sweep]` table of dotted keys to value lists, expanded into the
//! cartesian product of cells (first key outermost), and `--set key=value` overrides. Both are
//! applied to the TOML document before it is deserialized, so a swept value goes through exactly
//! the same schema and validation as a written one.

/// One axis of a sweep: a dotted key and the values it takes.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepAxis {
    pub key: String,
    pub values: Vec<toml::Value>,
}

/// Every combination of one value per axis, first axis outermost. No axes: one empty cell.
pub fn cartesian(axes: &[SweepAxis]) -> Vec<Vec<(String, toml::Value)>> {
    let mut cells: Vec<Vec<(String, toml::Value)>> = vec![Vec::new()];
    for axis in axes {
        cells = cells
            .into_iter()
            .flat_map(|cell| {
                axis.values.iter().map(move |value| {
                    let mut next = cell.clone();
                    next.push((axis.key.clone(), value.clone()));
                    next
                })
            })
            .collect();
    }
    cells
}

/// Sets the dotted `key` of `doc` to `value`, creating missing tables on the way. A part of the
/// key that names an array of tables (`[[replica]]`) sets the rest of the key in every one of
/// them (`replica.queue` is every replica group's queue).
pub fn apply(doc: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), String> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("`{key}` is not a dotted key"));
    }
    set(doc, &parts, 0, key, &value)
}

/// Sets `parts[depth..]` under `table` (whose path is `parts[..depth]`) to `value`.
fn set(
    table: &mut toml::Table,
    parts: &[&str],
    depth: usize,
    key: &str,
    value: &toml::Value,
) -> Result<(), String> {
    if depth + 1 == parts.len() {
        table.insert(parts[depth].to_string(), value.clone());
        return Ok(());
    }
    let entry = table
        .entry(parts[depth].to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    match entry {
        toml::Value::Table(inner) => set(inner, parts, depth + 1, key, value),
        toml::Value::Array(items) if !items.is_empty() && items.iter().all(|i| i.is_table()) => {
            for item in items {
                let inner = item.as_table_mut().expect("checked: every item is a table");
                set(inner, parts, depth + 1, key, value)?;
            }
            Ok(())
        }
        _ => Err(format!(
            "`{}` is not a table, so `{key}` cannot be set",
            parts[..=depth].join(".")
        )),
    }
}

/// Parses a `--set key=value` argument; the value is read as a TOML value, and as a plain string
/// when it is not one (so `--set scheduler.selector.kind=fcfs` needs no quotes).
pub fn parse_set(argument: &str) -> Result<(String, toml::Value), String> {
    if let Some(c) = argument.chars().find(|c| c.is_control()) {
        return Err(format!(
            "`{}` holds a {} ({}); give one key=value per --set",
            super::error::printable(argument),
            if c == '\n' || c == '\r' {
                "line break"
            } else {
                "control character"
            },
            c.escape_unicode()
        ));
    }
    let (key, raw) = argument
        .split_once('=')
        .ok_or_else(|| format!("`{argument}` is not of the form key=value"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("`{argument}` has an empty key"));
    }
    let raw = raw.trim();
    let value = match format!("value = {raw}").parse::<toml::Table>() {
        Ok(mut table) if table.len() == 1 => {
            table.remove("value").expect("the parsed table has the key")
        }
        Ok(_) => return Err(format!("`{key}`: {raw} is more than one value")),
        // An integer TOML cannot hold is a mistake, not a string.
        Err(_) if raw.trim_start_matches(['+', '-']).parse::<u128>().is_ok() => {
            return Err(format!(
                "`{key}`: {raw} does not fit a TOML integer (from -9223372036854775808 to \
                 9223372036854775807)"
            ));
        }
        Err(_) => toml::Value::String(raw.to_string()),
    };
    Ok((key.to_string(), value))
}

/// A cell's coordinates as `key=value` pairs joined by commas (stable, used as the cell id).
pub fn cell_id(coords: &[(String, toml::Value)]) -> String {
    coords
        .iter()
        .map(|(k, v)| format!("{k}={}", display_value(v)))
        .collect::<Vec<_>>()
        .join(",")
}

/// A value as a person writes it: strings bare, everything else as TOML.
pub fn display_value(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(key: &str, values: &[i64]) -> SweepAxis {
        SweepAxis {
            key: key.into(),
            values: values.iter().map(|v| toml::Value::Integer(*v)).collect(),
        }
    }

    #[test]
    fn cartesian_product_first_axis_outermost() {
        let cells = cartesian(&[axis("a", &[1, 2]), axis("b", &[10, 20, 30])]);
        assert_eq!(cells.len(), 6);
        let ids: Vec<String> = cells.iter().map(|c| cell_id(c)).collect();
        assert_eq!(ids[0], "a=1,b=10");
        assert_eq!(ids[2], "a=1,b=30");
        assert_eq!(ids[3], "a=2,b=10");
        assert_eq!(cartesian(&[]), vec![Vec::new()]);
    }

    #[test]
    fn apply_sets_nested_keys_and_refuses_to_descend_into_values() {
        let mut doc: toml::Table = "[arrival]\nrate_per_s = 1.0\nname = \"x\"\n"
            .parse()
            .unwrap();
        apply(&mut doc, "arrival.rate_per_s", toml::Value::Float(2.0)).unwrap();
        apply(
            &mut doc,
            "scheduler.selector.kind",
            toml::Value::String("fcfs".into()),
        )
        .unwrap();
        assert_eq!(doc["arrival"]["rate_per_s"].as_float(), Some(2.0));
        assert_eq!(doc["scheduler"]["selector"]["kind"].as_str(), Some("fcfs"));
        let err = apply(&mut doc, "arrival.name.x", toml::Value::Integer(1)).unwrap_err();
        assert!(err.contains("`arrival.name` is not a table"), "{err}");
        assert!(apply(&mut doc, "a..b", toml::Value::Integer(1)).is_err());
    }

    #[test]
    fn apply_through_an_array_of_tables_sets_every_table() {
        let mut doc: toml::Table = "[[replica]]\ncount = 1\n[[replica]]\ncount = 2\nx = [1]\n"
            .parse()
            .unwrap();
        apply(
            &mut doc,
            "replica.queue.kind",
            toml::Value::String("sjf".into()),
        )
        .unwrap();
        let groups = doc["replica"].as_array().unwrap();
        for (group, count) in groups.iter().zip([1, 2]) {
            assert_eq!(group["queue"]["kind"].as_str(), Some("sjf"));
            assert_eq!(group["count"].as_integer(), Some(count));
        }
        // An array of values is not descended into.
        let err = apply(&mut doc, "replica.x.y", toml::Value::Integer(1)).unwrap_err();
        assert!(err.contains("`replica.x` is not a table"), "{err}");
    }

    #[test]
    fn set_values_parse_as_toml_or_fall_back_to_strings() {
        assert_eq!(
            parse_set("workload.n_requests=500").unwrap().1,
            toml::Value::Integer(500)
        );
        assert_eq!(
            parse_set("seeds=[1, 2]")
                .unwrap()
                .1
                .as_array()
                .map(|a| a.len()),
            Some(2)
        );
        assert_eq!(
            parse_set("scheduler.selector.kind=fcfs").unwrap().1,
            toml::Value::String("fcfs".into())
        );
        assert!(parse_set("no_equals_sign").is_err());
        let err = parse_set("workload.n_requests=18446744073709551615").unwrap_err();
        assert!(err.contains("does not fit a TOML integer"), "{err}");
        assert!(parse_set("=5").is_err());
        // A second line would be dropped silently, and a raw escape echoed back.
        let err = parse_set("workload.n_requests=5\narrival.rate_per_s=-1").unwrap_err();
        assert!(err.contains("line break"), "{err}");
        assert!(!err.contains('\n'), "{err}");
        let err = parse_set("work\u{1b}[31mload.x=1").unwrap_err();
        assert!(
            err.contains("control character") && !err.contains('\u{1b}'),
            "{err}"
        );
    }
}
