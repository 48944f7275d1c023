//! The dependency rules, checked from the sources. Between crates: each workspace crate's
//! `[dependencies]` name only the expertsim crates its row of `CRATE_LAYERS` allows (ARCHITECTURE.md's
//! table of what each crate may depend on), and those rows form no cycle; Cargo refuses a cycle of normal
//! dependencies itself, the rows also hold the direction (`expertsim-scenario` names no policy or plotting
//! crate, `core` no other expertsim crate). Inside a crate: the top-level modules of `expertsim-scenario`
//! (`scenario`, `registry`, `runner`, ...), of `expertsim-core` (`time`, `engine`,
//! `arrivals`, `validate`, ...) and of `expertsim-serving` (`serving`, `policies`, `recorder`,
//! `load_cache`, `family`, `serving_family`)
//! import one another without a cycle. `expertsim-cost` is one
//! node here as it was one module of `expertsim-scenario` before: its own modules are not held to the rule
//! (`kernel` and `moe_layer` name each other). Every non-test source is read, comments and string
//! literals blanked, `#[cfg(test)]` items and test-only files left out, and each
//! `crate::<module>` path (in `use` lines, grouped `use crate::{a, b::c}` included, and in code)
//! is an edge from the file's top-level module; a path to a module of a crate below (`expertsim-scenario`'s
//! `crate::arrivals`, a re-export of `expertsim_core::arrivals`) is no edge of `expertsim-scenario`'s graph.
//! Each graph must be acyclic, with no exception; a cycle fails the test naming each edge and a
//! line that makes it. A reviewer runs it with
//! `cargo test -p expertsim-scenario --lib module_graph_checks`.

use crate::one_engine_checks::rust_files;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace root, and the source folders of the crates whose modules are checked.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}
const SIM_SRC: &str = "scenario/src";
const CRATES_BELOW_SIM: &[&str] = &["core/src", "serving/src"];

