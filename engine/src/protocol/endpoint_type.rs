//! KIP-919's endpoint types: a DescribeCluster (v1+) says which kind of
//! endpoint it meant to ask, brokers (1) or controllers (2). Brook's client
//! listeners are broker endpoints; its controller listener speaks Brook's
//! own peer frames, not the Kafka protocol.

use crate::protocol::errors::ErrorCode;

/// A broker endpoint, which clients' listeners are.
pub const BROKER: i8 = 1;
/// A controller endpoint (KIP-919: admin clients bootstrapped with
/// `bootstrap.controllers`).
pub const CONTROLLER: i8 = 2;

/// Whether a broker endpoint may answer a DescribeCluster for `requested`
/// endpoints; if not, the error and message Kafka's brokers answer with
/// (`AuthHelper.computeDescribeClusterResponse`): another known type is a
/// mismatch, an unknown one unsupported.
pub fn broker_answers(requested: i8) -> Result<(), (ErrorCode, String)> {
    match requested {
        BROKER => Ok(()),
        CONTROLLER => Err((
            ErrorCode::MISMATCHED_ENDPOINT_TYPE,
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of \
             type CONTROLLER"
                .to_owned(),
        )),
        unknown => Err((
            ErrorCode::UNSUPPORTED_ENDPOINT_TYPE,
            format!("Unsupported endpoint type {unknown}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_answers_for_brokers_only() {
        assert_eq!(broker_answers(BROKER), Ok(()));
        let (mismatch, message) = broker_answers(CONTROLLER).unwrap_err();
        assert_eq!(mismatch, ErrorCode::MISMATCHED_ENDPOINT_TYPE);
        assert!(message.ends_with("wanted an endpoint of type CONTROLLER"));
        for unknown in [0, 3, -1] {
            assert_eq!(
                broker_answers(unknown),
                Err((
                    ErrorCode::UNSUPPORTED_ENDPOINT_TYPE,
                    format!("Unsupported endpoint type {unknown}")
                ))
            );
        }
    }
}
