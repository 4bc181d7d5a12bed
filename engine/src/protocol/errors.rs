//! Kafka's error codes (the wire values of `org.apache.kafka.common.protocol.Errors`)
//! that Brook returns, and how storage failures map onto them.

/// A Kafka protocol error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub i16);

impl ErrorCode {
    pub const NONE: ErrorCode = ErrorCode(0);
    pub const UNKNOWN_SERVER_ERROR: ErrorCode = ErrorCode(-1);
    pub const OFFSET_OUT_OF_RANGE: ErrorCode = ErrorCode(1);
    pub const CORRUPT_MESSAGE: ErrorCode = ErrorCode(2);
    pub const UNKNOWN_TOPIC_OR_PARTITION: ErrorCode = ErrorCode(3);
    pub const INVALID_FETCH_SIZE: ErrorCode = ErrorCode(4);
    pub const LEADER_NOT_AVAILABLE: ErrorCode = ErrorCode(5);
    pub const NOT_LEADER_OR_FOLLOWER: ErrorCode = ErrorCode(6);
    pub const REQUEST_TIMED_OUT: ErrorCode = ErrorCode(7);
    pub const REPLICA_NOT_AVAILABLE: ErrorCode = ErrorCode(9);
    pub const NETWORK_EXCEPTION: ErrorCode = ErrorCode(13);
    pub const MESSAGE_TOO_LARGE: ErrorCode = ErrorCode(10);
    pub const INVALID_TOPIC_EXCEPTION: ErrorCode = ErrorCode(17);
    pub const RECORD_LIST_TOO_LARGE: ErrorCode = ErrorCode(18);
    pub const NOT_ENOUGH_REPLICAS: ErrorCode = ErrorCode(19);
    pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode = ErrorCode(20);
    pub const INVALID_REQUIRED_ACKS: ErrorCode = ErrorCode(21);
    pub const INVALID_TIMESTAMP: ErrorCode = ErrorCode(32);
    pub const UNSUPPORTED_VERSION: ErrorCode = ErrorCode(35);
    pub const TOPIC_ALREADY_EXISTS: ErrorCode = ErrorCode(36);
    pub const INVALID_PARTITIONS: ErrorCode = ErrorCode(37);
    pub const INVALID_REPLICATION_FACTOR: ErrorCode = ErrorCode(38);
    pub const INVALID_REPLICA_ASSIGNMENT: ErrorCode = ErrorCode(39);
    pub const INVALID_REQUEST: ErrorCode = ErrorCode(42);
    pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: ErrorCode = ErrorCode(43);
    pub const POLICY_VIOLATION: ErrorCode = ErrorCode(44);
    pub const INVALID_CONFIG: ErrorCode = ErrorCode(40);
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: ErrorCode = ErrorCode(45);
    pub const INVALID_PRODUCER_EPOCH: ErrorCode = ErrorCode(47);
    pub const DUPLICATE_SEQUENCE_NUMBER: ErrorCode = ErrorCode(46);
    pub const INVALID_TXN_STATE: ErrorCode = ErrorCode(48);
    pub const INVALID_PRODUCER_ID_MAPPING: ErrorCode = ErrorCode(49);
    pub const INVALID_TRANSACTION_TIMEOUT: ErrorCode = ErrorCode(50);
    pub const CONCURRENT_TRANSACTIONS: ErrorCode = ErrorCode(51);
    pub const TRANSACTION_COORDINATOR_FENCED: ErrorCode = ErrorCode(52);
    pub const UNKNOWN_PRODUCER_ID: ErrorCode = ErrorCode(59);
    pub const UNSTABLE_OFFSET_COMMIT: ErrorCode = ErrorCode(88);
    pub const PRODUCER_FENCED: ErrorCode = ErrorCode(90);
    pub const TRANSACTIONAL_ID_NOT_FOUND: ErrorCode = ErrorCode(105);
    pub const TRANSACTION_ABORTABLE: ErrorCode = ErrorCode(120);
    pub const OFFSET_METADATA_TOO_LARGE: ErrorCode = ErrorCode(12);
    pub const COORDINATOR_LOAD_IN_PROGRESS: ErrorCode = ErrorCode(14);
    pub const COORDINATOR_NOT_AVAILABLE: ErrorCode = ErrorCode(15);
    pub const NOT_COORDINATOR: ErrorCode = ErrorCode(16);
    pub const ILLEGAL_GENERATION: ErrorCode = ErrorCode(22);
    pub const INCONSISTENT_GROUP_PROTOCOL: ErrorCode = ErrorCode(23);
    pub const INVALID_GROUP_ID: ErrorCode = ErrorCode(24);
    pub const UNKNOWN_MEMBER_ID: ErrorCode = ErrorCode(25);
    pub const INVALID_SESSION_TIMEOUT: ErrorCode = ErrorCode(26);
    pub const REBALANCE_IN_PROGRESS: ErrorCode = ErrorCode(27);
    pub const NON_EMPTY_GROUP: ErrorCode = ErrorCode(68);
    pub const GROUP_ID_NOT_FOUND: ErrorCode = ErrorCode(69);
    pub const MEMBER_ID_REQUIRED: ErrorCode = ErrorCode(79);
    pub const GROUP_MAX_SIZE_REACHED: ErrorCode = ErrorCode(81);
    pub const FENCED_INSTANCE_ID: ErrorCode = ErrorCode(82);
    pub const GROUP_SUBSCRIBED_TO_TOPIC: ErrorCode = ErrorCode(86);
    pub const KAFKA_STORAGE_ERROR: ErrorCode = ErrorCode(56);
    pub const LOG_DIR_NOT_FOUND: ErrorCode = ErrorCode(57);
    pub const UNKNOWN_LEADER_EPOCH: ErrorCode = ErrorCode(75);
    pub const FENCED_LEADER_EPOCH: ErrorCode = ErrorCode(74);
    pub const INVALID_RECORD: ErrorCode = ErrorCode(87);
    /// ListOffsets asked a new leader whose HW is still behind the start of
    /// its epoch (KIP-207); retriable.
    pub const OFFSET_NOT_AVAILABLE: ErrorCode = ErrorCode(78);
    pub const UNKNOWN_TOPIC_ID: ErrorCode = ErrorCode(100);
    pub const INCONSISTENT_TOPIC_ID: ErrorCode = ErrorCode(103);
    pub const FETCH_SESSION_ID_NOT_FOUND: ErrorCode = ErrorCode(70);
    pub const INVALID_FETCH_SESSION_EPOCH: ErrorCode = ErrorCode(71);
    pub const FETCH_SESSION_TOPIC_ID_ERROR: ErrorCode = ErrorCode(106);
    pub const RESOURCE_NOT_FOUND: ErrorCode = ErrorCode(91);
    pub const INVALID_REGULAR_EXPRESSION: ErrorCode = ErrorCode(128);
    pub const NOT_CONTROLLER: ErrorCode = ErrorCode(41);
    pub const STALE_BROKER_EPOCH: ErrorCode = ErrorCode(77);
    pub const DUPLICATE_BROKER_REGISTRATION: ErrorCode = ErrorCode(101);
    pub const BROKER_ID_NOT_REGISTERED: ErrorCode = ErrorCode(102);
    pub const INCONSISTENT_CLUSTER_ID: ErrorCode = ErrorCode(104);
    /// AlterPartition's partition epoch is not the controller's (KIP-497).
    pub const INVALID_UPDATE_VERSION: ErrorCode = ErrorCode(95);
    /// AlterPartition's new ISR names a fenced, unregistered or shutting-down
    /// broker (KIP-841).
    pub const INELIGIBLE_REPLICA: ErrorCode = ErrorCode(107);
    /// ElectLeaders (preferred): the first replica may not lead now.
    pub const PREFERRED_LEADER_NOT_AVAILABLE: ErrorCode = ErrorCode(80);
    /// ElectLeaders (unclean): no replica may lead.
    pub const ELIGIBLE_LEADERS_NOT_AVAILABLE: ErrorCode = ErrorCode(83);
    /// ElectLeaders: the partition already has the leader asked for.
    pub const ELECTION_NOT_NEEDED: ErrorCode = ErrorCode(84);
    /// DescribeCluster asked a broker for controller endpoints (KIP-919).
    pub const MISMATCHED_ENDPOINT_TYPE: ErrorCode = ErrorCode(114);
    /// DescribeCluster asked for an endpoint type Kafka does not know.
    pub const UNSUPPORTED_ENDPOINT_TYPE: ErrorCode = ErrorCode(115);

