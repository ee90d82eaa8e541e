//! Lines for the user outside any answer ("warning: …", "note: …"), from code that has no
//! terminal of its own. The front end decides where they go: the binary sends them to stderr
//! through its checked writer, the interactive terminal prints them above its prompt. Until
//! one is installed they go to stderr (a failed write is dropped: there is nobody to tell).

use std::sync::RwLock;

/// Where the lines go.
pub type Route = Box<dyn Fn(String) + Send + Sync>;

static ROUTE: RwLock<Option<Route>> = RwLock::new(None);

/// Sends every later line to `route` (replacing the one before).
pub fn route(route: impl Fn(String) + Send + Sync + 'static) {
    let mut slot = ROUTE
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *slot = Some(Box::new(route));
}

/// One line for the user.
pub fn line(text: std::fmt::Arguments<'_>) {
    let slot = ROUTE
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match slot.as_ref() {
        Some(route) => route(text.to_string()),
        None => {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr().lock(), "{text}");
        }
    }
}

/// `eprintln!` for library code: the line goes where the front end routes it ([`line`]).
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {{
        $crate::say::line(format_args!($($arg)*));
    }};
}
