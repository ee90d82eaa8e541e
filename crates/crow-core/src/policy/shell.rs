//! A command line as far as the shell's reading matters to the policy: where it splits into
//! simple commands, which words it hands a program after quote removal, and which parts run
//! other commands (`$(..)`, backticks, `<(..)`, `>(..)`, `coproc`).
//!
//! This is not a shell parser: where it cannot tell, it errs so that allow rules match less
//! and deny rules more (splitting too much, taking text for a substitution).

/// How the shell saw one character of a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Quote {
    /// Unquoted: globs, `~` and `$` are live.
    Bare,
    /// In double quotes: `$` is live, globs are not.
    Double,
    /// Single-quoted or backslash-escaped: plain text.
    Literal,
    /// Part of a command substitution: its value is unknown.
    Unknown,
}

/// A word after quote removal, each character with how it was quoted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Word {
    pub chars: Vec<(char, Quote)>,
}

impl Word {
    pub fn text(&self) -> String {
        self.chars.iter().map(|(c, _)| c).collect()
    }
}

/// The simple commands of a command line, split at `&&`, `||`, `;`, `|`, `|&`, `&` and
/// newlines. Quotes are not honoured: splitting too much only makes allow rules match less
/// and deny rules match more, the safe direction.
pub fn split_command(command: &str) -> Vec<&str> {
    let segments: Vec<&str> = command
        .split(['&', '|', ';', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if segments.is_empty() {
        vec![command.trim()]
    } else {
        segments
    }
}

/// Whether the command runs something no rule can see from its text: a command or process
/// substitution, a parameter expansion beyond a plain `${NAME}` (`${x@P}` runs the
/// substitutions in `x`'s value), or a `coproc`.
pub fn substitutes(command: &str) -> bool {
    if ["$(", "`", "<(", ">("].iter().any(|s| command.contains(s)) {
        return true;
    }
    let mut rest = command;
    while let Some(at) = rest.find("${") {
        let body = &rest[at + 2..];
        let name_len = body
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(body.len());
        if name_len == 0 || !body[name_len..].starts_with('}') {
            return true;
        }
        rest = &body[name_len..];
    }
    command
        .split(|c: char| c.is_whitespace() || "&|;(){}!".contains(c))
        .any(|w| w == "coproc")
}

/// The command lines inside substitutions (`$(..)`, backticks, `<(..)`, `>(..)`), the
/// outermost ones (the caller looks inside each again): each is judged by the rules as a
/// command of its own.
pub fn inner_commands(command: &str) -> Vec<String> {
    let mut found = Vec::new();
    let chars: Vec<char> = command.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let opens = matches!(chars[i], '$' | '<' | '>') && chars.get(i + 1) == Some(&'(');
        if opens {
            let (inner, end) = until_close(&chars, i + 2);
            found.push(inner);
            i = end;
        } else if chars[i] == '`' {
            let end = chars[i + 1..]
                .iter()
                .position(|c| *c == '`')
                .map_or(chars.len(), |p| i + 1 + p);
            found.push(chars[i + 1..end].iter().collect());
            i = end + 1;
        } else {
            i += 1;
        }
    }
    found
}

/// The text from `start` to the `)` that closes the one before it, and the index after it.
fn until_close(chars: &[char], start: usize) -> (String, usize) {
    let mut depth = 1;
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return (chars[start..i].iter().collect(), i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    (chars[start..].iter().collect(), chars.len())
}

/// The words of `text` as the shell would pass them: split at unquoted blanks and
/// operators (`;&|()<>`), quotes removed, backslash escapes and `$'..'` decoded.
/// Substitutions stay in their word as [`Quote::Unknown`] text.
pub(super) fn words(text: &str) -> Vec<Word> {
    let chars: Vec<char> = text.chars().collect();
    let mut words = Vec::new();
    let mut word = Word::default();
    let mut started = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\'' => {
                let end = find(&chars, i + 1, '\'');
                push_all(&mut word, &chars[i + 1..end], Quote::Literal);
                started = true;
                i = end + 1;
            }
            '"' => {
                i = double_quoted(&chars, i + 1, &mut word);
                started = true;
            }
            '\\' => {
                match next {
                    Some('\n') => {}
                    Some(n) => word.chars.push((n, Quote::Literal)),
                    None => word.chars.push(('\\', Quote::Literal)),
                }
                started = true;
                i += 2;
            }
            '$' if next == Some('\'') => {
                i = ansi_c(&chars, i + 2, &mut word);
                started = true;
            }
            '$' if next == Some('"') => i += 1,
            '$' | '<' | '>' if next == Some('(') => {
                let (_, end) = until_close(&chars, i + 2);
                push_all(&mut word, &chars[i..end], Quote::Unknown);
                started = true;
                i = end;
            }
            '`' => {
                let end = find(&chars, i + 1, '`');
                push_all(
                    &mut word,
                    &chars[i..(end + 1).min(chars.len())],
                    Quote::Unknown,
                );
                started = true;
                i = end + 1;
            }
            '$' if next == Some('{') => {
                let end = find(&chars, i + 2, '}');
                push_all(
                    &mut word,
                    &chars[i..(end + 1).min(chars.len())],
                    Quote::Bare,
                );
                started = true;
                i = end + 1;
            }
            c if c.is_whitespace() || ";&|()<>".contains(c) => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
                i += 1;
            }
            c => {
                word.chars.push((c, Quote::Bare));
                started = true;
                i += 1;
            }
        }
    }
    if started {
        words.push(word);
    }
    words
}

