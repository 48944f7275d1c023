//! Numbers in the reproduction's prose: finds the `<!-- value:<family>/<id> -->text<!-- /value -->`
//! spans of a document and the `{value:<id>}` placeholders of a claim's explanation, rewrites
//! them from rendered values, and checks the prose (docs/reproduction.md, "How a claim is
//! judged"): every span names a declared value and says what its run renders, every declared
//! value is used, and every other number in a family's prose lies in a phrase the family declares
//! as the paper's (its numbers in the paper's text) or as an input (its numbers in the file that
//! sets it).

use super::Headlines;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::Path;

const SPAN_OPEN: &str = "<!-- value:";
const SPAN_CLOSE: &str = "<!-- /value -->";
const COMMENT_END: &str = " -->";
const PLACEHOLDER_OPEN: &str = "{value:";

/// Whether `id` is a value id: letters, digits, `-` and `_`.
pub fn is_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// One value span of a document.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub family: String,
    pub id: String,
    /// The 1-based line it starts on.
    pub line: usize,
    /// The text between the markers.
    pub text: Range<usize>,
    /// The span from its opening marker to the end of its closing one.
    pub whole: Range<usize>,
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// The byte ranges of `text` that are code: fenced blocks (whole lines) and inline code
/// (backtick pairs within a line).
fn code_ranges(text: &str) -> Vec<Range<usize>> {
    let mut code = Vec::new();
    let mut offset = 0;
    let mut fenced = false;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            code.push(offset..offset + line.len());
        } else if fenced {
            code.push(offset..offset + line.len());
        } else {
            let mut open = None;
            for (i, c) in line.char_indices() {
                if c == '`' {
                    match open.take() {
                        None => open = Some(i),
                        Some(start) => code.push(offset + start..offset + i + 1),
                    }
                }
            }
        }
        offset += line.len();
    }
    code
}

/// The value spans of `doc`, in order (a marker inside code is text, not a span); an opening
/// marker without its id or closing marker on the same line is an error naming the line.
pub fn spans(doc: &str) -> Result<Vec<Span>, String> {
    let code = code_ranges(doc);
    let in_code = |at: usize| code.iter().any(|c| c.contains(&at));
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(found) = doc[from..].find(SPAN_OPEN) {
        let start = from + found;
        if in_code(start) {
            from = start + SPAN_OPEN.len();
            continue;
        }
        let line = line_of(doc, start);
        let line_end = doc[start..].find('\n').map_or(doc.len(), |n| start + n);
        let name_start = start + SPAN_OPEN.len();
        let name_end = doc[name_start..line_end]
            .find(COMMENT_END)
            .map(|n| name_start + n)
            .ok_or_else(|| format!("line {line}: `{SPAN_OPEN}` without ` -->` on its line"))?;
        let name = &doc[name_start..name_end];
        let (family, id) = name
            .split_once('/')
            .filter(|(f, i)| is_id(f) && is_id(i))
            .ok_or_else(|| {
                format!("line {line}: `{name}` is not `<family>/<id>` (letters, digits, - and _)")
            })?;
        let text_start = name_end + COMMENT_END.len();
        let text_end = doc[text_start..line_end]
            .find(SPAN_CLOSE)
            .map(|n| text_start + n)
            .ok_or_else(|| {
                format!("line {line}: value `{name}` has no `{SPAN_CLOSE}` on its line")
            })?;
        if doc[text_start..text_end].contains("<!--") {
            return Err(format!("line {line}: value `{name}` holds another marker"));
        }
        spans.push(Span {
            family: family.to_string(),
            id: id.to_string(),
            line,
            text: text_start..text_end,
            whole: start..text_end + SPAN_CLOSE.len(),
        });
        from = text_end + SPAN_CLOSE.len();
    }
    let stray = doc
        .match_indices(SPAN_CLOSE)
        .map(|(at, _)| at)
        .find(|&at| !in_code(at) && !spans.iter().any(|s| s.whole.end == at + SPAN_CLOSE.len()));
    if let Some(stray) = stray {
        return Err(format!(
            "line {}: `{SPAN_CLOSE}` without its opening marker",
            line_of(doc, stray)
        ));
    }
    Ok(spans)
}

