//! crow in the terminal: the interactive terminal (`crow` with no subcommand, [`tui`]) and
//! the renderers of `crow run` ([`render`]: text for a person, JSON lines for programs).
//! Both drive sessions through crow-app's session driver and only show its events and ask
//! its questions; the `crow` binary wires them to the command line.

#[macro_use]
extern crate crow_app;

// The application layer's modules, under the paths the terminal's code uses.
use crow_app::{
    compose, config, init, memory, permissions, session_cmd, sessions, slash, stop, wiring,
};
use crow_app::{mcp, setup};

pub mod render;
pub mod tui;