/// The index of the next `close` from `from`, or the end (an unterminated quote runs on).
fn find(chars: &[char], from: usize, close: char) -> usize {
    chars
        .get(from..)
        .and_then(|rest| rest.iter().position(|c| *c == close))
        .map_or(chars.len(), |p| from + p)
}

fn push_all(word: &mut Word, chars: &[char], quote: Quote) {
    word.chars.extend(chars.iter().map(|c| (*c, quote)));
}

/// A double-quoted part from `i` (after the `"`); the index after the closing quote.
fn double_quoted(chars: &[char], mut i: usize, word: &mut Word) -> usize {
    while i < chars.len() {
        match chars[i] {
            '"' => return i + 1,
            // Inside double quotes a backslash escapes only these.
            '\\' if chars
                .get(i + 1)
                .is_some_and(|n| matches!(n, '$' | '`' | '"' | '\\' | '\n')) =>
            {
                if chars[i + 1] != '\n' {
                    word.chars.push((chars[i + 1], Quote::Literal));
                }
                i += 2;
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                let (_, end) = until_close(chars, i + 2);
                push_all(word, &chars[i..end], Quote::Unknown);
                i = end;
            }
            '`' => {
                let end = find(chars, i + 1, '`');
                push_all(word, &chars[i..(end + 1).min(chars.len())], Quote::Unknown);
                i = end + 1;
            }
            c => {
                word.chars.push((c, Quote::Double));
                i += 1;
            }
        }
    }
    i
}

/// A `$'..'` part from `i` (after the quote), its escapes decoded; the index after it.
fn ansi_c(chars: &[char], mut i: usize, word: &mut Word) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\'' => return i + 1,
            '\\' => {
                let (c, used) = ansi_escape(&chars[i + 1..]);
                word.chars.push((c, Quote::Literal));
                i += 1 + used;
            }
            c => {
                word.chars.push((c, Quote::Literal));
                i += 1;
            }
        }
    }
    i
}

/// One escape of `$'..'` (after the backslash): the character and how many were used.
fn ansi_escape(rest: &[char]) -> (char, usize) {
    let digits = |radix: u32, max: usize, skip: usize| {
        let run: String = rest
            .iter()
            .skip(skip)
            .take(max)
            .take_while(|c| c.is_digit(radix))
            .collect();
        let value = u32::from_str_radix(&run, radix)
            .ok()
            .and_then(char::from_u32);
        value.map(|c| (c, skip + run.len()))
    };
    let decoded = match rest.first() {
        None => Some(('\\', 0)),
        Some('n') => Some(('\n', 1)),
        Some('t') => Some(('\t', 1)),
        Some('r') => Some(('\r', 1)),
        Some('x') => digits(16, 2, 1),
        Some('u') => digits(16, 4, 1),
        Some('U') => digits(16, 8, 1),
        Some(c) if c.is_digit(8) => digits(8, 3, 0),
        Some(c) => Some((*c, 1)),
    };
    decoded.unwrap_or(('\\', 0))
}

/// Programs that run the command after them (with their own options first).
const WRAPPERS: [&str; 13] = [
    "command", "env", "exec", "nice", "nohup", "time", "sudo", "doas", "builtin", "coproc",
    "timeout", "setsid", "xargs",
];

/// A wrapper's options that take the next word as their value.
fn option_takes_value(wrapper: &str, option: &str) -> bool {
    let letters = match wrapper {
        "sudo" => "ugCDhprtTU",
        "doas" => "uC",
        "env" => "uCS",
        "nice" => "n",
        "exec" => "a",
        "time" => "fo",
        "timeout" => "sk",
        "xargs" => "aIdEnLPs",
        _ => "",
    };
    option.len() == 2 && option.chars().nth(1).is_some_and(|c| letters.contains(c))
}

