//! Background threads that must never compete with the request path for CPU.

/// Ask the OS to run the calling thread only on otherwise idle CPU time (Linux `SCHED_IDLE`):
/// on a small machine its work (the ledger's writer, the team ledger's shipper) then never
/// delays the proxy's own thread or the agent. Under full load it falls behind; whatever waits
/// is bounded by the caller (the writer's queue, the shipper's backlog on disk). Elsewhere, or
/// if the OS refuses, the thread keeps its priority.
pub fn run_on_idle_cpu(thread: &str) {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{
            NormalThreadSchedulePolicy, ThreadSchedulePolicy, set_thread_priority_and_policy,
            thread_native_id,
        };
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        if let Err(e) = set_thread_priority_and_policy(
            thread_native_id(),
            thread_priority::ThreadPriority::Min,
            idle,
        ) {
            tracing::debug!(error = ?e, "{thread} keeps normal priority");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = thread;
}
