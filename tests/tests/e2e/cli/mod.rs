//! The `brook` CLI, run as the real binary against a real `brook serve`
//! (issue 7): a module per subcommand, sharing [`common`]'s broker and
//! process helpers.

mod cluster;
mod common;
mod consume;
mod errors;
mod group;
mod log_dump;
mod offsets;
mod produce;
mod topic;