/// `code` with comments, string literals and character literals replaced by spaces (newlines
/// kept), so braces and paths inside them are not read as code.
fn blank(code: &str) -> String {
    let bytes = code.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    let identifier = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    while i < bytes.len() {
        let rest = &code[i..];
        let end = if rest.starts_with("//") {
            i + rest.find('\n').unwrap_or(rest.len())
        } else if rest.starts_with("/*") {
            i + rest.find("*/").map_or(rest.len(), |e| e + 2)
        } else if rest.starts_with('r')
            && (i == 0 || !identifier(bytes[i - 1]))
            && rest[1..].trim_start_matches('#').starts_with('"')
        {
            let hashes = rest[1..].len() - rest[1..].trim_start_matches('#').len();
            let close = format!("\"{}", "#".repeat(hashes));
            let open = 2 + hashes;
            i + open
                + rest[open..]
                    .find(&close)
                    .map_or(rest.len() - open, |e| e + close.len())
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if bytes[i] == b'\'' {
            // A character literal ('x', '\n', '\u{7f}'); a lifetime ('a) is left alone.
            let literal = if rest[1..].starts_with('\\') {
                rest.get(3..).and_then(|r| r.find('\'')).map(|e| e + 4)
            } else {
                rest[1..]
                    .char_indices()
                    .nth(1)
                    .filter(|&(_, c)| c == '\'')
                    .map(|(e, _)| e + 2)
            };
            match literal {
                Some(length) => i + length,
                None => i + 1,
            }
        } else {
            i += 1;
            continue;
        };
        let end = end.min(bytes.len());
        for b in &mut out[i..end] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
        i = end;
    }
    String::from_utf8(out).expect("only ASCII bytes were replaced")
}

/// The end of the item that starts at `from`: past its `;`, or past the block its first `{`
/// opens; and the item's head (the text before that `;` or `{`).
fn item_end(code: &str, from: usize) -> (usize, &str) {
    let semicolon = code[from..].find(';').map(|e| from + e);
    let brace = code[from..].find('{').map(|e| from + e);
    match (semicolon, brace) {
        (Some(s), Some(b)) if s < b => (s + 1, &code[from..s]),
        (Some(s), None) => (s + 1, &code[from..s]),
        (_, Some(open)) => {
            let block = crate::one_engine_checks::block_at(code, open);
            (open + block.len(), &code[from..open])
        }
        (None, None) => (code.len(), &code[from..]),
    }
}

/// The blanked code of `path` without its `#[cfg(test)]` items, and the files those items
/// declare as test-only modules (`#[cfg(test)] mod tests;`, with or without `#[path]`).
fn without_test_items(path: &Path, original: &str) -> (String, Vec<PathBuf>) {
    let code = blank(original);
    let mut kept = String::new();
    let mut test_files = Vec::new();
    let mut at = 0;
    while let Some(found) = code[at..].find("#[cfg(test)]") {
        let start = at + found;
        kept.push_str(&code[at..start]);
        let mut item = start + "#[cfg(test)]".len();
        let mut path_attribute = None;
        loop {
            let rest = &code[item..];
            let trimmed = rest.trim_start();
            if !trimmed.starts_with("#[") {
                break;
            }
            let attribute_start = item + rest.len() - trimmed.len();
            let attribute_end = attribute_start + trimmed.find(']').unwrap() + 1;
            let attribute = &original[attribute_start..attribute_end];
            if let Some(value) = attribute.strip_prefix("#[path = \"") {
                path_attribute = Some(value.trim_end_matches("\"]").to_string());
            }
            item = attribute_end;
        }
        let (end, head) = item_end(&code, item);
        let words: Vec<&str> = head.split_whitespace().collect();
        let declares_file = code[..end].ends_with(';')
            && matches!(words.as_slice(), [.., "mod", _])
            && words.len() <= 3;
        if declares_file {
            let name = words.last().unwrap();
            let dir = path.parent().unwrap();
            match path_attribute {
                Some(relative) => test_files.push(dir.join(relative)),
                None => {
                    let stem = path.file_stem().unwrap();
                    let module_dir = if stem == "mod" || stem == "lib" {
                        dir.to_path_buf()
                    } else {
                        dir.join(stem)
                    };
                    test_files.push(module_dir.join(format!("{name}.rs")));
                    test_files.push(module_dir.join(name).join("mod.rs"));
                }
            }
        }
        kept.extend(
            code[start..end]
                .chars()
                .map(|c| if c == '\n' { c } else { ' ' }),
        );
        at = end;
    }
    kept.push_str(&code[at..]);
    (kept, test_files)
}

/// The top-level modules `code` names through `crate::` paths, with the line of each.
fn crate_paths(code: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let first_word = |text: &str| -> String {
        text.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        if at > 0 {
            let before = code.as_bytes()[at - 1];
            if before.is_ascii_alphanumeric() || before == b'_' || before == b'$' {
                continue;
            }
        }
        let after = &code[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            // `use crate::{a, b::{c, d}, e}`: the names at the group's own depth.
            let mut depth = 1usize;
            let mut starts = vec![0];
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => starts.push(i + 1),
                    _ => {}
                }
            }
            for start in starts {
                found.push((first_word(&group[start..]), line_of(at)));
            }
        } else {
            found.push((first_word(after), line_of(at)));
        }
    }
    found
}

/// The top-level module graph of the crate whose sources are in `crate_src` (relative to the
/// workspace root): module -> the modules it names -> one place that names it.
fn module_graph(crate_src: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let src = root().join(crate_src);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_stem()?.to_str()?.to_string();
            (p.is_dir() || p.extension().is_some_and(|e| e == "rs")).then_some(name)
        })
        .filter(|name| name != "lib")
        .collect();
    let mut kept = Vec::new();
    let mut test_files = BTreeSet::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let (code, tests) = without_test_items(path, &text);
        test_files.extend(tests);
        kept.push((path.clone(), code));
    }
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (path, code) in kept {
        let relative = path.strip_prefix(&src).unwrap();
        if test_files.contains(&path) || relative == Path::new("lib.rs") {
            continue;
        }
        let first = relative.components().next().unwrap().as_os_str();
        let from = Path::new(first).file_stem().unwrap().to_string_lossy();
        for (to, line) in crate_paths(&code) {
            if modules.contains(&to) && to != from {
                graph
                    .entry(from.to_string())
                    .or_default()
                    .entry(to)
                    .or_insert_with(|| format!("{crate_src}/{}:{line}", relative.display()));
            }
        }
    }
    graph
}

