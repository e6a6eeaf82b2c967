//! The engine's parts, bottom to top, and a test that calls between them
//! only go down (docs/design.md, "The engine's parts", draws them).
//!
//! A part is a set of files. Files of one part may call each other; a
//! method of `RegionCore` defined in a part's file may call the methods
//! of its own part and of the parts below, never of a part above. The
//! test reads the sources: every file of this folder must be in a part.

/// The parts, bottom first.
pub(super) const PARTS: &[(&str, &[&str])] = &[
    (
        "core: state, slots, kernel primitives",
        &[
            "mod.rs",
            "layers.rs",
            "access.rs",
            "budget.rs",
            "copy.rs",
            "errors.rs",
            "locality.rs",
            "progress.rs",
            "rewrite.rs",
            "ring.rs",
            "scratch.rs",
            "slots.rs",
        ],
    ),
    (
        "evictor",
        &[
            "evict.rs",
            "piped.rs",
            "pinned.rs",
            "ring_evict.rs",
            "wp_async.rs",
        ],
    ),
    (
        "installer",
        &[
            "fill.rs",
            "around.rs",
            "poison.rs",
            "request_fill.rs",
            "stride.rs",
        ],
    ),
    ("movers", &["mover.rs", "prefetch.rs", "cpu_gate.rs"]),
    (
        "fault paths and kernel accesses",
        &[
            "resolve.rs",
            "in_context.rs",
            "handler_thread.rs",
            "pin.rs",
            "hold.rs",
            "inherit.rs",
        ],
    ),
];

#[cfg(test)]
mod tests {
    use super::PARTS;
    use std::collections::{BTreeMap, BTreeSet};

    fn part_of(file: &str) -> Option<usize> {
        PARTS.iter().position(|(_, files)| files.contains(&file))
    }

    /// `[start, end)` of each impl block of `RegionCore`, its own or a
    /// trait's (rustfmt puts the closing brace alone at a line's start),
    /// and whether it is its own.
    fn core_impls(src: &str) -> Vec<(usize, usize, bool)> {
        let mut out = Vec::new();
        let mut at = 0;
        for line in src.split_inclusive('\n') {
            let own = line.starts_with("impl RegionCore {");
            if own || (line.starts_with("impl ") && line.contains(" for RegionCore {")) {
                let end = src[at..].find("\n}\n").map_or(src.len(), |e| at + e);
                out.push((at, end, own));
            }
            at += line.len();
        }
        out
    }

    /// `src` without its comments (blanked, so offsets stay) and without
    /// its test module.
    fn code(src: &str) -> String {
        let src = src.split("\n#[cfg(test)]\nmod tests").next().unwrap();
        src.split_inclusive('\n')
            .map(|line| match line.find("//") {
                // A `//` after an odd number of quotes is inside a string.
                Some(c) if line[..c].matches('"').count() % 2 == 0 => {
                    let nl = if line.ends_with('\n') { "\n" } else { "" };
                    format!("{}{}{nl}", &line[..c], " ".repeat(line.len() - c - nl.len()))
                }
                _ => line.to_string(),
            })
            .collect()
    }

    fn is_ident(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '_'
    }

    /// Names of the functions declared in `src`, with their offsets.
    fn fns(src: &str) -> Vec<(usize, &str)> {
        src.match_indices("fn ")
            .filter(|&(at, _)| at == 0 || !is_ident(src[..at].chars().last().unwrap()))
            .filter_map(|(at, _)| {
                let rest = &src[at + 3..];
                let len = rest.find(|c: char| !is_ident(c))?;
                (len > 0 && rest[len..].starts_with(['(', '<'])).then(|| (at, &rest[..len]))
            })
            .collect()
    }

    /// Calls `recv.name(` (whitespace allowed before the dot) or, for a
    /// type, `recv::name(` in `src`, with their offsets.
    fn calls<'a>(src: &'a str, recv: &str) -> Vec<(usize, &'a str)> {
        let mut out = Vec::new();
        for (at, _) in src.match_indices(recv) {
            if at > 0 && is_ident(src[..at].chars().last().unwrap()) {
                continue;
            }
            let rest = src[at + recv.len()..].trim_start();
            let Some(rest) = rest.strip_prefix('.').or_else(|| rest.strip_prefix("::")) else {
                continue;
            };
            let len = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
            if len > 0 && rest[len..].starts_with('(') {
                out.push((at, &rest[..len]));
            }
        }
        out
    }

    #[test]
    fn calls_between_the_engines_parts_only_go_down() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/engine");
        let mut sources = BTreeMap::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                let name = path.file_name().unwrap().to_str().unwrap().to_string();
                sources.insert(name, code(&std::fs::read_to_string(&path).unwrap()));
            }
        }
        for file in sources.keys() {
            assert!(
                part_of(file).is_some(),
                "engine/{file} is in no part of layers::PARTS"
            );
        }
        for (_, files) in PARTS {
            for f in *files {
                assert!(
                    sources.contains_key(*f),
                    "layers::PARTS names engine/{f}, which is gone"
                );
            }
        }
        // Where each method of RegionCore is defined: in one file (the test
        // could not tell the calls of a name defined twice apart). Trait
        // methods (`FaultHandler`) are the router's to call.
        let mut defined: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (file, src) in &sources {
            for (start, end, _) in core_impls(src).into_iter().filter(|i| i.2) {
                for (_, name) in fns(&src[start..end]) {
                    defined.entry(name).or_default().insert(file);
                }
            }
        }
        let twice: Vec<_> = defined.iter().filter(|(_, files)| files.len() > 1).collect();
        assert!(
            twice.is_empty(),
            "RegionCore methods defined in two files: {twice:?}"
        );
        let home = |name: &str| defined.get(name).and_then(|files| files.iter().next().copied());
        let mut up = Vec::new();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for (file, src) in &sources {
            let impls = core_impls(src);
            let in_core = |at: &(usize, &str)| impls.iter().any(|&(s, e, _)| (s..e).contains(&at.0));
            // `self` and `Self` are a RegionCore inside its impls; `core`
            // and `other` name one elsewhere (movers, other regions of a
            // budget), and `RegionCore::` anywhere.
            let found = [
                (
                    "self",
                    calls(src, "self").into_iter().filter(in_core).collect::<Vec<_>>(),
                ),
                ("Self", calls(src, "Self").into_iter().filter(in_core).collect()),
                ("core", calls(src, "core")),
                ("other", calls(src, "other")),
                ("RegionCore", calls(src, "RegionCore")),
            ];
            for (recv, list) in found {
                for (_, name) in list {
                    let Some(callee) = home(name) else {
                        continue;
                    };
                    *seen.entry(recv).or_default() += 1;
                    if part_of(callee) > part_of(file) {
                        up.push(format!("engine/{file} calls {name} of engine/{callee}"));
                    }
                }
            }
        }
        // Guards against a scan that went blind (a changed code shape).
        assert!(seen.get("self") > Some(&150), "calls seen: {seen:?}");
        assert!(
            seen.get("core").copied().unwrap_or(0) + seen.get("other").copied().unwrap_or(0) >= 5,
            "calls seen: {seen:?}"
        );
        up.sort();
        up.dedup();
        assert!(
            up.is_empty(),
            "calls up between the engine's parts:\n{}",
            up.join("\n")
        );
    }
}
