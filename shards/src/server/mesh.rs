//! The shard mesh: every shard can run a job on any other shard and get its
//! result back. A job is a `Send` closure that builds a local future on the
//! target shard; results cross back through a oneshot. Channels are bounded,
//! so a flooded shard pushes back on its senders.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use futures::channel::oneshot;
use thiserror::Error;

use crate::server::shard::Shard;

/// Jobs waiting for one shard before senders wait.
pub const MESH_QUEUE_MAX: usize = 4096;

pub type Job = Box<dyn FnOnce(Rc<Shard>) -> Pin<Box<dyn Future<Output = ()>>> + Send>;
pub type MeshSender = flume::Sender<Job>;
pub type MeshReceiver = flume::Receiver<Job>;

#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
#[error("shard {0} is not running")]
pub struct ShardGone(pub u16);

/// One bounded channel per shard.
pub fn channels(shards: u16) -> (Vec<MeshSender>, Vec<MeshReceiver>) {
    (0..shards).map(|_| flume::bounded(MESH_QUEUE_MAX)).unzip()
}

/// Wraps a job so its result is sent back through a oneshot.
pub fn job_with_reply<F, Fut, R>(job: F) -> (Job, oneshot::Receiver<R>)
where
    F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
    Fut: Future<Output = R> + 'static,
    R: Send + 'static,
{
    let (sender, receiver) = oneshot::channel();
    let boxed: Job = Box::new(move |shard| {
        Box::pin(async move {
            let _ = sender.send(job(shard).await);
        })
    });
    (boxed, receiver)
}