/// `doc` with the text of every span of a family in `rendered` (family -> id -> text) replaced
/// by its value's text; a span of such a family naming no value of it is an error.
pub fn rewrite_spans(
    doc: &str,
    rendered: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<String, String> {
    let mut out = String::with_capacity(doc.len());
    let mut copied = 0;
    for span in spans(doc)? {
        let Some(values) = rendered.get(&span.family) else {
            continue;
        };
        let text = values.get(&span.id).ok_or_else(|| {
            format!(
                "line {}: value `{}/{}` is not declared in the {} family's headlines.toml",
                span.line, span.family, span.id, span.family
            )
        })?;
        out.push_str(&doc[copied..span.text.start]);
        out.push_str(text);
        copied = span.text.end;
    }
    out.push_str(&doc[copied..]);
    Ok(out)
}

/// The `{value:<id>}` placeholders of `text`, with their byte ranges.
pub fn placeholders(text: &str) -> Vec<(String, Range<usize>)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(PLACEHOLDER_OPEN) {
        let start = from + at;
        let id_start = start + PLACEHOLDER_OPEN.len();
        match text[id_start..].find('}') {
            Some(n) if is_id(&text[id_start..id_start + n]) => {
                found.push((
                    text[id_start..id_start + n].to_string(),
                    start..id_start + n + 1,
                ));
                from = id_start + n + 1;
            }
            _ => from = id_start,
        }
    }
    found
}

/// `text` with every placeholder replaced by its value's text (`rendered`: id -> text); an
/// unknown id is left as written (`load` refuses it).
pub fn fill_placeholders(text: &str, rendered: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for (id, range) in placeholders(text) {
        if let Some(value) = rendered.get(&id) {
            out.push_str(&text[copied..range.start]);
            out.push_str(value);
            copied = range.end;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// Each family's section of `doc`: the level-2 section (from a `## ` heading to the next `# ` or
/// `## ` heading outside fenced code) holding the family's `<!-- generated:<family>:begin -->`
/// marker.
pub fn family_sections(doc: &str) -> Vec<(String, Range<usize>)> {
    let mut starts: Vec<usize> = Vec::new();
    let mut at = 0;
    let mut fenced = false;
    for line in doc.split_inclusive('\n') {
        fenced ^= line.trim_start().starts_with("```");
        if !fenced && (line.starts_with("## ") || line.starts_with("# ")) {
            starts.push(at);
        }
        at += line.len();
    }
    starts.push(doc.len());
    let mut sections = Vec::new();
    for pair in starts.windows(2) {
        let section = &doc[pair[0]..pair[1]];
        if !section.starts_with("## ") {
            continue;
        }
        let family = section.find("<!-- generated:").and_then(|begin| {
            let rest = &section[begin + "<!-- generated:".len()..];
            rest.find(":begin -->")
                .map(|n| &rest[..n])
                .filter(|f| is_id(f))
        });
        if let Some(family) = family {
            sections.push((family.to_string(), pair[0]..pair[1]));
        }
    }
    sections
}

/// The numbers of `text`: a digit run (with `.` or `,` between digits, an `x` of a speedup or a
/// `K` of thousands after it) that is not part of a name: not preceded by a letter, digit, `_`,
/// `.` or a hyphen after a letter (`Llama-4`), nor followed by another letter (`8B`, `H200`).
pub fn number_tokens(text: &str) -> Vec<Range<usize>> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let at = |i: usize| chars.get(i).map(|&(_, c)| c);
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i].1;
        let starts = c.is_ascii_digit()
            && match i.checked_sub(1).and_then(at) {
                None => true,
                Some(p) if p.is_alphanumeric() || p == '_' || p == '.' => false,
                Some('-') => !i
                    .checked_sub(2)
                    .and_then(at)
                    .is_some_and(|q| q.is_alphabetic()),
                Some(_) => true,
            };
        if !starts {
            // Skip a word whole, so that its later digits do not start a number.
            let in_word = |c: char| c.is_alphanumeric() || c == '_';
            i += 1;
            if in_word(c) {
                while at(i).is_some_and(in_word) {
                    i += 1;
                }
            }
            continue;
        }
        let mut end = i;
        while let Some(c) = at(end) {
            let joins = (c == '.' || c == ',') && at(end + 1).is_some_and(|d| d.is_ascii_digit());
            if c.is_ascii_digit() || joins {
                end += 1;
            } else {
                break;
            }
        }
        let after = at(end);
        let ends_word = |j: usize| !at(j).is_some_and(|c| c.is_alphanumeric() || c == '_');
        let (is_number, stop) = match after {
            Some('x' | 'K') if ends_word(end + 1) => (true, end + 1),
            Some(c) if c.is_alphabetic() || c == '_' => (false, end),
            _ => (true, end),
        };
        let byte = |j: usize| chars.get(j).map_or(text.len(), |&(b, _)| b);
        if is_number {
            tokens.push(byte(i)..byte(stop));
        }
        i = stop.max(i + 1);
        while !is_number && at(i).is_some_and(|c| c.is_alphanumeric() || c == '_') {
            i += 1;
        }
    }
    tokens
}

