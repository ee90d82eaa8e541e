//! Whether a command line only reads: every simple command in it is a program that reads
//! files and prints, with no option that writes a file or runs another program, and nothing
//! redirects output into a file. The loop skips the snapshots around such a command
//! (`agent/snapshots.rs`), so a first step like `ls` or `cat` never waits for the project's
//! first snapshot.
//!
//! Judged from the text alone and strictly: anything this reader does not fully understand
//! (a substitution, a subshell, a background job, a redirection other than to `/dev/null` or
//! between descriptors, a quote left open, a program not listed) makes the command one that
//! may change files. What the text cannot show (the program a name finds on `PATH`, a
//! `BASH_ENV` script) is the caller's to check.

use super::shell::substitutes;

/// Programs with no option that writes a file or runs another program (GNU coreutils, grep
/// and findutils manuals, and bash's builtins); `find` only without its actions that do.
const READERS: &[&str] = &[
    "basename", "cat", "cmp", "cut", "df", "diff", "dirname", "du", "echo", "egrep", "false",
    "fgrep", "find", "grep", "head", "id", "ls", "nl", "nproc", "printf", "pwd", "readlink",
    "realpath", "seq", "sleep", "stat", "tail", "tr", "true", "uname", "wc", "which", "whoami",
];

/// `find`'s actions that delete, write a file or run a program.
const FIND_WRITES: &[&str] = &[
    "-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls",
];

/// Whether `command` (a `bash -c` line) only reads files: see the module's documentation.
pub fn reads_only(command: &str) -> bool {
    // Long lines are scripts, not the quick looks this is for.
    if command.len() > 4096 || substitutes(command) {
        return false;
    }
    match simple_commands(command) {
        Some(commands) => !commands.is_empty() && commands.iter().all(|words| reads(words)),
        None => false,
    }
}

/// Whether one simple command (its words, quotes removed) only reads.
fn reads(words: &[String]) -> bool {
    let Some((program, args)) = words.split_first() else {
        return false;
    };
    match program.as_str() {
        // `cd` changes only the shell's own directory.
        "cd" => args.len() <= 1,
        "find" => !args.iter().any(|a| FIND_WRITES.contains(&a.as_str())),
        p => READERS.contains(&p),
    }
}

/// The simple commands of `command` as lists of words (quotes removed), split at `;`, `|`,
/// `||`, `&&`, `|&` and newlines; `None` when the line holds anything else the shell would
/// act on: a background `&`, a group or subshell, a redirection other than `>/dev/null`
/// (any descriptor, `>>`, `&>`) or `N>&M`, `<` of any kind, a quote left open.
fn simple_commands(command: &str) -> Option<Vec<Vec<String>>> {
    let chars: Vec<char> = command.chars().collect();
    let mut commands: Vec<Vec<String>> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    // Whether `word` has begun (an empty quoted word counts).
    let mut started = false;
    let mut i = 0;
    let end_word = |word: &mut String, started: &mut bool, words: &mut Vec<String>| {
        if std::mem::take(started) {
            words.push(std::mem::take(word));
        }
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' => {
                let close = i + 1 + chars[i + 1..].iter().position(|&q| q == '\'')?;
                word.extend(&chars[i + 1..close]);
                started = true;
                i = close + 1;
            }
            '"' => {
                i += 1;
                loop {
                    match *chars.get(i)? {
                        '"' => break,
                        '\\' if chars
                            .get(i + 1)
                            .is_some_and(|n| matches!(n, '$' | '`' | '"' | '\\')) =>
                        {
                            word.push(chars[i + 1]);
                            i += 2;
                        }
                        // A line continuation inside quotes: not worth reading.
                        '\\' if chars.get(i + 1) == Some(&'\n') => return None,
                        c => {
                            word.push(c);
                            i += 1;
                        }
                    }
                }
                started = true;
                i += 1;
            }
            '\\' => {
                // An escaped newline joins lines; anything else escaped is itself.
                match chars.get(i + 1) {
                    Some('\n') => {}
                    Some(&n) => {
                        word.push(n);
                        started = true;
                    }
                    None => return None,
                }
                i += 2;
            }
            ';' | '\n' | '|' => {
                end_word(&mut word, &mut started, &mut words);
                commands.push(std::mem::take(&mut words));
                // `||` and `|&` are one operator.
                if c == '|' && matches!(chars.get(i + 1), Some('|' | '&')) {
                    i += 1;
                }
                i += 1;
            }
            '&' if chars.get(i + 1) == Some(&'&') => {
                end_word(&mut word, &mut started, &mut words);
                commands.push(std::mem::take(&mut words));
                i += 2;
            }
            '&' if chars.get(i + 1) == Some(&'>') => {
                // `&>` and `&>>`: both outputs, to /dev/null only.
                end_word(&mut word, &mut started, &mut words);
                i = to_dev_null(&chars, i + 1)?;
            }
            '>' => {
                // A descriptor number right before it is part of the redirection.
                if started && !word.is_empty() && word.chars().all(|d| d.is_ascii_digit()) {
                    word.clear();
                    started = false;
                }
                end_word(&mut word, &mut started, &mut words);
                i = if chars.get(i + 1) == Some(&'&') {
                    duplicate(&chars, i + 2)?
                } else {
                    to_dev_null(&chars, i)?
                };
            }
            // Background jobs, `<`, groups, subshells, and a comment that could hide an open
            // quote: not read here.
            '&' | '<' | '(' | ')' | '{' | '}' | '#' => return None,
            c if c.is_whitespace() => {
                end_word(&mut word, &mut started, &mut words);
                i += 1;
            }
            c => {
                word.push(c);
                started = true;
                i += 1;
            }
        }
    }
    end_word(&mut word, &mut started, &mut words);
    commands.push(words);
    // Empty commands between operators (`a ;; b`, a trailing `;`) are not commands.
    commands.retain(|words| !words.is_empty());
    Some(commands)
}