/// Fails naming a cycle of `graph`, each edge with a line that makes it.
fn assert_acyclic(graph: &BTreeMap<String, BTreeMap<String, String>>) {
    let kept: BTreeMap<String, BTreeSet<String>> = graph
        .iter()
        .map(|(from, to)| (from.clone(), to.keys().cloned().collect()))
        .collect();
    if let Some(cycle) = find_cycle(&kept) {
        let edges: Vec<String> = cycle
            .windows(2)
            .map(|pair| {
                format!(
                    "  {} -> {} ({})",
                    pair[0], pair[1], graph[&pair[0]][&pair[1]]
                )
            })
            .collect();
        panic!(
            "a module cycle: {}\n{}\nmove the shared piece below both modules (ARCHITECTURE.md, \
             \"Module dependencies\")",
            cycle.join(" -> "),
            edges.join("\n")
        );
    }
}

/// A cycle of `graph` as its modules in order (the first repeated at the end), if any.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, path) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

#[test]
fn the_check_reads_paths_and_skips_comments_strings_and_tests() {
    let code = blank(
        "use crate::{cost::gpu, serving::{A, B}, time};\n\
         // crate::gem in a comment\n\
         let s = \"crate::mosaic {\"; let c = '{'; let q = '\\''; let l: &'a str = r#\"crate::caps\"#;\n\
         crate::rng::stream(1, \"x\");\n",
    );
    let modules: Vec<String> = crate_paths(&code).into_iter().map(|(m, _)| m).collect();
    assert_eq!(modules, ["cost", "serving", "time", "rng"]);
    let (kept, files) = without_test_items(
        Path::new("/x/src/family.rs"),
        "use crate::a;\n#[cfg(test)]\nmod tests {\n use crate::b;\n}\n#[cfg(test)]\n\
         #[path = \"checks.rs\"]\nmod checks;\n#[cfg(test)]\nmod more;\nuse crate::c;\n",
    );
    let modules: Vec<String> = crate_paths(&kept).into_iter().map(|(m, _)| m).collect();
    assert_eq!(modules, ["a", "c"]);
    assert_eq!(
        files,
        [
            PathBuf::from("/x/src/checks.rs"),
            PathBuf::from("/x/src/family/more.rs"),
            PathBuf::from("/x/src/family/more/mod.rs"),
        ]
    );
    let cyclic: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(find_cycle(&cyclic).unwrap(), ["a", "b", "c", "a"]);
}

#[test]
fn the_top_level_modules_import_one_another_without_a_cycle() {
    let graph = module_graph(SIM_SRC);
    // The cycles stay broken (each edge is gone, not merely allowed). `cost -> serving`
    // and `cost -> scenario` are now Cargo's to refuse: `expertsim-cost` does not depend on `expertsim-scenario`;
    // so are `policies -> <family>`, `family -> <family>`, `family -> scenario` and
    // `serving -> <family>`: `expertsim-serving` (the `Family` trait below the families, the
    // registration list above them in `registry`) does not either (`serving -> recorder` is held
    // below, inside that crate).
    for (from, to) in [
        ("gem", "caps"),
        ("gem", "chimera"),
        ("mosaic", "chimera"),
        ("runner", "caps"),
        ("caps", "runner"),
        // The loader (`scenario`) is above the registry, and the claims file's name is the
        // loader's. The validation vocabulary and the arrivals are `expertsim-core`'s, the
        // shared file cache (`load_cache`) `expertsim-serving`'s: Cargo refuses their naming
        // `scenario`.
        ("scenario", "headlines"),
    ] {
        assert!(
            !graph
                .get(from)
                .is_some_and(|to_set| to_set.contains_key(to)),
            "{from} imports {to} again: {}",
            graph[from][to]
        );
    }
    assert_acyclic(&graph);
}

