"""docs/reference.md is checked against docs/commands.md and the module's error texts.

- Every command heading (`## DLOCK.X synopsis`, any heading level 2-4) of
  docs/commands.md appears in docs/reference.md with the same synopsis, and vice
  versa. A heading may name several commands separated by " / "
  (`DLOCK.LATCHSET key count / DLOCK.COUNTDOWN key / ...`); each is compared on
  its own, so either file may split or join them.
- Every error reply text defined in the module's error module (src/error.rs:
  `c"..."` CStr literals and `format!("...")` templates starting with an error
  code) appears in docs/reference.md. A template's `{...}` placeholders match any
  run of non-blank characters there (`<n>`, `<key>`, `permit(s)`).

Whitespace is normalized (runs of blanks and line breaks count as one space) in
the documents and in the texts. No server is needed.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "docs" / "commands.md"
REFERENCE = ROOT / "docs" / "reference.md"
# Where the error texts live; every one that exists is read (src/ may move into
# workspace crates).
ERROR_SOURCES = [ROOT / "src" / "error.rs", ROOT / "dlock-core" / "src" / "error.rs"]
# An error reply starts with an upper-case code and a space: ERR, WRONGTYPE, ...
ERROR_CODE = re.compile(r"^[A-Z][A-Z0-9]+ ")
# src/error.rs holds ~70 error texts; far fewer means the parser lost track.
MIN_ERRORS = 40


def norm(text: str) -> str:
    return " ".join(text.split())


# --- command headings -------------------------------------------------------

HEADING = re.compile(r"^#{2,4}[ \t]+(DLOCK\.\S.*?)[ \t]*#*[ \t]*$", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)


def synopses(path: Path) -> dict:
    """{COMMAND NAME: normalized synopsis} of every DLOCK.* heading in `path`."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    found = {}
    for m in HEADING.finditer(text):
        for part in m.group(1).split(" / "):
            syn = norm(part.replace("`", ""))
            if not syn.upper().startswith("DLOCK."):
                continue
            name = syn.split(" ", 1)[0].upper()
            assert name not in found or found[name] == syn, (
                f"{path.name}: {name} has two different headings: "
                f"{found[name]!r} and {syn!r}"
            )
            found[name] = syn
    return found


def test_contract_has_command_headings():
    names = set(synopses(CONTRACT))
    # The lock commands every version of the contract has had.
    assert {"DLOCK.ACQUIRE", "DLOCK.RELEASE", "DLOCK.RENEW", "DLOCK.INFO"} <= names, names


def test_every_contract_command_is_in_the_reference():
    contract, reference = synopses(CONTRACT), synopses(REFERENCE)
    missing = sorted(set(contract) - set(reference))
    assert not missing, (
        f"commands with a heading in docs/commands.md but none in docs/reference.md: "
        f"{missing}"
    )


def test_every_reference_command_is_in_the_contract():
    contract, reference = synopses(CONTRACT), synopses(REFERENCE)
    extra = sorted(set(reference) - set(contract))
    assert not extra, (
        f"commands with a heading in docs/reference.md but none in docs/commands.md "
        f"(the contract): {extra}"
    )


def test_synopses_agree():
    contract, reference = synopses(CONTRACT), synopses(REFERENCE)
    drift = {
        name: (contract[name], reference[name])
        for name in sorted(set(contract) & set(reference))
        if contract[name] != reference[name]
    }
    assert not drift, "synopses differ (commands.md, reference.md):\n" + "\n".join(
        f"  {c!r}\n  {r!r}" for c, r in drift.values()
    )


# --- error texts ------------------------------------------------------------


