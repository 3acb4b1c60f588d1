//! Fixture corpus: each `tests/fixtures/schema/NAME.py` is derived with file stem `NAME`; the
//! result must equal `NAME.json` (schema and warnings) or `NAME.err` (rendered diagnostics).
//! `BLESS=1 cargo test` rewrites the expected files.

use std::fs;
use std::path::{Path, PathBuf};

use warden::schema::derive;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema")
}

fn actual(path: &Path) -> (String, &'static str) {
    let source = fs::read_to_string(path).unwrap();
    let stem = path.file_stem().unwrap().to_str().unwrap();
    match derive(&source, &super::opts(stem)) {
        Ok(derived) => (
            serde_json::to_string_pretty(&derived).unwrap() + "\n",
            "json",
        ),
        Err(e) => {
            let display = format!("{stem}.py");
            let mut text: String = e
                .diagnostics()
                .iter()
                .map(|d| d.render(&source, &display) + "\n")
                .collect();
            text.push_str(&format!("{e}\n"));
            (text, "err")
        }
    }
}

#[test]
fn every_fixture_matches_its_expected_output() {
    let bless = std::env::var_os("BLESS").is_some_and(|v| v != "0");
    let mut paths: Vec<PathBuf> = fs::read_dir(fixture_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 30, "the fixture corpus is missing");
    let mut failures = Vec::new();
    for path in &paths {
        let (text, ext) = actual(path);
        let expected_path = path.with_extension(ext);
        let other = path.with_extension(if ext == "json" { "err" } else { "json" });
        if bless {
            fs::write(&expected_path, &text).unwrap();
            let _ = fs::remove_file(&other);
            continue;
        }
        if other.exists() {
            failures.push(format!(
                "{}: produced .{ext} but {} exists",
                path.display(),
                other.display()
            ));
            continue;
        }
        match fs::read_to_string(&expected_path) {
            Ok(expected) if expected == text => {}
            Ok(expected) => failures.push(format!(
                "{}: output differs\n--- expected\n{expected}\n--- actual\n{text}",
                path.display()
            )),
            Err(_) => failures.push(format!(
                "{}: no {} (run `BLESS=1 cargo test` to create it)\n{text}",
                path.display(),
                expected_path.display()
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} fixture(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
