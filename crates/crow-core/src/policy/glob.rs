//! The rules' glob matcher ([`super::wildcard`]): the pattern compiled to a few tokens and
//! run as an automaton over the text, every live state at once (Thompson's construction),
//! so its cost is bounded by `2·(tokens+1)·(text+1)` steps, whatever the pattern.

/// One step of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// This character.
    Lit(char),
    /// Any one character (`?`; not `/` for a path).
    One { cross: bool },
    /// Any run of characters (`*`, or `**` for a path; a path's `*` never takes a `/`).
    Star { cross: bool },
    /// A path's `**/`, which also matches nothing: on to the token `skip` ahead (the
    /// `**` and the `/` that follow it here), before any character is taken.
    Skip(usize),
}

fn compile(pattern: &str, path: bool) -> Vec<Token> {
    let p: Vec<char> = pattern.chars().collect();
    let mut tokens = Vec::with_capacity(p.len() + 1);
    let mut i = 0;
    while let Some(&c) = p.get(i) {
        match c {
            '*' if path && p.get(i + 1) == Some(&'*') => {
                if p.get(i + 2) == Some(&'/') {
                    tokens.extend([Token::Skip(3), Token::Star { cross: true }, Token::Lit('/')]);
                    i += 3;
                } else {
                    tokens.push(Token::Star { cross: true });
                    i += 2;
                }
            }
            '*' => {
                tokens.push(Token::Star { cross: !path });
                i += 1;
            }
            '?' => {
                tokens.push(Token::One { cross: !path });
                i += 1;
            }
            c => {
                tokens.push(Token::Lit(c));
                i += 1;
            }
        }
    }
    tokens
}

/// Whether `text` matches `pattern`; `steps` counts the automaton's state visits (the tests
/// bound it).
pub(super) fn matches(pattern: &str, text: &str, path: bool, steps: &mut usize) -> bool {
    let tokens = compile(pattern, path);
    let end = tokens.len();
    // `live[s]`: the text so far can be matched by the tokens before `s`.
    let mut live = vec![false; end + 1];
    let mut next = vec![false; end + 1];
    live[0] = true;
    close(&tokens, &mut live, steps);
    for c in text.chars() {
        next.fill(false);
        for (s, token) in tokens.iter().enumerate() {
            *steps += 1;
            if !live[s] {
                continue;
            }
            match *token {
                Token::Lit(l) if l == c => next[s + 1] = true,
                Token::One { cross } if cross || c != '/' => next[s + 1] = true,
                Token::Star { cross } if cross || c != '/' => next[s] = true,
                _ => {}
            }
        }
        if !close(&tokens, &mut next, steps) {
            return false;
        }
        std::mem::swap(&mut live, &mut next);
    }
    live[end]
}

/// Adds the states reached without taking a character (a `*` taking nothing, a `**/`
/// skipped): every such move goes forward, so one pass in order is enough. Whether any state
/// is live.
fn close(tokens: &[Token], live: &mut [bool], steps: &mut usize) -> bool {
    let mut any = false;
    for (s, token) in tokens.iter().enumerate() {
        *steps += 1;
        if !live[s] {
            continue;
        }
        any = true;
        match *token {
            Token::Star { .. } => live[s + 1] = true,
            Token::Skip(ahead) => {
                live[s + 1] = true;
                if let Some(target) = live.get_mut(s + ahead) {
                    *target = true;
                }
            }
            Token::Lit(_) | Token::One { .. } => {}
        }
    }
    any || live.last().copied().unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The matcher crow had before: the definition of the semantics, by backtracking
    /// (exponential in the number of `*`, fine on short inputs).
    fn reference(p: &[char], t: &[char], path: bool) -> bool {
        match p.first() {
            None => t.is_empty(),
            Some('*') => {
                if path && p.get(1) == Some(&'*') {
                    let rest = &p[2..];
                    if rest.first() == Some(&'/') && reference(&rest[1..], t, path) {
                        return true;
                    }
                    (0..=t.len()).any(|i| reference(rest, &t[i..], path))
                } else {
                    let rest = &p[1..];
                    for i in 0..=t.len() {
                        if reference(rest, &t[i..], path) {
                            return true;
                        }
                        if path && t.get(i) == Some(&'/') {
                            break;
                        }
                    }
                    false
                }
            }
            Some('?') => {
                t.first().is_some_and(|c| !(path && *c == '/')) && reference(&p[1..], &t[1..], path)
            }
            Some(c) => t.first() == Some(c) && reference(&p[1..], &t[1..], path),
        }
    }

    fn bound(pattern: &str, text: &str) -> usize {
        2 * (pattern.chars().count() + 1) * (text.chars().count() + 1)
    }

    #[test]
    fn many_stars_against_a_long_text_take_few_steps() {
        // Nine `*` against sixty characters it does not match: the backtracking matcher
        // took minutes here.
        let pattern = format!("{}b", "*a".repeat(9));
        let text = "a".repeat(60);
        for path in [false, true] {
            let mut steps = 0;
            assert!(!matches(&pattern, &text, path, &mut steps));
            assert!(steps <= bound(&pattern, &text), "{steps} steps");
        }
        let pattern = "**/*a*a*a*a*a*a*a*a*a/x";
        let text = format!("{}/y", "a/".repeat(40));
        let mut steps = 0;
        assert!(!matches(pattern, &text, true, &mut steps));
        assert!(steps <= bound(pattern, &text), "{steps} steps");
    }

    #[test]
    fn double_star_slash_matches_no_directory_only_at_its_start() {
        assert!(matches("**/x", "x", true, &mut 0));
        assert!(matches("**/x", "a/b/x", true, &mut 0));
        assert!(!matches("**/x", "abx", true, &mut 0));
        assert!(matches("a/**/b", "a/b", true, &mut 0));
        assert!(matches("a/**", "a/b/c", true, &mut 0));
        assert!(!matches("a/*", "a/b/c", true, &mut 0));
        assert!(matches("a/*", "a/b/c", false, &mut 0));
        assert!(!matches("?", "/", true, &mut 0));
        assert!(matches("?", "/", false, &mut 0));
        assert!(matches("", "", true, &mut 0));
        assert!(!matches("", "a", false, &mut 0));
        assert!(matches("***", "a/b", true, &mut 0));
        assert!(matches("é*ü", "éaaü", false, &mut 0));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn agrees_with_the_backtracking_matcher_within_the_bound(
            pattern in "[ab/*?]{0,9}",
            text in "[ab/]{0,12}",
            path in any::<bool>(),
        ) {
            let p: Vec<char> = pattern.chars().collect();
            let t: Vec<char> = text.chars().collect();
            let mut steps = 0;
            prop_assert_eq!(matches(&pattern, &text, path, &mut steps), reference(&p, &t, path));
            prop_assert!(steps <= bound(&pattern, &text));
        }
    }
}
