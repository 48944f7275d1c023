//! What the scenario parser accepts, read from the parser itself: the variants of a kind enum
//! and the dotted keys of a family's tables, found by feeding serde a probe name where a kind or
//! a key goes and reading back the names its "unknown variant / unknown field ..., expected one
//! of ..." error lists. `expertsim list`'s kinds and the generated key tables
//! (docs/serving-family.md) are checked against these in tests, so they cannot drift from the
//! code that parses the keys.

use serde::de::DeserializeOwned;

/// A name no scenario uses: it sorts before every lower-case key, so a struct meets it first.
const PROBE: &str = "__probe__";

/// The names a serde error lists after "expected": `one of `a`, `b``, `` `a` or `b` ``,
/// `` `a` ``; empty for "there are no fields/variants". `None` when the message lists none.
pub fn expected_names(message: &str) -> Option<Vec<String>> {
    if message.contains("there are no fields") || message.contains("there are no variants") {
        return Some(Vec::new());
    }
    let listed = message.split_once("expected ")?.1;
    let listed = listed.strip_prefix("one of ").unwrap_or(listed);
    let names: Vec<String> = listed
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    (!names.is_empty()).then_some(names)
}

/// The names `T`'s enum accepts: as a plain string (`pattern = "poisson"`), or as the `kind` of
/// an internally tagged table (`{ kind = "fcfs" }`).
pub fn variants<T: DeserializeOwned>() -> Vec<String> {
    let plain = toml::Value::String(PROBE.into());
    let mut tagged = toml::Table::new();
    tagged.insert("kind".into(), plain.clone());
    for value in [plain, toml::Value::Table(tagged)] {
        if let Err(e) = T::deserialize(value)
            && let Some(names) = unknown(e.message(), "variant")
        {
            return names;
        }
    }
    panic!(
        "{} is not an enum of named kinds",
        std::any::type_name::<T>()
    )
}

/// The names listed by an "unknown `what` `__probe__`, expected ..." message.
fn unknown(message: &str, what: &str) -> Option<Vec<String>> {
    if message.contains(&format!("unknown {what} `{PROBE}`")) {
        expected_names(message)
    } else {
        None
    }
}

/// Every dotted key the tables that `parse` deserializes accept (`replica.scheduler.kind`,
/// `replica.scheduler.chunk_size`, ...), depth first in the order the parser lists them; a
/// table-valued key is listed before the keys inside it. `parse` deserializes a whole
/// document and returns the error's message.
pub fn keys(parse: &dyn Fn(toml::Value) -> Result<(), String>) -> Vec<String> {
    let mut found = Vec::new();
    walk(parse, &[], &mut found);
    found
}

/// One step of the way to a probed table: its key, whether it is an array of tables
/// (`[[figure]]`), and the `kind` it needs when it is a tagged table.
#[derive(Clone, Debug)]
struct Step {
    key: String,
    array: bool,
    kind: Option<String>,
}

/// The document whose only value is `leaf`, at the end of `path`.
fn document_at(path: &[Step], leaf: toml::Table) -> toml::Value {
    let mut inner = toml::Value::Table(leaf);
    for (i, step) in path.iter().enumerate().rev() {
        if step.array {
            inner = toml::Value::Array(vec![inner]);
        }
        let mut table = toml::Table::new();
        table.insert(step.key.clone(), inner);
        // The step's own table is the one inside it (`path[i + 1]`'s parent): its kind.
        if let Some(kind) = path.get(i.wrapping_sub(1)).and_then(|s| s.kind.clone()) {
            table.insert("kind".into(), toml::Value::String(kind));
        }
        inner = toml::Value::Table(table);
    }
    inner
}

/// A leaf table: the probe key, and `kind` when given.
fn leaf(kind: Option<&str>, kind_is_probe: bool) -> toml::Table {
    let mut table = toml::Table::new();
    if kind_is_probe {
        table.insert("kind".into(), toml::Value::String(PROBE.into()));
    } else {
        table.insert(PROBE.into(), toml::Value::Integer(0));
        if let Some(kind) = kind {
            table.insert("kind".into(), toml::Value::String(kind.into()));
        }
    }
    table
}

/// The message of parsing a document with `table` at the end of `path` (whose last step's
/// `kind` is in `table` itself, not added again).
fn probe(
    parse: &dyn Fn(toml::Value) -> Result<(), String>,
    path: &[Step],
    table: toml::Table,
) -> Option<String> {
    // The last step's kind goes into `table`, which is its table.
    let mut outer = path.to_vec();
    if let Some(last) = outer.last_mut() {
        last.kind = None;
    }
    parse(document_at(&outer, table)).err()
}

