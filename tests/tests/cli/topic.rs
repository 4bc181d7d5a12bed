//! `brook topic` tests: to be written.
