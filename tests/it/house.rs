//! The house keeps its floors (docs/architecture.md): every `crate::` path
//! in `src/` outside test code names a room on a lower floor than the room
//! it is written in, and every room of `src/` has a floor. Reads the table
//! of docs/architecture.md, so the page and the code cannot drift apart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `room → floor`, from the rows of the floors table (`| 7 | `a`, `b` | … |`).
fn floors(doc: &str) -> BTreeMap<String, u32> {
    let mut map = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(floor), Some(rooms)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Ok(floor) = floor.parse::<u32>() else {
            continue;
        };
        for room in rooms.split(',') {
            map.insert(room.trim().trim_matches('`').to_string(), floor);
        }
    }
    map
}

/// The room of a file under `src/`: its first path component, without `.rs`.
fn room_of(rel: &Path) -> String {
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The code of a file that is not test code: cut at its first
/// `#[cfg(test)]`, with comments removed.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The rooms a piece of code names: `crate::x…` and each first name inside
/// `crate::{x, y::z, …}`.
fn named_rooms(code: &str) -> Vec<String> {
    let mut rooms = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut start) = (1, true);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 1 => {
                        rest = &group[i..];
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 1 => start = true,
                    c if start && (c.is_alphanumeric() || c == '_') => {
                        let name: String = group[i..]
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        rooms.push(name);
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            rooms.push(
                rest.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect(),
            );
        }
    }
    rooms
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_import_in_src_runs_down_the_floors_of_docs_architecture() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let floors = floors(&doc);
    assert!(
        floors.len() > 20,
        "the floors table was not read: {floors:?}"
    );
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let room = room_of(rel);
        if room == "main" || room == "lib" || rel.ends_with("tests.rs") {
            continue;
        }
        let Some(&floor) = floors.get(&room) else {
            wrong.push(format!(
                "{}: room `{room}` has no floor in docs/architecture.md",
                rel.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for target in named_rooms(&code(&text)) {
            if target == room || target.is_empty() {
                continue;
            }
            match floors.get(&target) {
                Some(&f) if f < floor => {}
                Some(&f) => wrong.push(format!(
                    "{}: `{room}` (floor {floor}) imports `{target}` (floor {f})",
                    rel.display()
                )),
                None => wrong.push(format!(
                    "{}: imports `{target}`, which has no floor in docs/architecture.md",
                    rel.display()
                )),
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "imports that run sideways or back up (docs/architecture.md says how to mend them):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_import_reader_sees_grouped_and_nested_paths() {
    let code = code(
        "use crate::{a::{b, c}, d};\nuse crate::e::F;\n// crate::commented\nfn f() { crate::g::h() }\n#[cfg(test)]\nuse crate::tested;",
    );
    assert_eq!(named_rooms(&code), ["a", "d", "e", "g"]);
}