fn walk(parse: &dyn Fn(toml::Value) -> Result<(), String>, path: &[Step], found: &mut Vec<String>) {
    let name = |path: &[Step]| {
        path.iter()
            .map(|s| s.key.as_str())
            .collect::<Vec<_>>()
            .join(".")
    };
    let mut path = path.to_vec();
    let mut message = match probe(parse, &path, leaf(None, false)) {
        Some(m) => m,
        None => return,
    };
    if (message.contains("expected a sequence") || message.contains("expected a list"))
        && let Some(last) = path.last_mut()
    {
        last.array = true;
        message = match probe(parse, &path, leaf(None, false)) {
            Some(m) => m,
            None => return,
        };
    }
    let descend =
        |path: &[Step], fields: Vec<String>, kind: Option<&str>, found: &mut Vec<String>| {
            for field in fields {
                let mut inner = path.to_vec();
                if let Some(last) = inner.last_mut() {
                    last.kind = kind.map(str::to_string);
                }
                inner.push(Step {
                    key: field,
                    array: false,
                    kind: None,
                });
                let key = name(&inner);
                if !found.contains(&key) {
                    found.push(key);
                    walk(parse, &inner, found);
                }
            }
        };
    if let Some(fields) = unknown(&message, "field") {
        descend(&path, fields, None, found);
        return;
    }
    if !message.contains("missing field `kind`") {
        return;
    }
    // An internally tagged table: its kinds, then each kind's own keys.
    let kinds = probe(parse, &path, leaf(None, true))
        .and_then(|m| unknown(&m, "variant"))
        .unwrap_or_default();
    found.push(format!("{}.kind", name(&path)));
    for kind in kinds {
        let fields = probe(parse, &path, leaf(Some(&kind), false))
            .and_then(|m| unknown(&m, "field"))
            .unwrap_or_default();
        descend(&path, fields, Some(&kind), found);
    }
}

/// Every key of the common part of a scenario file (`scenario::file::CommonFile`), `sweep` and
/// `sweep_only`, which the loader expands before anything is deserialized.
pub fn common_keys() -> Vec<String> {
    let mut found = keys(&|value| {
        serde_path_to_error::deserialize::<_, super::CommonFile>(value)
            .map(|_| ())
            .map_err(|e| e.inner().message().to_string())
    });
    found.insert(0, "sweep".into());
    found.insert(1, "sweep_only".into());
    found
}

/// Every key of `family`'s own tables.
pub fn family_keys(family: crate::family::FamilyId) -> Vec<String> {
    keys(&|value| {
        family
            .registered()
            .deserialize(value)
            .map(|_| ())
            .map_err(|e| e.inner().message().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_serde_lists_are_read_in_each_of_its_forms() {
        let names = |m: &str| expected_names(m).unwrap();
        assert_eq!(
            names("unknown field `x`, expected one of `a`, `b`, `c`"),
            ["a", "b", "c"]
        );
        assert_eq!(
            names("unknown variant `x`, expected `a` or `b`"),
            ["a", "b"]
        );
        assert_eq!(names("unknown field `x`, expected `a`"), ["a"]);
        assert!(names("unknown field `x`, there are no fields").is_empty());
        assert_eq!(expected_names("invalid type: map, expected f64"), None);
    }

    #[test]
    fn variants_of_plain_and_tagged_enums() {
        assert_eq!(
            variants::<crate::arrivals::ArrivalPattern>(),
            ["poisson", "gamma", "bursty", "offline", "trace"]
        );
        assert_eq!(
            variants::<crate::serving_family::config::SchedulerTable>(),
            ["vllm", "sarathi", "orca", "static"]
        );
    }

    #[test]
    fn keys_reach_into_tables_arrays_of_tables_and_tagged_kinds() {
        let common = common_keys();
        for key in [
            "sweep",
            "name",
            "family",
            "seeds",
            "report.compare",
            "figure.with_improvement",
            "limits.max_runs",
        ] {
            assert!(common.contains(&key.to_string()), "{key}: {common:?}");
        }
        let serving = family_keys(crate::registry::family("serving").unwrap());
        for key in [
            "replica.scheduler.kind",
            "replica.scheduler.chunk_size",
            "routing.semantic_router.noise",
            "arrival.bursty.burst_topic_share",
            "adapters.memory.kind",
            "workload.prompt_tokens.median",
        ] {
            assert!(serving.contains(&key.to_string()), "{key}: {serving:?}");
        }
        assert!(!serving.iter().any(|k| k.contains(PROBE)), "{serving:?}");
    }
}
