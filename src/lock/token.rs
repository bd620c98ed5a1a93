//! The token that proves a holder owns its lock, and that a waiter will hold.

use std::fmt;

/// The secret that proves a holder owns its lock: a UUID v4 (122 random bits from the OS), as
/// 32 hex digits.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A fresh random token.
    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string())
    }

    /// Accepts a token as printed by `acquire`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(Self(text.to_ascii_lowercase()))
        } else {
            Err("not a redlock token (32 hex digits, as printed by `redlock acquire`)".into())
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::Token;

    #[test]
    fn tokens_are_unique_hex_and_only_tokens_parse() {
        let tokens: std::collections::HashSet<String> = (0..100_000)
            .map(|_| Token::generate().as_str().to_owned())
            .collect();
        assert_eq!(tokens.len(), 100_000);
        assert!(
            tokens
                .iter()
                .all(|token| { token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()) })
        );
        let token = tokens.iter().next().unwrap();
        assert_eq!(Token::parse(&token.to_uppercase()).unwrap().as_str(), token);
        for bad in [
            "",
            "abc",
            "g0123456789abcdef0123456789abcde",
            "0123456789abcdef0123456789abcdef0",
        ] {
            assert!(Token::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(format!("{:?}", Token::generate()), "Token(***)");
    }
}
