//! The crate is where the other clients are (`clients/rust`) and carries what
//! crates.io and docs.rs show: description, license, readme, keywords, categories,
//! rust-version. No server needed.

use std::path::Path;

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_crate_lives_under_clients_next_to_the_other_clients() {
    assert!(
        manifest_dir().ends_with("clients/rust"),
        "dlock-client is at {}, expected <repo>/clients/rust",
        manifest_dir().display()
    );
    let root = manifest_dir().join("../..");
    for sibling in [
        "clients/python",
        "clients/node",
        "dlock-core",
        "tests/common",
    ] {
        assert!(
            root.join(sibling).is_dir(),
            "{sibling} not found next to clients/rust"
        );
    }
}

#[test]
fn the_manifest_has_what_a_published_crate_shows() {
    assert!(!env!("CARGO_PKG_DESCRIPTION").is_empty(), "description");
    assert_eq!(env!("CARGO_PKG_LICENSE"), "MIT");
    assert!(
        !env!("CARGO_PKG_RUST_VERSION").is_empty(),
        "rust-version is missing"
    );
    assert_eq!(env!("CARGO_PKG_README"), "README.md");
    let manifest = std::fs::read_to_string(manifest_dir().join("Cargo.toml")).unwrap();
    for field in ["keywords", "categories", "documentation"] {
        assert!(
            manifest
                .lines()
                .any(|l| l.starts_with(&format!("{field} ="))),
            "Cargo.toml has no {field}"
        );
    }
    assert!(
        !manifest.lines().any(|l| l.trim() == "publish = false"),
        "the crate is marked publish = false"
    );
}

#[test]
fn the_readme_is_the_crates_and_its_relative_links_resolve() {
    let readme = std::fs::read_to_string(manifest_dir().join("README.md")).unwrap();
    assert!(readme.starts_with("# dlock-client"), "README title");
    // Every `](relative/path)` link names a file or directory that exists.
    let mut rest = readme.as_str();
    let mut checked = 0;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let end = rest.find(')').unwrap();
        let target = rest[..end].split('#').next().unwrap();
        if !target.is_empty() && !target.contains("://") {
            assert!(
                manifest_dir().join(target).exists(),
                "README links to {target}, which does not exist"
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "no relative link checked");
}
