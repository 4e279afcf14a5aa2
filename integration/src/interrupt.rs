//! Benchmarks that start kubelets and runtimes as child processes stop them when they are
//! interrupted. Their guards (`KubeletProc`, `ShimProcess`, temporary directories) stop the
//! children when dropped, but a process killed by SIGINT or SIGTERM drops nothing: the children
//! kept running, orphaned, and weighed on the next measurement. [`until_interrupted`] turns
//! either signal into dropping the benchmark's future, so the guards run.

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};

/// Runs `work` until it ends or the process gets SIGINT or SIGTERM; then `work` is dropped
/// (with every guard it holds) and the answer is an error naming the signal. The handlers are
/// in place when this returns, before the future is first polled.
pub fn until_interrupted<T>(
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<impl Future<Output = anyhow::Result<T>>> {
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        let name = tokio::select! {
            result = work => return result,
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        anyhow::bail!(
            "stopped by {name}: the kubelets and runtimes it started are stopped; \
             pods it created may remain"
        )
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    struct Guard(Arc<AtomicBool>);

    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_sigterm_drops_the_work_and_its_guards() {
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = Guard(dropped.clone());
        let work = async move {
            let _guard = guard;
            std::future::pending::<anyhow::Result<()>>().await
        };
        let stopped = until_interrupted(work).expect("signal handlers");
        // SAFETY: kill(2) to this process; the handler above catches the signal.
        assert_eq!(unsafe { libc::kill(libc::getpid(), libc::SIGTERM) }, 0);
        let err = stopped.await.expect_err("stopped by the signal");
        assert!(err.to_string().contains("SIGTERM"), "{err}");
        assert!(dropped.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn work_that_ends_answers_as_it_is() {
        let answer = until_interrupted(async { Ok(7) }).expect("signal handlers");
        assert_eq!(answer.await.expect("no signal"), 7);
    }
}