#[test]
fn the_modules_of_the_crates_below_sim_import_one_another_without_a_cycle() {
    for crate_src in CRATES_BELOW_SIM {
        let graph = module_graph(crate_src);
        assert!(!graph.is_empty(), "no module of {crate_src} names another");
        assert_acyclic(&graph);
    }
    // In `expertsim-core` the validation vocabulary is below the arrivals (which validate the
    // `[arrival]` table with it), and the recording vocabulary below nothing it records.
    let core = module_graph("core/src");
    for (from, to) in [
        ("validate", "arrivals"),
        ("metrics", "arrivals"),
        ("records", "metrics"),
        ("recorder", "arrivals"),
    ] {
        assert!(
            !core.get(from).is_some_and(|to_set| to_set.contains_key(to)),
            "core's {from} imports {to}: {}",
            core[from][to]
        );
    }
    // In `expertsim-serving` the replica is below its recorder (per-request latencies are the
    // replica's own, `serving::latencies`, which `recorder` re-exports).
    let serving = module_graph("serving/src");
    assert!(
        !serving
            .get("serving")
            .is_some_and(|to_set| to_set.contains_key("recorder")),
        "serving imports recorder: {}",
        serving["serving"]["recorder"]
    );
    // The serving family is the crate's top: the layers it is built from name none of it.
    for (from, to_set) in &serving {
        assert!(
            from == "serving_family" || !to_set.contains_key("serving_family"),
            "serving's {from} imports serving_family: {}",
            to_set
                .get("serving_family")
                .map_or("", |line| line.as_str())
        );
    }
}

/// The expertsim crates each workspace crate's `[dependencies]` may name (ARCHITECTURE.md's
/// table at the top), by package name; a crate's row lists every crate it may import, so a new
/// dependency that breaks the layering fails here even where Cargo sees no cycle.
const CRATE_LAYERS: &[(&str, &[&str])] = &[
    ("expertsim-core", &[]),
    ("expertsim-cost", &["expertsim-core"]),
    ("expertsim-figures", &[]),
    ("expertsim-serving", &["expertsim-core", "expertsim-cost"]),
    (
        "expertsim-scenario",
        &["expertsim-core", "expertsim-cost", "expertsim-serving"],
    ),
    (
        "expertsim-strategies",
        &["expertsim-core", "expertsim-cost", "expertsim-serving"],
    ),
    (
        "expertsim-kernels",
        &[
            "expertsim-core",
            "expertsim-cost",
            "expertsim-serving",
            "expertsim-scenario",
        ],
    ),
    (
        "expertsim-calibrate",
        &[
            "expertsim-core",
            "expertsim-cost",
            "expertsim-serving",
            "expertsim-scenario",
            "expertsim-kernels",
        ],
    ),
    (
        "expertsim-live",
        &[
            "expertsim-core",
            "expertsim-cost",
            "expertsim-serving",
            "expertsim-scenario",
            "expertsim-kernels",
            "expertsim-calibrate",
            "expertsim-figures",
        ],
    ),
    (
        "expertsim",
        &[
            "expertsim-scenario",
            "expertsim-strategies",
            "expertsim-figures",
            "expertsim-live",
            "expertsim-calibrate",
        ],
    ),
];

