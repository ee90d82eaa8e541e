//! [`ClientBridge`]: services of the front end's client (an editor speaking ACP) that tools
//! use instead of the local machine when the client offers them.
//!
//! An editor knows things the disk does not (unsaved buffers) and wants to show what the agent
//! does (writes through its buffers, commands in its terminals). Tools ask
//! [`ToolContext::client`](crate::ToolContext::client) first and fall back to the machine when
//! there is no bridge or it does not offer the service. The core only defines the contract; the
//! ACP crate implements it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::tool::ToolContext;

/// A failed client call. The message is for the model and the logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BridgeError {
    #[error("the client does not offer this")]
    Unsupported,
    #[error("{0}")]
    Client(String),
    #[error("cancelled")]
    Cancelled,
}

/// A shell command to run in a client terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRequest {
    /// The command line, run as `bash -c COMMAND`.
    pub command: String,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    /// The command is killed after this long.
    pub timeout: Duration,
    /// The client keeps at most this many bytes of output (the end of it).
    pub output_byte_limit: usize,
}

/// How a client-run command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandEnding {
    Exited,
    TimedOut,
    Cancelled,
}

/// What a client-run command produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutcome {
    pub output: String,
    /// The client dropped the start of the output to stay under the limit.
    pub truncated: bool,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub ending: CommandEnding,
    /// The client's terminal, so front ends can keep showing it.
    pub terminal_id: Option<String>,
}

/// Client services. Every method has a default that declines, so a bridge implements only
/// what its client offers; tools check the `offers_*` methods before calling.
#[async_trait]
pub trait ClientBridge: Send + Sync {
    /// Reads go through the client (which sees unsaved editor buffers).
    fn offers_read(&self) -> bool {
        false
    }

    /// Writes go through the client (which updates open buffers and shows the change).
    fn offers_write(&self) -> bool {
        false
    }

    /// Shell commands run in client terminals.
    fn offers_terminal(&self) -> bool {
        false
    }

    /// The whole text of `path` (absolute). Any error, including "no such file" in whatever
    /// shape the client reports it, is a [`BridgeError`]; callers check the disk to tell a
    /// missing file from a failing client.
    async fn read_text_file(
        &self,
        _ctx: &ToolContext,
        _path: &Path,
    ) -> Result<String, BridgeError> {
        Err(BridgeError::Unsupported)
    }

    /// Replaces (or creates) `path` (absolute) with `content`.
    async fn write_text_file(
        &self,
        _ctx: &ToolContext,
        _path: &Path,
        _content: &str,
    ) -> Result<(), BridgeError> {
        Err(BridgeError::Unsupported)
    }

    /// Runs a command to its end, its timeout or `ctx.cancel`, killing it in the last two
    /// cases, and releases the terminal before returning.
    async fn run_command(
        &self,
        _ctx: &ToolContext,
        _request: CommandRequest,
    ) -> Result<CommandOutcome, BridgeError> {
        Err(BridgeError::Unsupported)
    }
}
