//! The per-user sweep: how calls end on a host where they have no cgroup
//! at all (no cgroup v2, no v1 `pids` or `memory` hierarchy).
//!
//! Without a cgroup, a process that left its call's process group
//! (`setsid`, a double fork, `nohup`) cannot be told apart from the user's
//! other processes. So the worker counts each user's live calls, and when
//! the last one ends it has the launcher, dropped to that user, kill every
//! process of the uid (`kill(-1, SIGKILL)` as the user: the kernel picks
//! the processes, no pid is read from anywhere).
//!
//! Guarantees: nothing is swept while any call of the user is live; a new
//! call of the user waits while a sweep runs, so a sweep never kills a call
//! that started after it. The guarantee is weaker than a cgroup's, and
//! `tono-seal verify` says so: an escaped process lives until the user's
//! last live call ends, and every other process of that uid (a login
//! session of a person using the same account) is killed with it. A call
//! whose future is dropped is counted out but does not sweep.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// How long a sweep may take.
pub const SWEEP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct UserCalls {
    live: usize,
    /// Set while a sweep of the user runs; new calls wait for it.
    sweeping: Option<Arc<Notify>>,
}

static USERS: Mutex<Option<HashMap<u32, UserCalls>>> = Mutex::new(None);

fn with_user<T>(uid: u32, f: impl FnOnce(&mut UserCalls) -> T) -> T {
    let mut users = USERS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let calls = users
        .get_or_insert_with(HashMap::new)
        .entry(uid)
        .or_default();
    f(calls)
}

/// A live call of a user on a host without cgroups.
#[must_use = "a live call must be ended, or it is never swept"]
pub struct LiveCall {
    uid: u32,
    counted: bool,
}

/// Counts a call of `uid` as live, first waiting for a sweep of that user
/// to finish.
pub async fn begin(uid: u32) -> LiveCall {
    loop {
        let wait = with_user(uid, |calls| match &calls.sweeping {
            Some(notify) => {
                let notify = notify.clone();
                Some(async move { notify.notified().await })
            }
            None => {
                calls.live += 1;
                None
            }
        });
        match wait {
            // `notified()` was created under the lock, before the sweeper
            // can call `notify_waiters`, so no wake-up is missed.
            Some(waiting) => waiting.await,
            None => return LiveCall { uid, counted: true },
        }
    }
}

impl LiveCall {
    /// Counts the call out; if it was the user's last, runs `sweep` (which
    /// has the launcher, as the user, kill every process of the uid) while
    /// new calls of the user wait, and returns what it said (`Ok` with the
    /// number of other live calls when it did not run).
    pub async fn end<F, Fut>(mut self, sweep_user: F) -> Result<usize, String>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        self.counted = false;
        let sweep = with_user(self.uid, |calls| {
            calls.live -= 1;
            if calls.live > 0 {
                return Err(calls.live);
            }
            let notify = Arc::new(Notify::new());
            calls.sweeping = Some(notify.clone());
            Ok(notify)
        });
        let notify = match sweep {
            Ok(notify) => notify,
            Err(others) => return Ok(others),
        };
        let result = sweep_user().await;
        with_user(self.uid, |calls| calls.sweeping = None);
        notify.notify_waiters();
        result.map(|()| 0)
    }
}

impl Drop for LiveCall {
    fn drop(&mut self) {
        if self.counted {
            with_user(self.uid, |calls| calls.live -= 1);
        }
    }
}
