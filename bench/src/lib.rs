//! Brook's measurements.
