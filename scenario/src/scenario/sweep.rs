//! Sweeps and overrides: a `[sweep]` table of dotted keys to value lists, expanded into the
//! cartesian product of cells (first key outermost), `sweep_only` to keep some cells of that
//! product, and `--set key=value` overrides. All are applied to the TOML document before it is
//! deserialized, so a swept value goes through exactly the same schema and validation as a
//! written one.

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

/// Reads `sweep_only`: a list of tables, each of sweep keys (or fields inside a table-valued
/// sweep key, such as `routing.kind`) to one value. Every key must be swept and every value among
/// the values `axes` give it, so a typo is refused rather than silently dropping cells. On error:
/// the field's path (`sweep_only[1].routing.kind`) and the message.
pub fn parse_only(
    value: toml::Value,
    axes: &[SweepAxis],
) -> Result<Vec<toml::Table>, (String, String)> {
    let toml::Value::Array(entries) = value else {
        return Err((
            "sweep_only".into(),
            "must be a list of tables of sweep keys to values, e.g. [{ \"routing.kind\" = \
             \"least_loaded\" }]"
                .into(),
        ));
    };
    let mut only = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        let toml::Value::Table(entry) = entry else {
            return Err((
                format!("sweep_only[{i}]"),
                "must be a table of sweep keys to values".into(),
            ));
        };
        if entry.is_empty() {
            return Err((
                format!("sweep_only[{i}]"),
                "names no sweep key, so it would keep every cell".into(),
            ));
        }
        for (key, wanted) in &entry {
            let at = format!("sweep_only[{i}].{key}");
            let Some(values) = swept_values(key, axes) else {
                return Err((
                    at,
                    format!(
                        "`{key}` is not a sweep key or a field of one (sweep keys: {})",
                        listed_keys(axes)
                    ),
                ));
            };
            if !values.iter().any(|v| same_value(v, wanted)) {
                let mut listed: Vec<String> = values.iter().map(|v| display_value(v)).collect();
                listed.dedup();
                return Err((
                    at,
                    format!(
                        "{} is not among the swept values of `{key}` ({})",
                        display_value(wanted),
                        listed.join(", ")
                    ),
                ));
            }
        }
        only.push(entry);
    }
    Ok(only)
}

/// The sweep's keys as an error lists them: `a, b`, or `none`.
pub fn listed_keys(axes: &[SweepAxis]) -> String {
    if axes.is_empty() {
        return "none".to_string();
    }
    axes.iter()
        .map(|a| a.key.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the cell at `coords` is kept by `only` (`sweep_only`): it matches one of the entries,
/// each key of which has the entry's value in the cell. No entries keep every cell.
pub fn keeps(only: &[toml::Table], coords: &[(String, toml::Value)]) -> bool {
    only.is_empty()
        || only.iter().any(|entry| {
            entry.iter().all(|(key, wanted)| {
                coord_field(coords, key).is_some_and(|value| same_value(value, wanted))
            })
        })
}

/// The cell's value of `key`: a sweep key's coordinate, or a field inside a table-valued one.
fn coord_field<'c>(coords: &'c [(String, toml::Value)], key: &str) -> Option<&'c toml::Value> {
    coords.iter().find_map(|(axis, value)| {
        if axis == key {
            Some(value)
        } else {
            let inner = key.strip_prefix(axis.as_str())?.strip_prefix('.')?;
            lookup(value, inner)
        }
    })
}

/// The values `key` takes over the sweep: a sweep key's values, or the field inside a
/// table-valued sweep key's values that have it; `None` when it is neither.
fn swept_values<'a>(key: &str, axes: &'a [SweepAxis]) -> Option<Vec<&'a toml::Value>> {
    axes.iter().find_map(|axis| {
        if axis.key == key {
            return Some(axis.values.iter().collect());
        }
        let inner = key.strip_prefix(axis.key.as_str())?.strip_prefix('.')?;
        let values: Vec<&toml::Value> = axis
            .values
            .iter()
            .filter_map(|v| lookup(v, inner))
            .collect();
        (!values.is_empty()).then_some(values)
    })
}

