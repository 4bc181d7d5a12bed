//! `brook consume` tests: to be written.
