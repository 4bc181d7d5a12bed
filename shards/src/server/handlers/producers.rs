//! InitProducerId. For idempotent producers (no transactional id): a new
//! producer id from the controller shard's allocator, epoch 0, as Kafka's
//! `TransactionCoordinator.handleInitProducerId` answers a null
//! transactional id (it ignores any producer id and epoch the request
//! carries, KIP-360's bump being for transactional producers). With a
//! transactional id, the id's coordinator decides (see
//! [`super::transactions`]).

use std::rc::Rc;

use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request};
use brook_engine::types::ProducerId;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};

use crate::server::response::{Response, encode};
use crate::server::shard::Shard;

pub async fn init_producer_id(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: InitProducerIdRequest = request.decode_body()?;
    let allocated = match body.transactional_id.as_deref().map(|id| id.as_str()) {
        None => allocate_producer_id(shard).await,
        // Kafka refuses an empty transactional id as malformed.
        Some("") => Err(ErrorCode::INVALID_REQUEST),
        Some(id) => {
            let id = id.to_owned();
            return super::transactions::init_transactional(shard, request, &body, id).await;
        }
    };
    let response = match allocated {
        Ok(producer_id) => InitProducerIdResponse::default()
            .with_producer_id(producer_id.0.into())
            .with_producer_epoch(0),
        Err(error) => InitProducerIdResponse::default()
            .with_error_code(error.0)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1),
    };
    encode(request, &response)
}

/// A fresh producer id from the controller shard.
pub(crate) async fn allocate_producer_id(shard: &Rc<Shard>) -> Result<ProducerId, ErrorCode> {
    let controller = shard.context.controller_shard();
    shard
        .on_shard(controller, |controller| async move {
            let data_dir = controller.context.data_dir.clone();
            controller.producer_ids.allocate(&data_dir).await
        })
        .await
        .unwrap_or(Err(ErrorCode::COORDINATOR_NOT_AVAILABLE))
}
