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
            "inherit.rs",
            "locality.rs",
            "progress.rs",
            "rewrite.rs",
            "ring.rs",
            "scratch.rs",
            "slots.rs",
        ],
    ),
    ("evictor", &["evict.rs", "piped.rs", "pinned.rs", "ring_evict.rs"]),
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

    /// `[start, end)` of each `impl RegionCore {` block (rustfmt puts its
    /// closing brace alone at the start of a line).
    fn core_impls(src: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut from = 0;
        while let Some(at) = src[from..].find("\nimpl RegionCore {\n") {
            let start = from + at + 1;
            let end = src[start..].find("\n}\n").map_or(src.len(), |e| start + e);
            out.push((start, end));
            from = end;
        }
        out
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

    /// Calls `recv.name(` in `src` (whitespace allowed before the dot),
    /// with their offsets.
    fn calls<'a>(src: &'a str, recv: &str) -> Vec<(usize, &'a str)> {
        let mut out = Vec::new();
        for (at, _) in src.match_indices(recv) {
            if at > 0 && is_ident(src[..at].chars().last().unwrap()) {
                continue;
            }
            let rest = src[at + recv.len()..].trim_start();
            let Some(rest) = rest.strip_prefix('.') else {
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
                sources.insert(name, std::fs::read_to_string(&path).unwrap());
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
        // Where each method of RegionCore is defined (names defined in two
        // files are left out: the test cannot tell the calls apart).
        let mut defined: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (file, src) in &sources {
            for (start, end) in core_impls(src) {
                for (_, name) in fns(&src[start..end]) {
                    defined.entry(name).or_default().insert(file);
                }
            }
        }
        let home = |name: &str| {
            defined
                .get(name)
                .filter(|files| files.len() == 1)
                .and_then(|files| files.iter().next().copied())
        };
        let mut up = Vec::new();
        let mut seen = 0;
        for (file, src) in &sources {
            let impls = core_impls(src);
            let in_core = |at: usize| impls.iter().any(|&(s, e)| (s..e).contains(&at));
            // `self` is a RegionCore inside its impls; `core` and `other`
            // name one elsewhere (movers, other regions of a budget).
            let found = calls(src, "self")
                .into_iter()
                .filter(|&(at, _)| in_core(at))
                .chain(calls(src, "core"))
                .chain(calls(src, "other"));
            for (_, name) in found {
                let Some(callee) = home(name) else {
                    continue;
                };
                seen += 1;
                if part_of(callee) > part_of(file) {
                    up.push(format!("engine/{file} calls {name} of engine/{callee}"));
                }
            }
        }
        assert!(
            seen > 100,
            "the scan found only {seen} calls: has the code's shape changed?"
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
