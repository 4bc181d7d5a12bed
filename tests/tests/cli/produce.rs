//! `brook produce` tests: to be written.