/// The digits of a number token (no separators, no `x` or `K`).
fn digits(token: &str) -> String {
    token
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == '.')
        .collect()
}

/// Words after which a number names a part of a paper, not a quantity.
const REFERENCE_WORDS: &[&str] = &[
    "Figure",
    "Table",
    "Section",
    "section",
    "Observation",
    "Appendix",
    "appendix",
    "point",
];

/// A family's prose with everything that is not prose blanked (same byte offsets): generated
/// sections, HTML comments (value spans with their text), fenced and inline code, link targets
/// and list markers; and the numbers of references in it (`Figure 9`, `section 3.3.4`).
fn checked_text(section: &str) -> (String, Vec<Range<usize>>) {
    let mut blank: Vec<Range<usize>> = Vec::new();
    let mut from = 0;
    while let Some(b) = section[from..].find("<!-- generated:") {
        let begin = from + b;
        let end = section[begin..]
            .find(":end -->")
            .map_or(section.len(), |e| begin + e + ":end -->".len());
        blank.push(begin..end);
        from = end;
    }
    let mut from = 0;
    while let Some(b) = section[from..].find("<!--") {
        let begin = from + b;
        let end = section[begin..]
            .find("-->")
            .map_or(section.len(), |e| begin + e + 3);
        // A value span's text goes with it.
        let end = match section[begin..].starts_with(SPAN_OPEN) {
            true => section[end..]
                .find(SPAN_CLOSE)
                .map_or(end, |e| end + e + SPAN_CLOSE.len()),
            false => end,
        };
        blank.push(begin..end);
        from = end;
    }
    let code = code_ranges(section);
    let mut offset = 0;
    for line in section.split_inclusive('\n') {
        let in_code = code.iter().any(|c| c.contains(&offset));
        let trimmed = line.trim_start();
        let marker = trimmed
            .find(|c: char| !c.is_ascii_digit())
            .filter(|&n| !in_code && n > 0 && trimmed[n..].starts_with(". "));
        if let Some(n) = marker {
            let start = offset + line.len() - trimmed.len();
            blank.push(start..start + n + 1);
        }
        let mut from = 0;
        while let Some(l) = line[from..].find("](") {
            let start = from + l;
            let end = line[start..]
                .find(')')
                .map_or(line.len(), |e| start + e + 1);
            blank.push(offset + start..offset + end);
            from = end;
        }
        offset += line.len();
    }
    blank.extend(code);
    let mut bytes = section.as_bytes().to_vec();
    for range in &blank {
        for b in &mut bytes[range.clone()] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    // References: a number (or a list `9, 5 and 6`) right after a reference word.
    let tokens = number_tokens(&text);
    let mut references = Vec::new();
    let mut previous_was_reference = false;
    let mut previous_end = 0;
    for token in tokens {
        let before = text[..token.start].trim_end();
        let word_start = before
            .char_indices()
            .rev()
            .find(|&(_, c)| !c.is_alphabetic())
            .map_or(0, |(n, c)| n + c.len_utf8());
        let word = before[word_start..].trim_end_matches('s');
        let between = text[previous_end..token.start].trim();
        let continues = previous_was_reference && matches!(between, "," | "and" | ", and" | "/");
        previous_was_reference = REFERENCE_WORDS.contains(&word) || continues;
        if previous_was_reference {
            references.push(token.clone());
        }
        previous_end = token.end;
    }
    (text, references)
}

/// `text` with every run of whitespace made one space, and for each byte of the result the
/// offset of the byte it came from.
fn squeeze(text: &str) -> (String, Vec<usize>) {
    let mut out = String::with_capacity(text.len());
    let mut origin = Vec::with_capacity(text.len());
    let mut in_space = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if !in_space {
                out.push(' ');
                origin.push(i);
            }
            in_space = true;
        } else {
            in_space = false;
            let start = out.len();
            out.push(c);
            origin.extend(std::iter::repeat_n(i, out.len() - start));
        }
    }
    origin.push(text.len());
    (out, origin)
}

