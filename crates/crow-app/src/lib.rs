//! crow's application layer, under every front end (`crow run`, the interactive terminal,
//! `crow acp`): layered configuration and trust, the permission policy's rule files, the agent
//! catalog, composition of crews, sessions in the store, undo, memory, telemetry, project
//! instructions, skills, prompt templates and custom commands. The `crow` binary keeps the
//! command line, the terminal, the ACP glue, rendering and the subcommands' output; nothing
//! here prints to stdout.

#[macro_use]
pub mod stop;

pub mod agents;
pub mod attempts;
pub mod compose;
pub mod config;
pub mod driver;
pub mod eval;
pub mod external;
pub mod hooks;
pub mod init;
pub mod instructions;
pub mod keyring;
pub mod lsp;
pub mod mcp;
pub mod memory;
pub mod mentions;
pub mod models;
pub mod opencode;
pub mod permissions;
mod procs;
pub mod prompt;
pub mod review;
pub mod session_cmd;
pub mod sessions;
pub mod setup;
pub mod skills;
pub mod slash;
pub mod store;
pub mod structured;
pub mod telemetry;
pub mod templates;
pub mod trust;
pub mod undo;
pub mod wiring;
pub mod worktree;
