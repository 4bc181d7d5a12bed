//! `brook errors` tests: to be written.