def rust_literals(src: str):
    """(kind, text) of every string literal in Rust source `src`, comments and
    char literals skipped; kind is "c" for c"..." (CStr), "str" otherwise.
    Handles escapes, line continuations and raw strings (r"..", r#".."#)."""
    i, n = 0, len(src)
    while i < n:
        ch = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            continue
        if ch == "'":
            m = re.compile(r"'(\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'])'").match(src, i)
            i = m.end() if m else i + 1  # a char literal, or a lifetime's quote
            continue
        m = re.compile(r'(c|b|cr|br|r)?(#*)"').match(src, i) if (ch == '"' or ch.isalpha()) else None
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            prefix, hashes = m.group(1) or "", m.group(2)
            if hashes and "r" not in prefix:
                i += 1
                continue
            start = m.end()
            kind = "c" if prefix.startswith("c") else "str"
            if "r" in prefix:  # raw: no escapes
                end = src.find('"' + hashes, start)
                if end < 0:
                    return
                yield kind, src[start:end]
                i = end + 1 + len(hashes)
                continue
            out, j = [], start
            while j < n and src[j] != '"':
                if src[j] == "\\" and j + 1 < n:
                    e = src[j + 1]
                    if e == "\n":  # line continuation: skip the leading blanks
                        j += 2
                        while j < n and src[j] in " \t\r\n":
                            j += 1
                        continue
                    if e == "u":
                        um = re.compile(r"\\u\{([0-9a-fA-F]+)\}").match(src, j)
                        if um:
                            out.append(chr(int(um.group(1), 16)))
                            j = um.end()
                            continue
                    if e == "x":
                        out.append(chr(int(src[j + 2 : j + 4], 16)))
                        j += 4
                        continue
                    out.append({"n": "\n", "t": "\t", "r": "\r", "0": "\0"}.get(e, e))
                    j += 2
                    continue
                out.append(src[j])
                j += 1
            yield kind, "".join(out)
            i = j + 1
            continue
        i += 1


def error_texts():
    """(paths read, [(template?, text)]) of every error reply text in the error
    module(s)."""
    paths = [p for p in ERROR_SOURCES if p.is_file()]
    assert paths, f"no error module found at any of {[str(p) for p in ERROR_SOURCES]}"
    texts = []
    for path in paths:
        for kind, text in rust_literals(path.read_text(encoding="utf-8")):
            if not ERROR_CODE.match(text):
                continue
            # A plain string literal with {...} is a format! template.
            template = kind == "str" and re.search(r"(?<!\{)\{[^{}]*\}(?!\})", text) is not None
            texts.append((template, text))
    names = ", ".join(str(p.relative_to(ROOT)) for p in paths)
    assert len(texts) >= MIN_ERRORS, (
        f"only {len(texts)} error texts found in {names}: has the way they are written "
        "changed? Update rust_literals() in this test."
    )
    return names, texts


def text_pattern(text: str, template: bool) -> re.Pattern:
    text = norm(text)
    if not template:
        return re.compile(re.escape(text))
    parts = re.split(r"(?<!\{)\{[^{}]*\}(?!\})", text)
    parts = [re.escape(p.replace("{{", "{").replace("}}", "}")) for p in parts]
    return re.compile(r"\S*".join(parts))


def test_rust_literal_parser():
    src = r'''
    // "a comment" c"ERR not this"
    pub const A: Msg = c"ERR one \"quoted\" \
        continued";
    fn f<'a>(x: &'a str) -> char { '\'' }
    let s = format!("QUEUEFULL holds {max} places, {{literal}}");
    let r = r#"ERR raw "text""#;
    '''
    got = list(rust_literals(src))
    assert ("c", 'ERR one "quoted" continued') in got
    assert ("str", "QUEUEFULL holds {max} places, {{literal}}") in got
    assert ("str", 'ERR raw "text"') in got
    assert all("not this" not in t for _, t in got)
    pat = text_pattern("QUEUEFULL holds {max} places, {{literal}}", True)
    assert pat.search("QUEUEFULL holds <max> places, {literal}")


def test_every_error_text_is_in_the_reference():
    names, texts = error_texts()
    doc = norm(REFERENCE.read_text(encoding="utf-8"))
    missing = [text for template, text in texts if not text_pattern(text, template).search(doc)]
    assert not missing, (
        f"error texts of {names} that docs/reference.md does not show "
        "word for word (placeholders of format! templates match any non-blank text):\n"
        + "\n".join(f"  {t}" for t in missing)
    )


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
