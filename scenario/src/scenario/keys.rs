//! The documented keys of a scenario file, as rows (key, default, meaning) that the docs'
//! generated key tables are rendered from: the common keys every family shares here, a
//! family's own beside its config (`serving_family::keys`). A test per table holds the rendered
//! markdown in the docs equal to the rows and every key the parser accepts (`schema`) covered
//! by a row, so the tables cannot go stale.

use crate::family::KeyDoc;

const fn row(key: &'static str, default: &'static str, meaning: &'static str) -> KeyDoc {
    KeyDoc {
        key,
        default,
        meaning,
    }
}

/// The keys every family's scenario file shares (`scenario::file::CommonFile`, and `[sweep]`).
pub const COMMON: &[KeyDoc] = &[
    row(
        "name",
        "(required)",
        "the scenario's name: results go to `results/<name>/` (letters, digits, `-`, `_`, `.`)",
    ),
    row("description", "`\"\"`", "one line, echoed in results.json"),
    row(
        "family",
        "(required)",
        "which simulator family reads the other tables: `mosaic` or `serving` (`expertsim list` lists them); a missing or unknown one is refused with the \
         list, a retired one (`caps`, `gem`, `expertweave`, `chimera`, now presets of `serving`) with the \
         keys its preset writes",
    ),
    row(
        "seeds",
        "`[42]`",
        "one run per seed in every sweep cell; the summary table prints seed means, \
         results.json every run and the across-seed mean, std and 95 % CI",
    ),
    row(
        "[sweep]",
        "none",
        "dotted keys to lists of values, e.g. `\"arrival.rate_per_s\" = [5, 10, 20]`: one cell \
         per combination (the cartesian product, in the order written); `--set` on a swept key \
         narrows it",
    ),
    row(
        "sweep_only",
        "none (every cell)",
        "a list of tables of sweep keys (or fields of table-valued ones, e.g. `routing.kind`) to \
         one value each: only the cells that match one table are run, e.g. `[{ \"routing.kind\" = \
         \"least_loaded\" }, { \"replica.queue.kind\" = \"stjf\" }]`; `--set 'sweep_only=[]'` runs \
         every cell",
    ),
    row(
        "[report]",
        "none",
        "`compare` (a sweep key) and `baseline` (one of its values): the summary table and \
         results.json add each cell's change against the baseline cell (positive = better)",
    ),
    row(
        "[[figure]]",
        "none",
        "one figure per table, PNG and SVG under `figures/`: `name` (file stem), `title`, `kind` \
         (`metric` by default; `expertsim list` lists the kinds), `metrics`, `x`, `series`, \
         `panels`, `points`, `select` (only cells with these values), `log_y`, \
         `categorical_x`, `x_label`, `y_label`, `with_improvement` (a row of the change \
         against the `[report]` baseline); ARCHITECTURE.md, \"Figures\". Without one, `run` \
         draws the headline metrics over the first sweep key",
    ),
    row(
        "[limits]",
        "docs/limits.md",
        "ceilings on what the scenario may ask for, each raisable: `max_requests`, \
         `max_sim_seconds`, `max_tokens_per_request`, `max_experts`, `max_layers`, \
         `max_topics`, `max_routing_entries`, `max_gpus`, `max_trace_steps`, `max_adapters`, \
         `max_samples`, `max_cells`, `max_runs`",
    ),
];

/// The rows as a markdown table.
pub fn markdown(rows: &[KeyDoc]) -> String {
    let mut out = String::from("| key | default | meaning |\n|---|---|---|\n");
    for r in rows {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            r.key, r.default, r.meaning
        ));
    }
    out
}

/// The dotted keys a row documents (`[arrival]` -> `arrival`; `a, b` -> both).
fn row_keys(row: &KeyDoc) -> impl Iterator<Item = &str> {
    row.key
        .split(", ")
        .map(|k| k.trim_start_matches('[').trim_end_matches(']'))
}

/// Whether some row of `rows` documents `key` (see [`KeyDoc`]): a row of that key; a table
/// whose keys have rows (`workload` for `workload.n_requests`); a tagged table's `kind` under a
/// documented key; or a key under a row's key whose last part that row's meaning names.
pub fn covered(rows: &[KeyDoc], key: &str) -> bool {
    let (parent, leaf) = key.rsplit_once('.').unwrap_or(("", key));
    rows.iter().any(|row| {
        row_keys(row).any(|documented| {
            documented == key
                || documented
                    .strip_prefix(key)
                    .is_some_and(|rest| rest.starts_with('.'))
                || key.strip_prefix(documented).is_some_and(|rest| {
                    rest.starts_with('.') && row.meaning.contains(&format!("`{leaf}`"))
                })
        })
    }) || (leaf == "kind" && !parent.is_empty() && covered(rows, parent))
}

/// The keys of `accepted` no row of `rows` covers.
pub fn uncovered(rows: &[KeyDoc], accepted: &[String]) -> Vec<String> {
    accepted
        .iter()
        .filter(|k| !covered(rows, k))
        .cloned()
        .collect()
}

/// Replaces the text between `<!-- {marker}:begin -->` and `<!-- {marker}:end -->` in the doc
/// at `path` with `generated` when `EXPERTSIM_WRITE_DOCS` is set; else asserts it is that text.
#[cfg(test)]
pub(crate) fn check_generated(path: &std::path::Path, marker: &str, generated: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    let (begin, end) = (
        format!("<!-- {marker}:begin -->\n"),
        format!("<!-- {marker}:end -->"),
    );
    let start = text
        .find(&begin)
        .unwrap_or_else(|| panic!("{} has no {begin}", path.display()))
        + begin.len();
    let stop = text
        .find(&end)
        .unwrap_or_else(|| panic!("{} has no {end}", path.display()));
    if std::env::var_os("EXPERTSIM_WRITE_DOCS").is_some() {
        let rewritten = format!("{}{generated}{}", &text[..start], &text[stop..]);
        std::fs::write(path, rewritten).unwrap();
        return;
    }
    assert_eq!(
        &text[start..stop],
        generated,
        "{} is out of date with its key rows; regenerate it with EXPERTSIM_WRITE_DOCS=1 cargo \
         test -p expertsim-scenario keys",
        path.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_common_key_the_parser_accepts_has_a_row() {
        let missing = uncovered(COMMON, &super::super::schema::common_keys());
        assert!(missing.is_empty(), "undocumented common keys: {missing:?}");
    }

    #[test]
    fn a_row_covers_its_key_and_the_keys_its_meaning_names() {
        let rows = [row("[report]", "none", "`compare` and `baseline`")];
        assert!(covered(&rows, "report"));
        assert!(covered(&rows, "report.compare"));
        assert!(!covered(&rows, "report.other"));
        assert!(!covered(&rows, "reporting.compare"));
        let rows = [row("replica.scheduler", "vllm", "the kind")];
        assert!(covered(&rows, "replica.scheduler.kind"));
        let rows = [row("w.prompt, w.output", "", "`value`")];
        assert!(covered(&rows, "w"), "a table of documented keys");
        assert!(covered(&rows, "w.output.value"));
        assert!(!covered(&rows, "w.output.low"));
    }
}
