//! `brook group` tests: to be written.
