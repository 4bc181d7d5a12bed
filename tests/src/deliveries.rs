//! A producer context that records librdkafka's delivery reports, so a test
//! knows where each keyed record landed (or why it did not).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rdkafka::ClientContext;
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::ProducerContext;

/// Delivery reports: key → (partition, offset), and the errors.
#[derive(Clone, Debug, Default)]
pub struct Deliveries {
    pub delivered: Arc<Mutex<HashMap<String, (i32, i64)>>>,
    pub errors: Arc<Mutex<Vec<String>>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(message) => {
                let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
                self.delivered
                    .lock()
                    .unwrap()
                    .insert(key, (message.partition(), message.offset()));
            }
            Err((error, _)) => self.errors.lock().unwrap().push(error.to_string()),
        }
    }
}
