//! The subcommands that print (everything but the front ends): each writes through the
//! checked writers of `stop.rs`, so `crow sessions show ID | head` ends quietly.

pub mod attempts;
pub mod eval;
pub mod hooks;
pub mod mcp;
pub mod review;
pub mod sessions;
pub mod skills;
pub mod undo;
