//! The Kafka wire protocol: which APIs and versions Brook serves, its error
//! codes, request framing, and the hand-written encoders of the hot paths.
//! Message structs and the other codecs come from the `kafka-protocol` crate,
//! generated from Kafka's own schemas.

pub mod errors;
pub mod fetch;
pub mod frame;
pub mod versions;
pub mod wire;
