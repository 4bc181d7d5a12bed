//! Kafka's ACL vocabulary as far as responses carry it: the operation codes
//! (`AclOperation`) and the operations each resource type supports
//! (`AclEntry.supportedOperations`), packed into the 32-bit fields that
//! Metadata, DescribeCluster, DescribeGroups and DescribeTopicPartitions
//! return as "authorized operations".
//!
//! Brook has no authorizer yet, so every supported operation is authorized,
//! as Kafka answers without one (`AuthHelper.authorizedOperations`).

/// `AclOperation` codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum AclOperation {
    Read = 3,
    Write = 4,
    Create = 5,
    Delete = 6,
    Alter = 7,
    Describe = 8,
    ClusterAction = 9,
    DescribeConfigs = 10,
    AlterConfigs = 11,
    IdempotentWrite = 12,
}

/// The resource types whose operations responses report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclResource {
    Topic,
    Group,
    Cluster,
}

/// The value a response carries when the client did not ask for its
/// authorized operations (the schema's default, `Integer.MIN_VALUE`).
pub const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

/// Every operation Kafka supports on `resource`.
pub fn supported_operations(resource: AclResource) -> &'static [AclOperation] {
    use AclOperation::*;
    match resource {
        AclResource::Topic => &[
            Read,
            Write,
            Create,
            Describe,
            Delete,
            Alter,
            DescribeConfigs,
            AlterConfigs,
        ],
        AclResource::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
        AclResource::Cluster => &[
            Create,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite,
            Alter,
            Describe,
        ],
    }
}

/// The authorized-operations field for `resource`: bit `code` set for each
/// supported operation (Kafka's `Utils.to32BitField`).
pub fn authorized_operations(resource: AclResource) -> i32 {
    supported_operations(resource)
        .iter()
        .fold(0, |bits, operation| bits | (1 << *operation as u8))
}

/// The field as a response carries it: the operations when `requested`,
/// else the "not requested" marker.
pub fn authorized_operations_if(requested: bool, resource: AclResource) -> i32 {
    if requested {
        authorized_operations(resource)
    } else {
        AUTHORIZED_OPERATIONS_OMITTED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_have_kafkas_bits() {
        // READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
        assert_eq!(authorized_operations(AclResource::Topic), 0b1101_1111_1000);
        // READ DELETE DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
        assert_eq!(authorized_operations(AclResource::Group), 0b1101_0100_1000);
        // CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE_CONFIGS ALTER_CONFIGS
        // IDEMPOTENT_WRITE
        assert_eq!(
            authorized_operations(AclResource::Cluster),
            0b1_1111_1010_0000
        );
        assert_eq!(
            authorized_operations_if(false, AclResource::Topic),
            i32::MIN
        );
    }
}
