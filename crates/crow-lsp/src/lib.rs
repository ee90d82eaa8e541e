//! Language servers for crow: the errors an edit introduced, in the same tool result.
//!
//! [`LspManager`] starts a language's server lazily, the first time a file with one of its
//! extensions is edited, in the project root (the nearest `root_markers` directory), over
//! stdio, in its own process group with the commands' environment policy. After an edit,
//! [`WithDiagnostics`] (a decorator around the edit tools) syncs the touched files
//! (`didOpen`/`didChange`/`didSave`), waits for the server's `publishDiagnostics` to settle,
//! bounded by `wait`, and appends the problems that are new compared with before the edit.
//! No server for a file's extension costs one map lookup. A server that dies is restarted
//! once, then left off with one notice. [`DiagnosticsTool`] lets the model ask for the current
//! problems. Servers are shut down (`shutdown`, `exit`, then the group killed) by
//! [`LspManager::shutdown`], on drop, or by [`kill_all_servers`] when crow exits.

mod diag;
mod framing;
mod manager;
mod server;
mod tools;

pub use diag::{MAX_BYTES, MAX_ITEMS, introduced, render, summary, summary_new};
pub use framing::{read_message, write_message};
pub use manager::{
    EditOutcome, EditedFile, LspManager, LspSettings, ServerConfig, default_servers, find_on_path,
    shutdown_all,
};
pub use server::kill_all_servers;
pub use tools::{
    DIAGNOSTICS_TOOL, DiagnosticsTool, REPORT_HEADING, WithDiagnostics, wrap_registry,
};

/// What can go wrong talking to a server. None of it fails an edit: the edit's result goes
/// back without diagnostics.
#[derive(Debug, thiserror::Error)]
pub enum LspError {
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("I/O with the language server: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed message from the language server: {0}")]
    Framing(String),
    #[error("language server protocol: {0}")]
    Protocol(String),
    #[error("the language server did not answer `{0}` in time")]
    Timeout(String),
    #[error("the language server exited")]
    Exited,
}