/// The byte ranges of `text` (squeezed) covered by some occurrence of a phrase (squeezed), and
/// the phrases that occur nowhere.
fn covered_by<'a>(text: &str, phrases: &[&'a str]) -> (Vec<Range<usize>>, Vec<&'a str>) {
    let mut covered = Vec::new();
    let mut absent = Vec::new();
    for phrase in phrases {
        let (wanted, _) = squeeze(phrase.trim());
        let mut from = 0;
        let mut found = false;
        while let Some(at) = text[from..].find(&wanted) {
            covered.push(from + at..from + at + wanted.len());
            from += at + wanted.len().max(1);
            found = true;
        }
        if !found {
            absent.push(*phrase);
        }
    }
    (covered, absent)
}

/// What the claims test knows of one value: its text rendered from the quick variant of its
/// run, and whether the quick run read the very cells (same settings, same seeds) the full run
/// does, so that the document's text must equal it.
#[derive(Clone, Debug, PartialEq)]
pub struct QuickRendering {
    pub text: String,
    pub same_cells_as_full: bool,
}

/// One family's headlines and its values rendered on the quick runs.
pub struct FamilyProse<'a> {
    pub headlines: &'a Headlines,
    pub quick: BTreeMap<String, QuickRendering>,
}

/// Every problem of `doc`'s prose against the families' values and declarations (see the
/// module's first line); each names the document's or the headlines file's line.
pub fn check_document(doc_path: &Path, doc: &str, families: &[FamilyProse]) -> Vec<String> {
    let doc_name = doc_path.display();
    let mut problems = Vec::new();
    let spans = match spans(doc) {
        Ok(spans) => spans,
        Err(e) => return vec![format!("{doc_name}: {e}")],
    };
    let mut used: BTreeSet<(String, String)> = BTreeSet::new();
    for span in &spans {
        let at = format!("{doc_name}:{}", span.line);
        let Some(family) = families.iter().find(|f| f.headlines.family == span.family) else {
            problems.push(format!(
                "{at}: value `{}/{}`: no such family",
                span.family, span.id
            ));
            continue;
        };
        let Some(value) = family.headlines.values.iter().find(|v| v.id == span.id) else {
            problems.push(format!(
                "{at}: value `{}/{}` is not declared in {}",
                span.family,
                span.id,
                family.headlines.path.display()
            ));
            continue;
        };
        used.insert((span.family.clone(), span.id.clone()));
        let written = &doc[span.text.clone()];
        let rendering = family.quick.get(&value.id);
        if let Some(rendering) = rendering.filter(|r| r.same_cells_as_full && written != r.text) {
            problems.push(format!(
                "{at}: value `{}/{}` says `{written}`, but its run gives `{}` (run `expertsim \
                 reproduce {}`)",
                span.family, span.id, rendering.text, span.family
            ));
        }
    }
    for family in families {
        let headlines = family.headlines;
        let name = &headlines.family;
        let file = headlines.path.display();
        let mut texts: Vec<(String, String)> = Vec::new();
        for claim in &headlines.claims {
            for (key, text) in [
                ("known_deviation", &claim.known_deviation),
                ("by_construction", &claim.by_construction),
                ("seed_sensitive", &claim.seed_sensitive),
                ("baseline_mismatch", &claim.baseline_mismatch),
            ] {
                if let Some(text) = text {
                    for (id, _) in placeholders(text) {
                        used.insert((name.clone(), id));
                    }
                    texts.push((format!("{file}: claim {} {key}", claim.id), text.clone()));
                }
            }
        }
        for input in &headlines.inputs {
            for text in [&input.name, &input.value, &input.how, &input.source] {
                for (id, _) in placeholders(text) {
                    used.insert((name.clone(), id));
                }
            }
        }
        for value in &headlines.values {
            if !used.contains(&(name.clone(), value.id.clone())) {
                problems.push(format!(
                    "{file}: value `{}` is used by no span of {doc_name}, no explanation and no \
                     input",
                    value.id
                ));
            }
            match (family.quick.get(&value.id), &value.quick) {
                (None, _) => {}
                (Some(r), Some(_)) if r.same_cells_as_full => problems.push(format!(
                    "{file}: value `{}` declares a `quick` text, but its quick run reads the \
                     full run's cells: drop it",
                    value.id
                )),
                (Some(r), None) if !r.same_cells_as_full => problems.push(format!(
                    "{file}: value `{}`: its quick run reads other cells than the full run \
                     (fewer seeds or requests); declare quick = \"{}\"",
                    value.id, r.text
                )),
                (Some(r), Some(quick)) if quick != &r.text => problems.push(format!(
                    "{file}: value `{}`: its quick run gives `{}`, not quick = \"{quick}\" \
                     (update it and run `expertsim reproduce {name}`)",
                    value.id, r.text
                )),
                _ => {}
            }
        }
        let section = family_sections(doc)
            .into_iter()
            .find(|(f, _)| f == name)
            .map(|(_, range)| range);
        let Some(section) = section else {
            // A file of runs and values alone (a study's) has no generated section: its spans
            // are checked above, and its prose is its document's own.
            if !headlines.claims.is_empty() || !headlines.prose.paper.is_empty() {
                problems.push(format!(
                    "{doc_name}: no `## ` section holds `<!-- generated:{name}:begin -->`"
                ));
            }
            continue;
        };
        let mut phrases: Vec<&str> = headlines.prose.paper.iter().map(String::as_str).collect();
        for list in headlines.prose.inputs.values() {
            phrases.extend(list.iter().map(String::as_str));
        }
        let mut found_somewhere: BTreeSet<&str> = BTreeSet::new();
        let prose = checked_text(&doc[section.clone()]);
        let mut sources = vec![(None, prose)];
        for (label, text) in texts {
            let mut masked = text.clone().into_bytes();
            for (_, range) in placeholders(&text) {
                for b in &mut masked[range] {
                    *b = b' ';
                }
            }
            let masked = String::from_utf8_lossy(&masked).into_owned();
            sources.push((Some(label), checked_text(&masked)));
        }
        for (label, (text, references)) in &sources {
            let (squeezed, origin) = squeeze(text);
            let (covered, absent) = covered_by(&squeezed, &phrases);
            found_somewhere.extend(phrases.iter().filter(|p| !absent.contains(p)));
            for token in number_tokens(&squeezed) {
                let inside = |c: &Range<usize>| c.start <= token.start && token.end <= c.end;
                if covered.iter().any(inside)
                    || references.contains(&(origin[token.start]..origin[token.end]))
                {
                    continue;
                }
                let at = match label {
                    None => format!(
                        "{doc_name}:{}",
                        line_of(doc, section.start + origin[token.start])
                    ),
                    Some(label) => label.clone(),
                };
                problems.push(format!(
                    "{at}: `{}` in the {name} prose is in no value span and no phrase that \
                     {file} declares as the paper's or an input ([prose])",
                    &squeezed[token]
                ));
            }
        }
        for phrase in &phrases {
            if !found_somewhere.contains(phrase) {
                problems.push(format!(
                    "{file}: [prose] phrase `{phrase}` is not in the {name} prose"
                ));
            }
        }
        for (path, list) in &headlines.prose.inputs {
            let Ok(source) = std::fs::read_to_string(path) else {
                problems.push(format!("{file}: cannot read {}", path.display()));
                continue;
            };
            let numbers = file_numbers(&source);
            for phrase in list {
                for token in number_tokens(phrase) {
                    let token = &phrase[token];
                    if !input_number_in(token, &numbers) {
                        problems.push(format!(
                            "{file}: input phrase `{phrase}`: {token} is not a number of {}",
                            path.display()
                        ));
                    }
                }
            }
        }
    }
    problems
}