/// The crate graph as the manifests state it: each workspace crate's package name -> the
/// expertsim crates its `[dependencies]` name (dev-dependencies left out: Cargo allows a bench
/// or test to link a crate above), with the manifest that names each.
fn crate_graph() -> BTreeMap<String, BTreeMap<String, String>> {
    let read = |path: &Path| -> toml::Table {
        let text = std::fs::read_to_string(path).unwrap();
        toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let workspace = read(&root().join("Cargo.toml"));
    let aliases = workspace["workspace"]["dependencies"].as_table().unwrap();
    let package_of = |key: &str| -> String {
        aliases
            .get(key)
            .and_then(|spec| spec.get("package"))
            .and_then(|p| p.as_str())
            .unwrap_or(key)
            .to_string()
    };
    let members = workspace["workspace"]["members"].as_array().unwrap();
    let folders = members
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .chain(["".to_string()]);
    let mut graph = BTreeMap::new();
    for folder in folders {
        let manifest = root().join(&folder).join("Cargo.toml");
        let table = read(&manifest);
        let name = table["package"]["name"].as_str().unwrap().to_string();
        let mut names = BTreeMap::new();
        if let Some(dependencies) = table.get("dependencies").and_then(|d| d.as_table()) {
            for key in dependencies.keys() {
                let package = package_of(key);
                if package.starts_with("expertsim") {
                    let manifest = manifest.strip_prefix(root()).unwrap_or(&manifest);
                    names.insert(package, manifest.display().to_string());
                }
            }
        }
        graph.insert(name, names);
    }
    graph
}

/// What breaks the layering in `graph` (a crate -> the crates it depends on -> the manifest
/// that says so) against `layers`: a cycle among the rows, a crate without a row, a dependency
/// its row does not allow. Empty when the manifests keep the layering.
fn layering_problems(
    graph: &BTreeMap<String, BTreeMap<String, String>>,
    layers: &[(&str, &[&str])],
) -> Vec<String> {
    let rows: BTreeMap<&str, &[&str]> = layers.iter().copied().collect();
    let declared: BTreeMap<String, BTreeSet<String>> = layers
        .iter()
        .map(|(from, to)| (from.to_string(), to.iter().map(|t| t.to_string()).collect()))
        .collect();
    let mut problems = Vec::new();
    if let Some(cycle) = find_cycle(&declared) {
        problems.push(format!("the rows have a cycle: {}", cycle.join(" -> ")));
    }
    for (name, dependencies) in graph {
        let Some(allowed) = rows.get(name.as_str()) else {
            problems.push(format!(
                "{name} has no row: add one (and ARCHITECTURE.md's)"
            ));
            continue;
        };
        for (dependency, manifest) in dependencies {
            if !allowed.contains(&dependency.as_str()) {
                problems.push(format!(
                    "{name} depends on {dependency} ({manifest}), which its row does not allow"
                ));
            }
        }
    }
    problems
}

#[test]
fn each_crate_depends_only_on_the_crates_below_it() {
    let problems = layering_problems(&crate_graph(), CRATE_LAYERS);
    assert!(
        problems.is_empty(),
        "the crates break CRATE_LAYERS (ARCHITECTURE.md's table of what each crate may depend \
         on):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_layering_check_names_a_dependency_upwards_a_missing_row_and_a_cycle() {
    let graph = |edges: &[(&str, &str)]| -> BTreeMap<String, BTreeMap<String, String>> {
        let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (from, to) in edges {
            graph.entry(from.to_string()).or_default();
            if !to.is_empty() {
                let manifest = format!("{from}/Cargo.toml");
                graph
                    .get_mut(*from)
                    .unwrap()
                    .insert(to.to_string(), manifest);
            }
        }
        graph
    };
    let layers: &[(&str, &[&str])] = &[("core", &[]), ("sim", &["core"])];
    assert!(layering_problems(&graph(&[("core", ""), ("sim", "core")]), layers).is_empty());
    assert_eq!(
        layering_problems(&graph(&[("core", "sim"), ("sim", "core")]), layers),
        ["core depends on sim (core/Cargo.toml), which its row does not allow"]
    );
    assert_eq!(
        layering_problems(&graph(&[("core", ""), ("live", "core")]), layers),
        ["live has no row: add one (and ARCHITECTURE.md's)"]
    );
    let cyclic: &[(&str, &[&str])] = &[("core", &["sim"]), ("sim", &["core"])];
    assert_eq!(
        layering_problems(&graph(&[("core", "")]), cyclic),
        ["the rows have a cycle: core -> sim -> core"]
    );
}
