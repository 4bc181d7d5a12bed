//! The heartbeat of one generation: a task beating every third of the
//! session, ended by the member before it joins again, or by itself when
//! the coordinator says the generation is over or that it moved, which it
//! reports in the flag the fetch loop reads.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;

use kafka_protocol::messages::{ApiKey, HeartbeatRequest, HeartbeatResponse};

use super::{COORDINATOR_MOVED, GENERATION_OVER, HEARTBEAT_INTERVAL};
use crate::cli::{CliError, Session};

const HEARTBEAT_VERSION: i16 = 4;

/// The heartbeat task of one generation.
pub(super) struct Heartbeat {
    pub session: Rc<Session>,
    pub coordinator: SocketAddr,
    pub request: HeartbeatRequest,
    pub rejoin: Rc<Cell<bool>>,
}

impl Heartbeat {
    /// Beats until the generation is over, or the coordinator moved (the
    /// join finds the new one). A beat that got no answer is tried again at
    /// the next: a session that lapsed meanwhile shows as UNKNOWN_MEMBER_ID.
    pub async fn run(self) {
        loop {
            glommio::timer::sleep(HEARTBEAT_INTERVAL).await;
            let answer: Result<HeartbeatResponse, CliError> = self
                .session
                .request(
                    self.coordinator,
                    ApiKey::Heartbeat,
                    HEARTBEAT_VERSION,
                    &self.request,
                )
                .await;
            let over =
                |code: i16| GENERATION_OVER.contains(&code) || COORDINATOR_MOVED.contains(&code);
            if answer.is_ok_and(|response| over(response.error_code)) {
                self.rejoin.set(true);
                return;
            }
        }
    }
}