/// Every number written in a source or scenario file (`3_000`, `0.3`, `1e-3` read as numbers).
fn file_numbers(source: &str) -> Vec<f64> {
    let mut numbers = Vec::new();
    let bytes = source.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric()) {
            let mut end = i;
            while end < bytes.len()
                && (bytes[end].is_ascii_digit()
                    || bytes[end] == b'_'
                    || (bytes[end] == b'.' && bytes.get(end + 1).is_some_and(u8::is_ascii_digit))
                    || ((bytes[end] == b'e' || bytes[end] == b'E')
                        && bytes
                            .get(end + 1)
                            .is_some_and(|b| b.is_ascii_digit() || *b == b'-')))
            {
                end += 1;
                if bytes[end - 1] == b'e' || bytes[end - 1] == b'E' {
                    end += usize::from(bytes.get(end) == Some(&b'-'));
                }
            }
            let text: String = source[i..end].chars().filter(|&c| c != '_').collect();
            if let Ok(n) = text.parse::<f64>() {
                numbers.push(n);
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    numbers
}

/// Whether the number `token` of an input phrase is one of `numbers` (a percentage also as a
/// fraction, a `K` also as thousands).
fn input_number_in(token: &str, numbers: &[f64]) -> bool {
    let Ok(value) = digits(token).parse::<f64>() else {
        return false;
    };
    let mut candidates = vec![value];
    if token.ends_with('K') {
        candidates.push(value * 1000.0);
    }
    candidates.push(value / 100.0);
    candidates.iter().any(|c| {
        numbers
            .iter()
            .any(|n| (n - c).abs() <= 1e-9 * c.abs().max(1.0))
    })
}

/// Every number the family declares as the paper's (its `[prose]` paper phrases and its claims'
/// `paper` texts) that `paper_text` (the paper) does not contain, numbers compared as numbers
/// (`3031.6` is the paper's `3031.60`).
pub fn check_paper_numbers(headlines: &Headlines, paper_text: &str) -> Vec<String> {
    let mut in_paper: Vec<f64> = Vec::new();
    let bytes = paper_text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() && (i == 0 || !bytes[i - 1].is_ascii_digit()) {
            let mut end = i;
            while end < bytes.len()
                && (bytes[end].is_ascii_digit()
                    || ((bytes[end] == b'.' || bytes[end] == b',')
                        && bytes.get(end + 1).is_some_and(u8::is_ascii_digit)))
            {
                end += 1;
            }
            let number = &paper_text[i..end];
            let pieces = std::iter::once(number.replace(',', ""))
                .chain(number.split(',').map(str::to_string));
            in_paper.extend(pieces.filter_map(|p| p.parse::<f64>().ok()));
            i = end;
        } else {
            i += 1;
        }
    }
    let file = headlines.path.display();
    let mut problems = Vec::new();
    let claims = headlines
        .claims
        .iter()
        .map(|c| (format!("claim {} paper", c.id), &c.paper));
    let phrases = headlines
        .prose
        .paper
        .iter()
        .map(|p| ("[prose] paper phrase".to_string(), p));
    for (label, text) in claims.chain(phrases) {
        for token in number_tokens(text) {
            let number = digits(&text[token]);
            let value = number.parse::<f64>().unwrap_or(f64::NAN);
            if !in_paper.contains(&value) {
                problems.push(format!(
                    "{file}: {label} `{text}`: {number} is not in the paper's text"
                ));
            }
        }
    }
    problems
}