    pub fn is_error(self) -> bool {
        self != ErrorCode::NONE
    }

    /// Kafka's `Errors.message()`: the error's default message, "NONE" for
    /// no error, and "UNKNOWN" for one Brook has no text for. Some
    /// responses (FindCoordinator v1-3) carry it as their error message.
    pub fn message(self) -> &'static str {
        match self {
            ErrorCode::NONE => "NONE",
            ErrorCode::UNKNOWN_SERVER_ERROR => {
                "The server experienced an unexpected error when processing the request."
            }
            ErrorCode::COORDINATOR_LOAD_IN_PROGRESS => {
                "The coordinator is loading and hence can't process requests."
            }
            ErrorCode::COORDINATOR_NOT_AVAILABLE => "The coordinator is not available.",
            ErrorCode::NOT_COORDINATOR => "This is not the correct coordinator.",
            ErrorCode::INVALID_REQUEST => {
                "This most likely occurs because of a request being malformed by the client \
                 library or the message was sent to an incompatible broker. See the broker logs \
                 for more details."
            }
            ErrorCode::KAFKA_STORAGE_ERROR => {
                "Disk error when trying to access log file on the disk."
            }
            ErrorCode::INVALID_RECORD => {
                "This record has failed the validation on broker and hence will be rejected."
            }
            ErrorCode::INVALID_TIMESTAMP => {
                "The timestamp of the message is out of acceptable range."
            }
            ErrorCode::NOT_ENOUGH_REPLICAS => {
                "Messages are rejected since there are fewer in-sync replicas than required."
            }
            ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND => {
                "Messages are written to the log, but to fewer in-sync replicas than required."
            }
            _ => "UNKNOWN",
        }
    }
}

/// No error, as an absent error field means on the wire.
impl Default for ErrorCode {
    fn default() -> ErrorCode {
        ErrorCode::NONE
    }
}

impl From<ErrorCode> for i16 {
    fn from(code: ErrorCode) -> i16 {
        code.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_kafkas_defaults() {
        assert_eq!(ErrorCode::NONE.message(), "NONE");
        assert_eq!(
            ErrorCode::COORDINATOR_NOT_AVAILABLE.message(),
            "The coordinator is not available."
        );
        assert!(
            ErrorCode::INVALID_REQUEST
                .message()
                .ends_with("for more details.")
        );
        assert_eq!(ErrorCode(9999).message(), "UNKNOWN");
    }
}