/// The field at dotted `inner` inside a table value.
pub(super) fn lookup<'v>(value: &'v toml::Value, inner: &str) -> Option<&'v toml::Value> {
    inner
        .split('.')
        .try_fold(value, |v, part| v.as_table().and_then(|t| t.get(part)))
}

/// Equal values, an integer equal to a float of the same number (`8` and `8.0`).
fn same_value(a: &toml::Value, b: &toml::Value) -> bool {
    match (a, b) {
        (toml::Value::Integer(i), toml::Value::Float(f))
        | (toml::Value::Float(f), toml::Value::Integer(i)) => *i as f64 == *f,
        _ => a == b,
    }
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

    fn table_axis(key: &str, kinds: &[&str]) -> SweepAxis {
        SweepAxis {
            key: key.into(),
            values: kinds
                .iter()
                .map(|k| {
                    let mut table = toml::Table::new();
                    table.insert("kind".into(), toml::Value::String(k.to_string()));
                    toml::Value::Table(table)
                })
                .collect(),
        }
    }

    fn only(text: &str) -> toml::Value {
        text.parse::<toml::Table>().unwrap().remove("only").unwrap()
    }

    #[test]
    fn sweep_only_keeps_the_cells_that_match_one_entry() {
        let axes = [
            table_axis("queue", &["fcfs", "stjf"]),
            table_axis("routing", &["least_loaded", "chimera"]),
            axis("rate", &[8, 16]),
        ];
        let entries = parse_only(
            only(r#"only = [{ "routing.kind" = "least_loaded" }, { "queue.kind" = "stjf", rate = 16.0 }]"#),
            &axes,
        )
        .unwrap();
        let kept: Vec<String> = cartesian(&axes)
            .into_iter()
            .filter(|c| keeps(&entries, c))
            .map(|c| {
                let kind = |i: usize| c[i].1["kind"].as_str().unwrap().to_string();
                format!("{}+{}@{}", kind(0), kind(1), c[2].1)
            })
            .collect();
        // Every queue with least-loaded routing; STJF with every router at rate 16 (an integer
        // coordinate matches the float 16.0).
        assert_eq!(
            kept,
            [
                "fcfs+least_loaded@8",
                "fcfs+least_loaded@16",
                "stjf+least_loaded@8",
                "stjf+least_loaded@16",
                "stjf+chimera@16"
            ]
        );
        assert!(cartesian(&axes).iter().all(|c| keeps(&[], c)));
    }

    #[test]
    fn sweep_only_refuses_keys_not_swept_and_values_not_swept() {
        let axes = [
            table_axis("routing", &["least_loaded", "chimera"]),
            axis("rate", &[8]),
        ];
        let (at, message) = parse_only(
            only(r#"only = [{ rate = 8 }, { "routing.kid" = "chimera" }]"#),
            &axes,
        )
        .unwrap_err();
        assert_eq!(at, "sweep_only[1].routing.kid");
        assert!(message.contains("not a sweep key"), "{message}");
        let (at, message) = parse_only(
            only(r#"only = [{ "routing.kind" = "least-loaded" }]"#),
            &axes,
        )
        .unwrap_err();
        assert_eq!(at, "sweep_only[0].routing.kind");
        assert!(
            message.contains("least-loaded is not among the swept values of `routing.kind` (least_loaded, chimera)"),
            "{message}"
        );
        let (at, _) = parse_only(only("only = [{}]"), &axes).unwrap_err();
        assert_eq!(at, "sweep_only[0]");
        let (at, _) = parse_only(only("only = [1]"), &axes).unwrap_err();
        assert_eq!(at, "sweep_only[0]");
        let (at, _) = parse_only(only(r#"only = "x""#), &axes).unwrap_err();
        assert_eq!(at, "sweep_only");
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