/// A simple command as a deny or ask rule compares it, in two spellings: words after quote
/// removal, leading `VAR=x` assignments and wrappers (`sudo`, `env`, `command`, `nice`, ...)
/// with their options peeled, the program by its basename, and single-letter flags
/// un-bundled, lower-cased and sorted: where they stand (`git push -f`, so a subcommand stays
/// in place) and all together after the program (`rm -r x -F` → `rm -f -r x`). Only ever
/// matched in addition to the text as written, and never for allow rules.
pub(super) fn normalise(text: &str) -> [String; 2] {
    let words: Vec<String> = words(text).iter().map(Word::text).collect();
    let i = program_at(&words);
    let Some(program) = words.get(i) else {
        let all = words.join(" ");
        return [all.clone(), all];
    };
    let program = program.rsplit('/').next().unwrap_or(program).to_owned();
    let mut inline = vec![program.clone()];
    let mut run: Vec<char> = Vec::new();
    let mut hoisted_flags: Vec<char> = Vec::new();
    let mut rest: Vec<&str> = Vec::new();
    let mut options_end = false;
    for word in &words[i + 1..] {
        match flag_letters(word).filter(|_| !options_end) {
            Some(letters) => {
                run.extend(&letters);
                hoisted_flags.extend(letters);
            }
            None => {
                inline.extend(flags(&mut run));
                inline.push(word.clone());
                options_end |= word == "--";
                rest.push(word);
            }
        }
    }
    inline.extend(flags(&mut run));
    let mut hoisted = vec![program];
    hoisted.extend(flags(&mut hoisted_flags));
    hoisted.extend(rest.iter().map(|w| (*w).to_owned()));
    [inline.join(" "), hoisted.join(" ")]
}

/// The index of the program a simple command runs: after leading keywords (`then`, `!`,
/// `{`), `VAR=x` assignments and wrappers with their options.
fn program_at(words: &[String]) -> usize {
    let mut i = 0;
    while let Some(word) = words.get(i) {
        let word = word.as_str();
        if matches!(
            word,
            "{" | "}" | "!" | "if" | "then" | "do" | "else" | "elif" | "while" | "until"
        ) || is_assignment(word)
        {
            i += 1;
        } else if WRAPPERS.contains(&word) {
            i = after_wrapper(words, i);
        } else {
            break;
        }
    }
    i
}

/// The command line a simple command hands another shell: `sh -c 'LINE'` (any shell, any
/// bundle holding `c`: `bash -lc`) or `eval WORDS`.
pub(super) fn script_of(segment: &str) -> Option<String> {
    let words: Vec<String> = words(segment).iter().map(Word::text).collect();
    let at = program_at(&words);
    let program = words.get(at)?;
    let program = program.rsplit('/').next().unwrap_or(program);
    if program == "eval" {
        return Some(words[at + 1..].join(" "));
    }
    if !SHELLS.contains(&program) {
        return None;
    }
    let flag = words[at + 1..]
        .iter()
        .position(|w| flag_letters(w).is_some_and(|l| l.contains(&'c')))?;
    words.get(at + 2 + flag).cloned()
}

/// Programs that run a command line given with `-c`.
const SHELLS: [&str; 6] = ["sh", "bash", "zsh", "dash", "ksh", "fish"];

/// The letters of a bundle of single-letter flags (`-rF` → `r`, `f`).
fn flag_letters(word: &str) -> Option<Vec<char>> {
    let letters = word.strip_prefix('-')?;
    (!letters.is_empty() && letters.chars().all(|c| c.is_ascii_alphabetic()))
        .then(|| letters.chars().map(|c| c.to_ascii_lowercase()).collect())
}

/// `letters` as sorted single flags (`-f`, `-r`), emptying it.
fn flags(letters: &mut Vec<char>) -> Vec<String> {
    letters.sort_unstable();
    letters.dedup();
    letters.drain(..).map(|f| format!("-{f}")).collect()
}

/// The index of the first word after the wrapper at `at` and its options (and `env`'s
/// assignments, `timeout`'s duration, `coproc`'s name).
fn after_wrapper(words: &[String], at: usize) -> usize {
    let wrapper = words[at].as_str();
    let mut i = at + 1;
    while let Some(word) = words.get(i) {
        if word == "--" {
            i += 1;
            break;
        }
        if word.starts_with('-') && word.len() > 1 {
            i += if option_takes_value(wrapper, word) {
                2
            } else {
                1
            };
        } else if wrapper == "env" && is_assignment(word) {
            i += 1;
        } else {
            break;
        }
    }
    let positional = match wrapper {
        "timeout" => true,
        // `coproc NAME { cmd; }`: the name comes before a compound command only.
        "coproc" => words.get(i + 1).is_some_and(|w| w == "{"),
        _ => false,
    };
    if positional { i + 1 } else { i }
}

/// `NAME=value`, the shell's assignment word.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}