/// After `>` at `at` (or `>>`): spaces, then `/dev/null` as a whole word; the index after it.
fn to_dev_null(chars: &[char], at: usize) -> Option<usize> {
    let mut i = at + 1;
    if chars.get(i) == Some(&'>') {
        i += 1;
    }
    while chars.get(i).is_some_and(|c| *c == ' ' || *c == '\t') {
        i += 1;
    }
    let target: String = chars
        .get(i..)?
        .iter()
        .take_while(|c| !c.is_whitespace() && !";|&".contains(**c))
        .collect();
    (target == "/dev/null").then_some(i + target.chars().count())
}

/// After `>&` (at `at`): a descriptor number or `-`; the index after it.
fn duplicate(chars: &[char], at: usize) -> Option<usize> {
    let len = chars
        .get(at..)?
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .count();
    match (len, chars.get(at)) {
        (0, Some('-')) => Some(at + 1),
        (0, _) => None,
        (len, _) => Some(at + len),
    }
}

#[cfg(test)]
mod tests {
    use super::reads_only;

    #[test]
    fn looks_at_the_tree_only_read() {
        for command in [
            "ls",
            "ls -la src",
            "cat README.md",
            "echo done",
            "echo 'a > b' \"c | d\"",
            "cd src && ls",
            "grep -rn 'fn main' . | head -20",
            "find . -name '*.rs' -type f | wc -l",
            "ls 2>/dev/null",
            "cat x 2>&1 | tail -5",
            "cat x >/dev/null 2>&1; echo $?",
            "du -sh . &> /dev/null || echo none",
            "head -n 5 a.txt; tail b.txt",
            "pwd\nls",
            "echo \"$HOME\" | tr a-z A-Z",
            "grep -c x file |& head",
            "echo a\\ b",
            "cat '' x",
        ] {
            assert!(reads_only(command), "{command}");
        }
    }

    #[test]
    fn anything_that_may_write_or_that_this_cannot_read_may_change_files() {
        for command in [
            "",
            "   ",
            "echo x > out.txt",
            "echo x >> out.txt",
            "echo x >out.txt",
            "echo x 1>out",
            "echo x &> log",
            "echo x >/dev/null.txt",
            "echo x > /dev/null/../../tmp/x",
            "cat <> file",
            "cat < file",
            "cat <<EOF\nx\nEOF",
            "touch a",
            "rm -rf build",
            "ls; rm x",
            "ls && touch x",
            "ls | tee out",
            "cat x | sh",
            "sleep 5 &",
            "(cd src && ls)",
            "{ ls; }",
            "echo $(touch x)",
            "echo `touch x`",
            "cat <(touch x)",
            "echo ${x@P}",
            "find . -delete",
            "find . -name x -exec rm {} ;",
            "find . -fprint out",
            "X=1 ls",
            "LD_PRELOAD=./evil.so ls",
            "./ls",
            "/bin/ls",
            "$CMD",
            "l\\s > x",
            "echo 'open",
            "echo \"open",
            "echo x # ' > y",
            "git status",
            "sort -o out in",
            "xargs rm",
            "env touch x",
            "sudo ls",
            "cd a b",
            "ls >& out",
            "echo x \\",
        ] {
            assert!(!reads_only(command), "{command:?}");
        }
    }

    #[test]
    fn a_quoted_operator_is_text_and_a_quoted_program_name_is_still_checked() {
        assert!(reads_only("grep ';rm -rf x' file"));
        assert!(reads_only("echo '&' \"(\" '>' x"));
        assert!(!reads_only("'rm' x"));
        assert!(reads_only("'ls' -l"));
        assert!(!reads_only("\"touch\" a"));
    }
}
