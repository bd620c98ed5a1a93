//! The prelude's constants written as their values where the prelude uses them, as it is
//! compiled in (`build.rs`, which includes this file; the tests check the compiled text with
//! it). Redis runs a script's top level again at every call: each function of the prelude is
//! made again, and each constant it names (`local HEAD_TTL_MS = 3000`) is an upvalue to find
//! and bind while it is made, about 30,000 server instructions per `run` cycle in all
//! (docs/performance.md, "What a lock costs Redis"). A number written in place costs nothing.
//!
//! A constant is a line `local NAME = <value>` of the prelude, NAME in capitals, the value a
//! whole number or a product or sum of whole numbers and earlier constants. The definition
//! stays as written (a script's own file may use the name; tests read the value there); every
//! later use of NAME as a variable, outside comments and strings, becomes the value. A
//! constant assigned or defined twice, or a value above 2^53 - 1 (where Lua's numbers stop being
//! exact), stops the build. (A name declared again inside a function, as a parameter or a
//! local, would come out as a number there, which Lua refuses to load: every test would fail.)

/// `prelude` with every use of its constants replaced by their values (see the module's text).
/// Panics, naming the line, on a constant it cannot replace safely.
pub fn inline_constants(prelude: &str) -> String {
    let mut constants: Vec<(String, u64)> = Vec::new();
    let mut out = String::with_capacity(prelude.len());
    for line in prelude.split_inclusive('\n') {
        if let Some((name, value)) = definition(line, &constants) {
            out.push_str(line);
            constants.push((name, value));
        } else {
            out.push_str(&replace_uses(line, &constants));
        }
    }
    out
}

/// The largest whole number a Lua number holds exactly.
const EXACT: u64 = (1 << 53) - 1;

/// `(NAME, value)` when `line` defines a constant.
fn definition(line: &str, constants: &[(String, u64)]) -> Option<(String, u64)> {
    let rest = line.trim_end().strip_prefix("local ")?;
    let (name, value) = rest.split_once(" = ")?;
    let capitals = |c: char| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_';
    if !name.starts_with(|c: char| c.is_ascii_uppercase()) || !name.chars().all(capitals) {
        return None;
    }
    let term = |word: &str| -> Option<u64> {
        word.parse().ok().or_else(|| {
            constants
                .iter()
                .find(|(known, _)| known == word)
                .map(|&(_, value)| value)
        })
    };
    let mut sum = 0u64;
    for addend in value.split(" + ") {
        let mut product = 1u64;
        for factor in addend.split(" * ") {
            product = product.checked_mul(term(factor.trim())?)?;
        }
        sum = sum.checked_add(product)?;
    }
    // (A second definition would leave the uses after it reading the first value.)
    assert!(
        !constants.iter().any(|(known, _)| known == name),
        "lua/prelude: the constant {name} is defined twice: {line}"
    );
    assert!(
        sum <= EXACT,
        "lua/prelude: {name} = {sum} is above 2^53 - 1: {line}"
    );
    Some((name.to_owned(), sum))
}

/// `line` with each use of a constant replaced by its value. A line of the prelude never
/// opens a string or a comment that a later line closes (`--[[`, `[[`): such a line stops the
/// build rather than be read wrongly.
fn replace_uses(line: &str, constants: &[(String, u64)]) -> String {
    let bytes = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if line[i..].starts_with("--") {
            assert!(
                !line[i..].starts_with("--["),
                "lua/prelude: a long comment is not read here: {line}"
            );
            out.push_str(&line[i..]);
            break;
        }
        if c == b'[' && matches!(bytes.get(i + 1), Some(b'[' | b'=')) {
            panic!("lua/prelude: a long string is not read here: {line}");
        }
        if c == b'\'' || c == b'"' {
            let mut end = i + 1;
            while end < bytes.len() && bytes[end] != c {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            assert!(end < bytes.len(), "lua/prelude: a string left open: {line}");
            out.push_str(&line[i..=end]);
            i = end + 1;
            continue;
        }
        if c.is_ascii_alphanumeric() || c == b'_' {
            let end = line[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(line.len(), |len| i + len);
            let word = &line[i..end];
            // (`x.NAME`, `x:NAME` name a field or method; `..` joins strings.)
            let before = line[..i].trim_end();
            let field = before.ends_with(':') || (before.ends_with('.') && !before.ends_with(".."));
            match constants.iter().find(|(name, _)| name == word) {
                Some((name, value)) if !c.is_ascii_digit() && !field => {
                    let after = line[end..].trim_start();
                    assert!(
                        !after.starts_with('=') || after.starts_with("=="),
                        "lua/prelude: the constant {name} is assigned: {line}"
                    );
                    out.push_str(&value.to_string());
                }
                _ => out.push_str(word),
            }
            i = end;
            continue;
        }
        out.push(c as char);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::inline_constants;

    #[test]
    fn uses_become_values_and_definitions_stay() {
        let prelude = "local A_MS = 60 * 1000\nlocal B = A_MS\nlocal C = 2 * A_MS + 5\n\
                       local function f(x)\n  return x + A_MS, B, C, x.A_MS, 'A_MS', \"B\" .. B -- A_MS\nend\n\
                       local lower = 3\nlocal D_2 = 7\nlocal t = {A_MS, D_2, A_MSX}\n";
        assert_eq!(
            inline_constants(prelude),
            "local A_MS = 60 * 1000\nlocal B = A_MS\nlocal C = 2 * A_MS + 5\n\
             local function f(x)\n  return x + 60000, 60000, 120005, x.A_MS, 'A_MS', \"B\" .. 60000 -- A_MS\nend\n\
             local lower = 3\nlocal D_2 = 7\nlocal t = {60000, 7, A_MSX}\n"
        );
    }

    #[test]
    fn a_text_without_constants_is_unchanged() {
        let prelude =
            "local x = 1\nlocal function g(a) return a == 'it''s' end\nlocal s = 'a\\'b'\n";
        assert_eq!(inline_constants(prelude), prelude);
    }

    #[test]
    #[should_panic(expected = "the constant LIMIT is assigned")]
    fn an_assigned_constant_stops_the_build() {
        inline_constants("local LIMIT = 5\nlocal function f() LIMIT = 6 end\n");
    }

    #[test]
    #[should_panic(expected = "the constant A is defined twice")]
    fn a_constant_defined_twice_stops_the_build() {
        inline_constants("local A = 5\nlocal A = 7\nreturn A\n");
    }

    #[test]
    #[should_panic(expected = "above 2^53 - 1")]
    fn a_value_past_exact_numbers_stops_the_build() {
        inline_constants("local BIG = 9007199254740992\n");
    }

    #[test]
    #[should_panic(expected = "a long comment is not read here")]
    fn a_long_comment_stops_the_build() {
        inline_constants("local A = 1\n--[[ A\n]]\n");
    }

    /// The prelude compiled in is lua/prelude/'s files joined in file-name order, through
    /// `inline_constants`; and its constants are whole numbers Lua holds exactly.
    #[test]
    fn the_compiled_prelude_is_lua_prelude_with_constants_in_place() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua/prelude");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".lua"))
            .collect();
        names.sort();
        let joined: String = names
            .iter()
            .map(|name| std::fs::read_to_string(dir.join(name)).unwrap())
            .collect();
        assert_eq!(crate::scripts::PRELUDE, inline_constants(&joined));
        assert_ne!(crate::scripts::PRELUDE, joined, "no constant was replaced");
        assert!(!crate::scripts::PRELUDE.contains("= HEAD_TTL_MS"));
    }
}
