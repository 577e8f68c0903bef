//! The house has no cycles: the top-level modules of `src/` import each other
//! in one direction only, and so do the files inside each module's folder.
//! The crate docs list every module after the modules it uses.
//!
//! A dependency is any `use` of, or path through, `crate::…`, `super::…` or
//! `self::…` outside test code (`#[cfg(test)]` items, and the files declared
//! by them, such as every `tests.rs`). A folder's `mod.rs` is its table of
//! contents: its references into its own folder are not dependencies.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The crate's source files (path relative to `src/`, with `/`), test files
/// left out.
fn crate_sources() -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("src/ is readable")
            .map(|e| e.expect("entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).expect("under src");
                let rel = rel.to_str().expect("utf-8 path").replace('\\', "/");
                out.push((rel, std::fs::read_to_string(&path).expect("readable")));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out
}

/// `text` with comments removed and string and char literals emptied, so
/// that only code is searched for paths.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c[i] == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            // A raw string r#"…"#: skip to the quote and as many hashes.
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' {
            // A char literal ('x', '\n', '\u{1F600}'), or a lifetime.
            if next == Some('\\') {
                // The escape's first character may itself be a quote ('\'').
                let mut j = i + 3;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c[i]);
                i += 1;
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// `code` without its `#[cfg(test)]` items, and the names of the modules
/// such items declare (`#[cfg(test)] mod tests;`).
fn without_tests(code: &str) -> (String, Vec<String>) {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(code.len());
    let mut test_mods = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let item = &rest[at + MARK.len()..];
        let semi = item.find(';');
        let brace = item.find('{');
        let end = match (semi, brace) {
            (Some(s), b) if b.is_none_or(|b| s < b) => {
                let words: Vec<&str> = item[..s].split_whitespace().collect();
                if let Some(i) = words.iter().position(|w| *w == "mod") {
                    if let Some(name) = words.get(i + 1) {
                        test_mods.push((*name).to_owned());
                    }
                }
                s + 1
            }
            (_, Some(b)) => {
                let mut depth = 0;
                let mut end = item.len();
                for (i, ch) in item[b..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            _ => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    (out, test_mods)
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e` (spaces removed).
fn expand_use(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| {
            expand_use(p)
                .into_iter()
                .map(move |e| format!("{prefix}{e}"))
        })
        .collect()
}

fn is_ident(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// Every path starting at `crate`, `super` or `self` in `code`: those of
/// `use` trees and those written inline.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let starts = |i: usize| i == 0 || !is_ident(code[..i].chars().next_back().unwrap_or(' '));
    let mut from = 0;
    while let Some(at) = code[from..].find("use ") {
        let at = from + at;
        from = at + 4;
        if !starts(at) {
            continue;
        }
        if let Some(end) = code[at..].find(';') {
            let tree = code[at + 4..at + end].trim();
            let tree = tree.split(" as ").next().unwrap_or(tree);
            out.extend(expand_use(tree));
        }
    }
    for root in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(root) {
            let at = from + at;
            from = at + root.len();
            if !starts(at) {
                continue;
            }
            let len = code[at..]
                .find(|ch: char| !(is_ident(ch) || ch == ':'))
                .unwrap_or(code.len() - at);
            out.push(code[at..at + len].trim_end_matches(':').to_owned());
        }
    }
    out
}

/// The module path of a file: `run/worker/mod.rs` → `run::worker`.
fn module_of(file: &str) -> Vec<String> {
    let stem = file.trim_end_matches(".rs");
    let mut segs: Vec<String> = stem.split('/').map(str::to_owned).collect();
    if segs.last().is_some_and(|s| s == "mod") {
        segs.pop();
    }
    segs
}

/// The dependencies found in a set of source files (paths relative to
/// `src/`), each with the file that makes it.
struct Graph {
    /// Top-level module → the modules it uses, with a file that does.
    modules: BTreeMap<String, BTreeMap<String, String>>,
    /// File → files of the same top-level module it uses.
    files: BTreeMap<String, BTreeSet<String>>,
}

fn graph(sources: &[(String, String)]) -> Graph {
    let mut cleaned = BTreeMap::new();
    let mut test_files = BTreeSet::new();
    for (file, text) in sources {
        let (code, test_mods) = without_tests(&code_only(text));
        let dir = match file.rsplit_once('/') {
            Some((dir, name)) if name == "mod.rs" || name == "lib.rs" => format!("{dir}/"),
            Some((dir, name)) => format!("{dir}/{}/", name.trim_end_matches(".rs")),
            None if file == "lib.rs" || file == "main.rs" => String::new(),
            None => format!("{}/", file.trim_end_matches(".rs")),
        };
        for m in test_mods {
            test_files.insert(format!("{dir}{m}.rs"));
            test_files.insert(format!("{dir}{m}/mod.rs"));
        }
        cleaned.insert(file.clone(), code);
    }
    let files: BTreeMap<Vec<String>, String> = cleaned
        .keys()
        .filter(|f| !test_files.contains(*f) && !f.ends_with("/tests.rs") && *f != "tests.rs")
        .filter(|f| *f != "lib.rs" && *f != "main.rs")
        .map(|f| (module_of(f), f.clone()))
        .collect();
    let resolve = |from: &[String], path: &str| -> Option<String> {
        let mut segs = path.split("::");
        let mut module: Vec<String> = match segs.next()? {
            "crate" => Vec::new(),
            "self" => from.to_vec(),
            "super" => from[..from.len().saturating_sub(1)].to_vec(),
            _ => return None,
        };
        let mut segs = segs.peekable();
        while segs.peek() == Some(&"super") {
            segs.next();
            module.pop();
        }
        let mut target = files.get(&module).cloned();
        for seg in segs {
            module.push(seg.to_owned());
            match files.get(&module) {
                Some(f) => target = Some(f.clone()),
                None => break,
            }
        }
        target
    };
    let mut g = Graph {
        modules: BTreeMap::new(),
        files: BTreeMap::new(),
    };
    for (module, file) in &files {
        let top = &module[0];
        let own_dir = file.strip_suffix("mod.rs");
        g.modules.entry(top.clone()).or_default();
        for path in paths(&cleaned[file]) {
            let Some(target) = resolve(module, &path) else {
                continue;
            };
            let target_top = module_of(&target)[0].clone();
            if &target_top != top {
                g.modules
                    .entry(top.clone())
                    .or_default()
                    .entry(target_top)
                    .or_insert_with(|| file.clone());
            } else if target != *file && !own_dir.is_some_and(|d| target.starts_with(d)) {
                g.files.entry(file.clone()).or_default().insert(target);
            }
        }
    }
    g
}

/// The strongly connected components of more than one node (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(next) = s.edges.get(v) {
            for w in next {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let low = s.low[v].min(s.low[w]);
                    s.low.insert(v, low);
                } else if s.on_stack.contains(w) {
                    let low = s.low[v].min(s.index[w]);
                    s.low.insert(v, low);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found
}

/// Every cycle of `sources`, as a sentence naming its members and, for the
/// modules, the file behind each edge.
fn problems(sources: &[(String, String)]) -> Vec<String> {
    let g = graph(sources);
    let module_edges: BTreeMap<String, BTreeSet<String>> = g
        .modules
        .iter()
        .map(|(m, to)| (m.clone(), to.keys().cloned().collect()))
        .collect();
    let mut out = Vec::new();
    for cycle in cycles(&module_edges) {
        let members: BTreeSet<&String> = cycle.iter().collect();
        let edges: Vec<String> = cycle
            .iter()
            .flat_map(|m| {
                g.modules[m]
                    .iter()
                    .filter(|(to, _)| members.contains(to))
                    .map(move |(to, file)| format!("{m} -> {to} (src/{file})"))
            })
            .collect();
        out.push(format!(
            "modules in a cycle: {}; {}",
            cycle.join(", "),
            edges.join(", ")
        ));
    }
    for cycle in cycles(&g.files) {
        out.push(format!("files in a cycle: {}", cycle.join(", ")));
    }
    out
}

/// The crate's top-level modules in the order its docs list them (the
/// numbered items `N. [`module`]: …`).
fn documented_order(lib: &str) -> Vec<String> {
    lib.lines()
        .take_while(|l| l.starts_with("//!"))
        .filter_map(|l| {
            let item = l.trim_start_matches("//!").trim_start();
            let rest = item.trim_start_matches(|c: char| c.is_ascii_digit());
            let rest = rest.strip_prefix(". [`")?;
            let (name, _) = rest.split_once("`]")?;
            (rest.len() < item.len()).then(|| name.to_owned())
        })
        .collect()
}

#[test]
fn the_module_graph_has_no_cycles() {
    let problems = problems(&crate_sources());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The crate docs name every module once, each after the modules it uses
/// (the data-flow order).
#[test]
fn the_crate_docs_list_every_module_in_data_flow_order() {
    let sources = crate_sources();
    let lib = &sources
        .iter()
        .find(|(f, _)| f == "lib.rs")
        .expect("lib.rs")
        .1;
    let declared: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_owned())
        .collect();
    let order = documented_order(lib);
    let listed: BTreeSet<String> = order.iter().cloned().collect();
    assert_eq!(
        listed, declared,
        "the crate docs list other modules than lib.rs declares"
    );
    assert_eq!(
        listed.len(),
        order.len(),
        "a module is listed twice: {order:?}"
    );
    let position = |m: &str| order.iter().position(|o| o == m);
    for (module, uses) in &graph(&sources).modules {
        for (used, file) in uses {
            assert!(
                position(used) < position(module),
                "the crate docs list {module} before {used}, which it uses (src/{file})"
            );
        }
    }
}

fn sources(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(f, t)| ((*f).to_owned(), (*t).to_owned()))
        .collect()
}

/// The checker finds a cycle closed by a `use`, by an inline path, through a
/// folder, or among the files of one module, and names it.
#[test]
fn the_checker_names_a_cycle() {
    let found = problems(&sources(&[
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        ("a.rs", "use crate::b::{c::Thing, Other};\n"),
        ("b/mod.rs", "pub mod c;\n"),
        ("b/c.rs", "pub fn f() -> u32 { crate::a::g() }\n"),
    ]));
    assert_eq!(
        found,
        ["modules in a cycle: a, b; a -> b (src/a.rs), b -> a (src/b/c.rs)"]
    );
    let found = problems(&sources(&[
        ("m/mod.rs", "mod x;\nmod y;\npub use x::A;\n"),
        ("m/x.rs", "use super::y::B;\n"),
        ("m/y.rs", "pub fn f() { super::x::g() }\n"),
    ]));
    assert_eq!(found, ["files in a cycle: m/x.rs, m/y.rs"]);
}

/// Test code, comments, strings and a folder's own table of contents are no
/// dependencies.
#[test]
fn the_checker_ignores_tests_comments_strings_and_tables_of_contents() {
    let found = problems(&sources(&[
        (
            "a.rs",
            "#[cfg(test)]\nmod tests {\n    use crate::b::X;\n}\n",
        ),
        ("b.rs", "use crate::a::Y;\n#[cfg(test)]\nmod helper;\n"),
        ("b/helper.rs", "use crate::a::Z;\n"),
        (
            "c.rs",
            "// crate::d::x\nconst S: &str = \"crate::d::x\";\nconst R: &str = r#\"super::d\"#;\n",
        ),
        (
            "d.rs",
            "/* crate::c */ use crate::c::S;\nfn f<'a>(x: &'a str) -> char { 'c' }\nfn g() -> char { '\\'' }\n",
        ),
        ("m/mod.rs", "mod x;\npub use x::A;\nfn f() { x::g() }\n"),
        ("m/x.rs", "use super::helper;\n"),
    ]));
    assert!(found.is_empty(), "{found:?}");
}
