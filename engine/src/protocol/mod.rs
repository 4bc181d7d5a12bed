//! The Kafka wire protocol: which APIs and versions Brook serves, its error
//! codes, request framing, the hand-written encoders of the hot paths, and
//! the primitives of the internal topics' record schemas.
//! Message structs and the other codecs come from the `kafka-protocol` crate,
//! generated from Kafka's own schemas.

pub mod acl;
pub mod endpoint_type;
pub mod errors;
pub mod fetch;
pub mod fetch_session;
pub mod frame;
pub mod schema_wire;
pub mod versions;
pub mod wire;
