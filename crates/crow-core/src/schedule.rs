//! Orders the tool calls of one response: calls whose [`Footprint`]s conflict run one after
//! another in call order, each on the result of the one before; the others run at once.
//! Without it, five edits of one file in one response all read the same original and the
//! last write wins, while every call reports success.

use std::future::Future;

use futures::FutureExt;
use futures::channel::oneshot;
use futures::future::{Shared, join_all};

use crate::tool::Footprint;

/// Released when a call's future ends: finished, or dropped on cancellation.
pub(crate) struct Finished {
    _sender: oneshot::Sender<()>,
}

/// The calls admitted so far, in call order.
#[derive(Default)]
pub(crate) struct CallOrder {
    earlier: Vec<(Footprint, Shared<oneshot::Receiver<()>>)>,
}

impl CallOrder {
    /// Admits the next call: returns what it must wait for before it runs (every earlier call
    /// it conflicts with) and the guard to hold while it runs.
    pub(crate) fn admit(
        &mut self,
        footprint: Footprint,
    ) -> (impl Future<Output = ()> + use<>, Finished) {
        let before: Vec<_> = self
            .earlier
            .iter()
            .filter(|(other, _)| other.conflicts_with(&footprint))
            .map(|(_, done)| done.clone())
            .collect();
        let (tx, rx) = oneshot::channel();
        if footprint != Footprint::Nothing {
            self.earlier.push((footprint, rx.shared()));
        }
        // The channel only ever closes (the sender is dropped, never used), so each wait ends
        // when that call's future ends.
        (join_all(before).map(|_| ()), Finished { _sender: tx })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::PathBuf;

    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn conflicts_follow_paths_and_directories() {
        let read = |s| Footprint::Reads(vec![p(s)]);
        let write = |s| Footprint::Writes(vec![p(s)]);
        assert!(!read("/r/a").conflicts_with(&read("/r/a")));
        assert!(write("/r/a").conflicts_with(&read("/r/a")));
        assert!(read("/r/a").conflicts_with(&write("/r/a")));
        assert!(write("/r/a").conflicts_with(&write("/r/a")));
        assert!(!write("/r/a").conflicts_with(&write("/r/b")));
        assert!(
            !write("/r/ab").conflicts_with(&read("/r/a")),
            "a name prefix is not a parent"
        );
        assert!(
            write("/r/src/x.rs").conflicts_with(&read("/r/src")),
            "a search of its directory"
        );
        assert!(read("/r").conflicts_with(&write("/r/src/x.rs")));
        assert!(Footprint::Anything.conflicts_with(&read("/r/a")));
        assert!(!Footprint::Anything.conflicts_with(&Footprint::Anything));
        assert!(write("/r/a").conflicts_with(&Footprint::Anything));
        assert!(!Footprint::Anything.conflicts_with(&Footprint::Nothing));
        assert!(!Footprint::Nothing.conflicts_with(&write("/r/a")));
    }

    #[tokio::test]
    async fn a_conflicting_call_waits_until_the_earlier_one_ends() {
        let mut order = CallOrder::default();
        let (first_wait, first_done) = order.admit(Footprint::Writes(vec![p("/r/a")]));
        let (other_wait, _other_done) = order.admit(Footprint::Writes(vec![p("/r/b")]));
        let (second_wait, _second_done) = order.admit(Footprint::Reads(vec![p("/r/a")]));
        let (free_wait, _free_done) = order.admit(Footprint::Nothing);
        first_wait.await;
        other_wait.await;
        free_wait.await;
        let mut second_wait = Box::pin(second_wait);
        assert!(futures::poll!(&mut second_wait).is_pending());
        drop(first_done);
        second_wait.await;
    }
}
